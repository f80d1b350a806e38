/* issue 24, the fleet's remaining failure tests: Redis killed under AOF
 * (F4), a 429 storm (F6), duplicate submission (F8), random SIGKILLs (F9),
 * a drain within its grace (tests/unit/fleet/test_fleet_chaos.c). */
TEST_ENTRY(fleet_sigterm_drain_finishes_within_grace)
TEST_ENTRY(fleet_duplicate_submission_one_run)
TEST_ENTRY(fleet_redis_aof_restart_loses_no_job)
TEST_ENTRY(fleet_429_storm_paced)
TEST_ENTRY(fleet_chaos_random_sigkills)
/* A gated transcript write is not made past its window
 * (tests/unit/session/test_i24_tx_window.c). */
TEST_ENTRY(i24_tx_window_late_write_not_made)
TEST_ENTRY(i24_tx_window_renewed_write_made)
/* A Redis connection up only once the server loaded its data
 * (tests/unit/fleet/test_redis_loading.c). */
TEST_ENTRY(i24_redis_up_only_once_loaded)
