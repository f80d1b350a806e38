/* bash tool commands exec'd without dash when they are one simple
 * command (issue 17). */
TEST_ENTRY(sh_direct_matches_dash)
