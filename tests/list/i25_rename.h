/* Issue 25, rename and export (tests/unit/i25/test_i25_rename.c).
 * TEST_ENTRY lines only. */
TEST_ENTRY(i25_rename_listed_kept_and_resumed)
TEST_ENTRY(i25_rename_refuses_control_chars)
TEST_ENTRY(i25_export_md_jsonl_every_call_no_secret)
TEST_ENTRY(i25_export_tampered_says_chain_broken)
TEST_ENTRY(i25_resume_name_two_matches_refused)
TEST_ENTRY(i25_export_cli_by_name)
TEST_ENTRY(i25_export_redact_rules)
TEST_ENTRY(i25_chat_resume_by_name_and_rename)
