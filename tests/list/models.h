/* models catalogue tests: TEST_ENTRY(name) / HELPER_ENTRY(name) lines only. */
TEST_ENTRY(models_shipped)
TEST_ENTRY(models_fallback)
TEST_ENTRY(models_user_overlay)
TEST_ENTRY(models_errors)
TEST_ENTRY(models_load_file)
TEST_ENTRY(cli_run_models_file)
TEST_ENTRY(context_model_info)
