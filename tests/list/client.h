/* client tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(cli_run_streams_anthropic)
TEST_ENTRY(cli_run_streams_openai)
TEST_ENTRY(cli_run_http_error_exit_1)
TEST_ENTRY(cli_run_stream_error_event_exit_1)
TEST_ENTRY(cli_run_reset_mid_stream_exit_1)
TEST_ENTRY(cli_run_usage_errors_exit_2)
TEST_ENTRY(cli_version_lists_libraries)
TEST_ENTRY(cli_run_sigint_cancels_exit_130)
