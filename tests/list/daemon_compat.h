/* issue 14's provider cases through agentloopd: TEST_ENTRY(name) lines only. */
TEST_ENTRY(daemon_compat_responses)
TEST_ENTRY(daemon_compat_deepseek_reasoning)
TEST_ENTRY(daemon_compat_pause_turn_citations)
TEST_ENTRY(daemon_compat_openai_citations_notice)
TEST_ENTRY(daemon_compat_content_parts)
TEST_ENTRY(daemon_compat_openrouter_details)
