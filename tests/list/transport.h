/* transport tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
