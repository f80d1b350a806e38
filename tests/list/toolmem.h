/* tool memory limit relative to the machine: TEST_ENTRY lines only. */
TEST_ENTRY(sandbox_tool_memory_share_of_machine)
TEST_ENTRY(sandbox_tool_memory_share_degraded)
TEST_ENTRY(sandbox_tool_cannot_touch_past_limit)
TEST_ENTRY(sandbox_tool_cannot_touch_past_limit_degraded)
