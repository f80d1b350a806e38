/* edit_file and bounded file reads (issue 12, issue 15 point 4). */
TEST_ENTRY(tools_edit_replaces_once_with_diff)
TEST_ENTRY(tools_edit_match_count_and_replace_all)
TEST_ENTRY(tools_edit_creates_new_file)
TEST_ENTRY(tools_edit_path_rules_as_write_file)
TEST_ENTRY(tools_edit_denied_path)
TEST_ENTRY(tools_read_sparse_file_is_bounded)
TEST_ENTRY(tools_read_time_limit)
