/* issue 24, the fleet worker end to end: agentloopd --queue processes on a
 * real redis-server with an in-process mock (tests/unit/fleet/
 * test_worker.c). */
TEST_ENTRY(fleet_sigkill_mid_stream_taken_over)
TEST_ENTRY(fleet_sigkill_after_final_before_ack)
TEST_ENTRY(fleet_sigstop_past_lease_writes_nothing)
TEST_ENTRY(fleet_crashing_job_dead_lettered)
TEST_ENTRY(fleet_readonly_sessions_dir_not_acked)
TEST_ENTRY(fleet_sigterm_drains)
TEST_ENTRY(fleet_redis_away_pauses_intake)
TEST_ENTRY(fleet_sigint_hands_back_at_once)
TEST_ENTRY(fleet_sigstop_child_transcript_untouched)
