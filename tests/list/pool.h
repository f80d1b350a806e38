/* warm sandbox pool tests (src/sandbox/pool.c): TEST_ENTRY lines only. */
TEST_ENTRY(pool_one_command_per_sandbox)
TEST_ENTRY(pool_plan_change_retires_warm)
TEST_ENTRY(pool_cancel_during_handoff_leaves_nothing)
TEST_ENTRY(pool_timeout_during_handoff_leaves_nothing)
TEST_ENTRY(pool_closed_with_its_sandbox)
TEST_ENTRY(pool_idle_time_retires_warm)
TEST_ENTRY(pool_grows_with_concurrent_tools)
TEST_ENTRY(pool_parent_sigkill_leaves_no_process)
