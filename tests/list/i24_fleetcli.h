/* issue 24, fleet mode's CLI: agentloop batch submit | results | status
 * --queue URL (tests/unit/fleet/test_batch_fleet.c). */
TEST_ENTRY(fleet_cli_submit_idempotent_duplicates)
TEST_ENTRY(fleet_cli_submit_bad_line_submits_nothing)
TEST_ENTRY(fleet_cli_results_follow_until_all_done)
TEST_ENTRY(fleet_cli_results_follow_survives_redis_restart)
TEST_ENTRY(fleet_cli_status_counts)
TEST_ENTRY(fleet_cli_unreachable_redis_clear_error)
TEST_ENTRY(fleet_cli_results_follow_sigint_130)
TEST_ENTRY(fleet_redis_close_releases_dropped_commands)
TEST_ENTRY(fleet_cli_many_jobs_window_and_pages)
