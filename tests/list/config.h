/* configuration tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(config_precedence_matrix)
TEST_ENTRY(config_origins)
TEST_ENTRY(config_errors_file_line_col)
TEST_ENTRY(config_files_and_trust)
TEST_ENTRY(config_permission_rules)
TEST_ENTRY(config_run_uses_user_file)
TEST_ENTRY(config_show_origin_cli)
