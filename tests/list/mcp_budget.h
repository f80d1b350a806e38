/* MCP tool budget tests (tests/unit/mcp/test_mcp_budget.c). */
TEST_ENTRY(agent_mcp_budget_defers_and_loads)
TEST_ENTRY(agent_mcp_budget_under_sends_all)
TEST_ENTRY(agent_mcp_budget_tool_count)
TEST_ENTRY(agent_mcp_budget_always_load)
TEST_ENTRY(mcp_budget_config)
TEST_ENTRY(agent_mcp_budget_search_name_taken)
