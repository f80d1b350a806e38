/* Reliability tests of issue 16 (rules that had no test that could fail):
 * TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(daemon_refuses_root_peer_when_not_root)
TEST_ENTRY(agent_retry_paced_by_server_clock)
TEST_ENTRY(sandbox_bwrap_private_network)
TEST_ENTRY(exec_seccomp_refuses_socket_families)
TEST_ENTRY(fstools_swap_between_check_and_open)
TEST_ENTRY(sandbox_probe_names_max_user_namespaces)
TEST_ENTRY(sandbox_probe_names_chroot)
TEST_ENTRY(transport_unsolicited_101_is_error)
