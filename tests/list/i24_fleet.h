/* issue 24, fleet mode's foundations: the redis-server harness, the Redis
 * connection and the job protocol (tests/unit/fleet/). */
TEST_ENTRY(i24_redis_harness_aof_restart)
TEST_ENTRY(i24_redis_round_trip)
TEST_ENTRY(i24_redis_reconnects_after_restart)
TEST_ENTRY(i24_redis_close_mid_command_fires_nothing)
TEST_ENTRY(i24_queue_submit_idempotent)
TEST_ENTRY(i24_queue_read_takes_at_most_free_slots)
TEST_ENTRY(i24_queue_claim_renew_fence)
TEST_ENTRY(i24_queue_stale_owner_fails_fence)
TEST_ENTRY(i24_queue_complete_once)
TEST_ENTRY(i24_queue_reap_takes_over_expired)
TEST_ENTRY(i24_queue_dead_letter_after_max_deliveries)
TEST_ENTRY(i24_queue_acked_submits_survive_redis_crash)
