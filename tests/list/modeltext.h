/* model text with NUL made safe (issue 15): TEST_ENTRY lines only. */
TEST_ENTRY(cli_run_model_text_nul)
TEST_ENTRY(daemon_model_text_nul_resumes)
TEST_ENTRY(json_scrub_nul_everywhere)
TEST_ENTRY(cli_run_model_text_invalid_utf8)
TEST_ENTRY(daemon_model_text_invalid_utf8)
