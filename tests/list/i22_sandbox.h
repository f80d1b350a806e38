/* issue 22: project trust bound to content, no placeholders in the tree
 * (point 8); seccomp and --die-with-parent guarded (point 14). */
TEST_ENTRY(project_trust_bound_to_content)
TEST_ENTRY(project_trust_run_says_what_changed)
TEST_ENTRY(sandbox_no_placeholder_in_git_workspace)
TEST_ENTRY(sandbox_no_git_still_protected)
TEST_ENTRY(daemon_sigkill_two_sessions_restart_sweeps)
TEST_ENTRY(seccomp_refuses_tiocsti)
TEST_ENTRY(seccomp_refuses_clone_newuser)
TEST_ENTRY(sandbox_die_with_parent_alone)
HELPER_ENTRY(seccomp_try)
TEST_ENTRY(janitor_of_a_process_already_gone_ends)
