/* issue 24, Deliver 1: `agentloop batch run` in one process (local mode).
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(batch_jobs_once_concurrency_rerun_skips)
TEST_ENTRY(batch_sigkill_rerun_resumes_exactly_once)
TEST_ENTRY(batch_copy_and_git_workspaces)
TEST_ENTRY(batch_bad_jobs_line_names_file_line)
TEST_ENTRY(batch_result_lost_recovered_from_transcript)
TEST_ENTRY(batch_sigint_no_line_rerun_resumes)
TEST_ENTRY(batch_progress_line_on_terminal)
TEST_ENTRY(batch_job_timeout_outcome)
TEST_ENTRY(batch_job_without_key_fails_alone)
TEST_ENTRY(batch_kill_loop_exactly_once)
