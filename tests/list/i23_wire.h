/* issue 23, sub-agents in users' hands: the subagents: section, the
 * definitions wired into run, the chat and the daemon, `agentloop agents`.
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(wire_config_subagents_section)
TEST_ENTRY(wire_run_user_agent_definition)
TEST_ENTRY(wire_agents_command_lists)
TEST_ENTRY(wire_daemon_session_agent_definition)
TEST_ENTRY(wire_header_keeps_subagents)
TEST_ENTRY(run_waits_for_background_subagent)
