/* agentloopd's own limits: defaults and ceilings: TEST_ENTRY lines only. */
TEST_ENTRY(daemon_limits_defaults_and_ceilings)
TEST_ENTRY(daemon_limits_bad_config_exit_2)
TEST_ENTRY(cli_run_limit_file_scan)
