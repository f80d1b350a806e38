/* First-minute failures of issue 12 (agentloop run). */
TEST_ENTRY(cli_run_relative_cwd)
TEST_ENTRY(cli_run_local_url_needs_no_key)
TEST_ENTRY(cli_run_unknown_tool_name_is_usage_error)
TEST_ENTRY(cli_run_denied_tool_not_offered)
TEST_ENTRY(agent_exec_approval_wait_not_in_duration)
TEST_ENTRY(cli_run_session_resume_and_continue)
TEST_ENTRY(cli_run_stream_json)
TEST_ENTRY(cli_run_stream_json_input)
