/* tui tests (the chat's building blocks): TEST_ENTRY / HELPER_ENTRY only. */
TEST_ENTRY(tui_md_plain_layout)
TEST_ENTRY(tui_md_table_columns)
TEST_ENTRY(tui_md_color_codes)
TEST_ENTRY(tui_md_neutralises_escapes)
TEST_ENTRY(tui_md_stream_split_invariant)
TEST_ENTRY(tui_md_stream_final_screen)
TEST_ENTRY(tui_md_stream_plain_passthrough)
HELPER_ENTRY(tui_md_dump)
