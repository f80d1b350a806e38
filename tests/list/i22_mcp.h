/* MCP defects of issue 22 (tests/unit/mcp/test_i22_mcp.c,
 * test_i22_mcp_http.c). */
TEST_ENTRY(mcp_stdio_server_env_has_no_keys)
