/* issue 22, the transcript (tests/unit/session/test_i22_transcript.c):
 * TEST_ENTRY(name) lines only. */
TEST_ENTRY(cli_run_resume_compacted_same_request)
TEST_ENTRY(transcript_commit_kinds_one_table)
TEST_ENTRY(transcript_splice_from_other_session)
TEST_ENTRY(transcript_format1_still_loads)
TEST_ENTRY(transcript_safety_net_cuts_to_valid_prefix)
TEST_ENTRY(shipped_binaries_have_no_test_seam_names)
TEST_ENTRY(cli_run_rejected_reply_bounded_in_transcript)
TEST_ENTRY(transcript_deltas_bound_per_attempt)
