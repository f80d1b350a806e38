/* issue 23, three children cancelled end to end through the real binary
 * and the daemon's socket (tests/unit/i23/test_i23_cancel3.c). */
TEST_ENTRY(i23_run_sigint_three_children_no_orphan)
TEST_ENTRY(i23_daemon_cancel_three_children_no_orphan)
TEST_ENTRY(i23_run_sigint_at_child_bash_start_no_orphan)
TEST_ENTRY(i23_daemon_cancel_at_child_bash_start_no_orphan)
TEST_ENTRY(i23_spawn_kill_ends_group_once_leader_gone)
