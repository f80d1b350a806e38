/* issue 23, mockllm tracks and the subagents bench: TEST_ENTRY lines only. */
TEST_ENTRY(mockllm_tracks_route_by_first_user)
TEST_ENTRY(mockllm_tracks_parallel_children)
TEST_ENTRY(mockllm_tracks_exhausted_per_track)
TEST_ENTRY(mockllm_tracks_system_and_openai)
TEST_ENTRY(mockllm_tracks_errors)
