/* issue 22 defect 12 (tests that failed on a loaded machine): the
 * mechanisms that make them independent of timing. TEST_ENTRY lines only. */
TEST_ENTRY(transport_stall_after_late_loop)
