/* common tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(common_buf_bounds)
TEST_ENTRY(common_buf_printf_consume)
TEST_ENTRY(common_errno_table)
TEST_ENTRY(common_alloc_hook_reaches_libs)
TEST_ENTRY(common_version)
TEST_ENTRY(runner_timeout_kills_test)
TEST_ENTRY(runner_hang_probe)
HELPER_ENTRY(exit_code)
