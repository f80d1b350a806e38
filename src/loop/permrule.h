/* Permission rules with argument patterns (docs/config.md "Permissions"):
 * "TOOL" or "TOOL(PATTERN)", as in `bash(git status*)` or
 * `write_file(docs*)`. TOOL and PATTERN are fnmatch(3) globs (* also
 * matches '/'). The argument a pattern is matched against is the tool's
 * main one: bash's command, the path of the file tools, the pattern of
 * grep/glob, else the input as compact JSON.
 *
 * Shell commands are matched with care, because one allowed prefix must
 * not allow what follows a ';': for an allow rule, a bash command with a
 * shell operator or substitution (; & | ` $( < > newline) never matches a
 * pattern; for a deny rule, the whole command and each of its simple
 * commands are tried, so `bash(rm *)` also denies `ls; rm -rf x`. */
#ifndef AL_LOOP_PERMRULE_H
#define AL_LOOP_PERMRULE_H

#include <stdbool.h>

#include <jansson.h>

/* Whether rule matches a call of tool with input (may be NULL). */
bool al__perm_rule_match(const char *rule, const char *tool,
                         const json_t *input, bool allow);
/* Any rule of a NULL-terminated list (NULL: none). */
bool al__perm_rules_match(char *const *rules, const char *tool,
                          const json_t *input, bool allow);

#endif
