/* The interactive front end's commands (chat.c, doctor.c). Each returns
 * the process exit code (CONVENTIONS.md 7.5; 69 when agentloopd cannot be
 * reached). */
#ifndef AL_CLIENT_CHAT_H
#define AL_CLIENT_CHAT_H

#include <stdbool.h>

#include <jansson.h>

/* agentloop [--color WHEN]: the chat in a new session. */
int al_cli_chat(int argc, char **argv);
/* agentloop resume [ID]: the chat in an earlier session (default: the
 * latest), its past events replayed first. */
int al_cli_resume(int argc, char **argv);
/* agentloop sessions [--json] */
int al_cli_sessions(int argc, char **argv);
/* The settings a session started from this shell carries (chat_settings.c):
 * {"provider", "model"?, "base_url"?, "api_key"?, "system"?} from the
 * configuration, the environment and the given flags (NULL: not given).
 * 0, or the exit code after printing the errors. */
int al__chat_settings(const char *provider, const char *model,
                      const char *base_url, bool with_prompt, json_t **out);
/* agentloop doctor */
int al_cli_doctor(int argc, char **argv);

#endif
