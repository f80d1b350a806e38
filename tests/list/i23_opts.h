/* issue 23, configuration -> agent options (src/config/agent_opts.c):
 * the front ends agree, every section lands, a child's preamble.
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(agent_opts_front_ends_agree)
TEST_ENTRY(agent_opts_sections_land)
TEST_ENTRY(agent_opts_bad_section)
TEST_ENTRY(sysprompt_preamble_for_children)
TEST_ENTRY(agent_opts_allocation_failures)
