/* post_tool_use hooks per call (tests/unit/hooks/test_post_hooks.c). */
TEST_ENTRY(post_hooks_run_per_call)
TEST_ENTRY(post_hooks_replace_and_context_per_call)
TEST_ENTRY(post_hooks_fail_closed_per_call)
TEST_ENTRY(post_hooks_c_callback_per_call)
TEST_ENTRY(post_hooks_cancel_kills_hook)
