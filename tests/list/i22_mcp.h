/* MCP defects of issue 22 (tests/unit/mcp/test_i22_mcp.c,
 * test_i22_mcp_http.c). */
TEST_ENTRY(mcp_stdio_server_env_has_no_keys)
TEST_ENTRY(mcp_http_server_stream_backoff)
TEST_ENTRY(mcp_http_server_stream_honours_retry)
TEST_ENTRY(mcp_http_server_stream_window_bound)
TEST_ENTRY(mcp_http_server_stream_gives_up_with_notice)
