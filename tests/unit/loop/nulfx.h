/* A model that sends NUL (\u0000) in its text and in a tool call's input:
 * the scenario of the model-text safety tests (issue 15), as raw SSE
 * bodies (a `text:` reply cannot carry a NUL). */
#ifndef AL_TEST_NULFX_H
#define AL_TEST_NULFX_H

/* Reply 1: text "before\u0000after", then list_directory {"path":
 * "no\u0000such"} (id t1); reply 2 and after: text "said \u0000 again". */
extern const char nul_scenario[];
/* The same shape with invalid UTF-8 bytes instead (raw_base64: YAML
 * cannot carry them): text "bad \xff\xfe bytes", list_directory
 * {"path": "x\xffy"} (id t1); then text "done". Static buffer. */
const char *bad_utf8_scenario(void);

#endif
