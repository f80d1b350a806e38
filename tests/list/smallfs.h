/* transcripts on a real small filesystem, and the writer's sync seam:
 * TEST_ENTRY lines only. */
TEST_ENTRY(transcript_writer_fdatasync_eio_retried)
TEST_ENTRY(transcript_writer_fdatasync_eio_at_close_is_loss)
