/* Shared pacing across sessions (issue 24; tests/unit/loop/test_i24_pace.c):
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(i24_pace_gate_math)
TEST_ENTRY(i24_pace_429_cooldown_shared_no_storm)
TEST_ENTRY(i24_pace_rpm_cap_spreads_requests)
TEST_ENTRY(i24_pace_cancel_while_paced)
TEST_ENTRY(i24_pace_config_section)
TEST_ENTRY(i24_pace_own_client_paces_alone)
TEST_ENTRY(i24_pace_close_while_paced)
TEST_ENTRY(i24_pace_probe_after_cooldown)
TEST_ENTRY(i24_pace_probe_released_at_stream_start)
