/* agent resume tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(agent_commit_hook_rebuilds_history)
TEST_ENTRY(agent_commit_hook_cancel_mid_tool)
TEST_ENTRY(agent_load_history_resumes)
TEST_ENTRY(agent_load_history_refusals)
