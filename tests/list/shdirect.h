/* bash tool commands exec'd without dash when they are one simple
 * command (issue 17). */
TEST_ENTRY(sh_direct_matches_dash)
/* a tool whose agentloop is gone is not started */
TEST_ENTRY(exec_owner_gone_starts_nothing)
TEST_ENTRY(exec_owner_watcher_ends_sandbox)
TEST_ENTRY(exec_owner_lock_after_fork)
