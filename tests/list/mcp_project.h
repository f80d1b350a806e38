/* agentloopd and a project's .mcp.json (tests/unit/mcp/test_daemon_mcp_project.c). */
TEST_ENTRY(daemon_mcp_project_trusted)
TEST_ENTRY(daemon_mcp_project_untrusted)
TEST_ENTRY(daemon_mcp_project_broken_file)
TEST_ENTRY(daemon_mcp_project_read_off_loop)
