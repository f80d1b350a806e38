/* issue 23, the front ends of sub-agents (tests/unit/i23/test_i23_front*.c):
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(i23_child_transcript_own_chain_linked)
TEST_ENTRY(i23_crash_while_child_runs_closes_task_call)
TEST_ENTRY(i23_run_view_nested_tool_lines)
TEST_ENTRY(i23_daemon_child_events_approval_and_transcripts)
TEST_ENTRY(i23_daemon_task_cancel)
TEST_ENTRY(i23_chat_view_nested_tool_lines)
TEST_ENTRY(i23_chat_slash_tasks)
TEST_ENTRY(i23_daemon_cancel_leaves_no_orphan_in_any_transcript)
TEST_ENTRY(i23_daemon_background_child_keeps_session_loaded)
