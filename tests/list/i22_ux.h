/* Issue 22, defect 10: what a user meets in the first hour. */
TEST_ENTRY(ux_tool_output_cut_says_how_much)
TEST_ENTRY(ux_md_wide_table_fits_terminal)
TEST_ENTRY(ux_compaction_not_shown_as_answer)
TEST_ENTRY(ux_usage_cost_text)
TEST_ENTRY(ux_models_end_of_life)
TEST_ENTRY(ux_run_deprecated_model_warns)
TEST_ENTRY(ux_chat_deprecated_model_warns)
TEST_ENTRY(ux_daemon_usage_has_cost)
