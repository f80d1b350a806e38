/* no trace of the sandbox in the workspace (issue 15, point 8). */
TEST_ENTRY(sandbox_sigkill_mid_tool_leaves_tree)
TEST_ENTRY(sandbox_sibling_placeholders_leave_nothing)
TEST_ENTRY(tools_cmd_quiet_on_empty_tools_d)
TEST_ENTRY(sandbox_two_agents_share_placeholders)
TEST_ENTRY(sandbox_double_sigkill_swept_by_next_agent)
TEST_ENTRY(sandbox_two_sessions_share_placeholders)
TEST_ENTRY(janitor_kills_orphaned_sandbox)
