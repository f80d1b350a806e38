/* MCP call and start-up events (tests/unit/mcp/test_mcp_events.c). */
TEST_ENTRY(mcp_events_call_begin_end)
TEST_ENTRY(mcp_events_end_on_server_crash)
TEST_ENTRY(mcp_events_end_on_timeout)
TEST_ENTRY(mcp_events_end_on_cancel)
TEST_ENTRY(mcp_events_startup_pending_and_failed)
TEST_ENTRY(mcp_view_run_text)
TEST_ENTRY(mcp_view_chat)
