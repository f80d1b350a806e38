/* Placeholder until the mock server lands; delete when adding real sources. */
typedef int al_mockllm_placeholder_t;
