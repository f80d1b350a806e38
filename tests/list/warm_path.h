/* warm path second wave (stdin hand-off, async cold start, lock): TEST_ENTRY lines only. */
TEST_ENTRY(warm_stdin_pipe_through_handoff)
TEST_ENTRY(warm_stdin_default_is_devnull)
TEST_ENTRY(cold_cancel_during_async_plan_starts_nothing)
TEST_ENTRY(cold_async_start_runs_and_fails_as_sync)
TEST_ENTRY(loop_never_waits_on_sandbox_lock)
TEST_ENTRY(pool_own_cleanup_keeps_plan)
TEST_ENTRY(cold_timeout_during_async_plan_starts_nothing)
TEST_ENTRY(loop_never_waits_on_janitor_lock)
