/* Issue 22, the daemon (tests/unit/daemon/test_daemon_i22.c): open-file
 * limits, the client's configuration at session/create and resume, a
 * restart after SIGKILL on a full state disk. TEST_ENTRY lines only. */
TEST_ENTRY(daemon_500_sessions_at_1024_fds)
TEST_ENTRY(daemon_fd_limit_typed_refusal)
TEST_ENTRY(daemon_new_session_uses_current_config)
TEST_ENTRY(daemon_resume_keeps_session_settings)
TEST_ENTRY(daemon_sigkill_full_disk_restart_answers)
TEST_ENTRY(client_retries_connection_dropped_before_answer)
TEST_ENTRY(daemon_unload_keeps_failing_writer)
TEST_ENTRY(client_says_why_turned_away)
TEST_ENTRY(daemon_run_keeps_its_own_session_loaded)
