/* issue 24, fleet mode's foundations: the redis-server harness, the Redis
 * connection and the job protocol (tests/unit/fleet/). */
TEST_ENTRY(i24_redis_harness_aof_restart)
TEST_ENTRY(i24_redis_round_trip)
TEST_ENTRY(i24_redis_reconnects_after_restart)
TEST_ENTRY(i24_redis_close_mid_command_fires_nothing)
