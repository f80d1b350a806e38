/* Images and PDFs in tool results (tests/unit/mcp/test_media.c,
 * tests/unit/client/test_run.c): TEST_ENTRY lines only. */
TEST_ENTRY(media_base64_formats_tokens)
TEST_ENTRY(media_mcp_result_every_part)
TEST_ENTRY(media_mcp_result_limits)
TEST_ENTRY(media_validate_anthropic)
TEST_ENTRY(media_request_anthropic)
TEST_ENTRY(media_request_chat_completions)
TEST_ENTRY(media_request_responses)
TEST_ENTRY(media_history_micro_estimate)
TEST_ENTRY(media_transcript_round_trip)
TEST_ENTRY(cli_run_mcp_image_and_resume)
TEST_ENTRY(media_model_without_images)
TEST_ENTRY(media_fuzz_seeds_replay)
