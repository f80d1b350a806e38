/* A main agent from a definition (issue 24, a batch job's "agent";
 * tests/unit/loop/test_main_agent.c, tests/unit/batch/test_batch.c):
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(agent_tools_only_every_source)
TEST_ENTRY(agent_tools_only_empty_means_none)
TEST_ENTRY(batch_job_agent_definition)
