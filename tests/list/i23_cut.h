/* The agent in layers (STYLE §6.1, issue 23): the driver's states for the
 * hook and MCP waits. TEST_ENTRY lines only. */
TEST_ENTRY(agent_state_trace_hooks)
TEST_ENTRY(agent_state_trace_mcp_wait)
