/* per-tool cgroups (pids.max, memory limit): TEST_ENTRY lines only. */
TEST_ENTRY(sandbox_cgroup_pids_limit)
TEST_ENTRY(sandbox_cgroup_pids_limit_degraded)
TEST_ENTRY(sandbox_cgroup_memory_limit)
TEST_ENTRY(sandbox_cgroup_memory_limit_degraded)
TEST_ENTRY(sandbox_cgroup_unavailable_reported)
TEST_ENTRY(sandbox_cgroup_reported)
TEST_ENTRY(cli_run_limit_tool_processes)
