/* MCP Streamable HTTP tests (tests/unit/mcp/test_mcp_http.c). */
TEST_ENTRY(mcp_http_handshake_json)
TEST_ENTRY(mcp_http_handshake_sse)
TEST_ENTRY(mcp_http_expired_session_reinitializes_once)
TEST_ENTRY(mcp_http_expired_twice_fails)
TEST_ENTRY(mcp_http_broken_stream_resumes)
TEST_ENTRY(mcp_http_broken_stream_without_ids_fails)
TEST_ENTRY(mcp_http_silent_server_times_out)
TEST_ENTRY(mcp_http_config)
