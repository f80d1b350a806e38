/* issue 22, configuration and YAML (defects 3, 4, 15) and rules of the
 * loop no other test guarded (defect 14): TEST_ENTRY(name) lines only. */
TEST_ENTRY(yaml_billion_laughs_refused_in_every_loader)
TEST_ENTRY(yaml_aliases_within_bounds)
TEST_ENTRY(yaml_deep_nesting_refused)
TEST_ENTRY(yaml_load_work_linear)
TEST_ENTRY(budget_web_search_pause_continues)
TEST_ENTRY(budget_outlier_bounded)
TEST_ENTRY(validity_orphan_beside_real_results)
TEST_ENTRY(compact_refusal_at_95_edge)
TEST_ENTRY(compact_keeps_first_message_blocks)
TEST_ENTRY(nul_in_block_start_payload)
TEST_ENTRY(transport_raw_header_bytes_bounded)
TEST_ENTRY(yaml_billion_laughs_refused_by_programs)
