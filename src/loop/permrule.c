/* Permission rules (permrule.h). */
#include "loop/permrule.h"

#include <fnmatch.h>
#include <string.h>

#include "common/common.h"

static const char *main_arg(const char *tool, const json_t *input) {
  static const char *const keys[] = {"command", "path", "file_path",
                                     "pattern"};
  size_t i;

  (void)tool;
  for (i = 0; i < AL_ARRAY_SIZE(keys); i++) {
    const char *v = json_string_value(json_object_get(input, keys[i]));

    if (v != NULL) {
      return v;
    }
  }
  return NULL;
}

static bool has_shell_ops(const char *s) {
  return strpbrk(s, ";&|`<>\n\r") != NULL || strstr(s, "$(") != NULL;
}

static bool glob(const char *pat, size_t plen, const char *s, size_t slen) {
  char p[1024];
  char v[8192];

  if (plen >= sizeof(p) || slen >= sizeof(v)) {
    return false; /* too long to match: never a reason to allow */
  }
  memcpy(p, pat, plen);
  p[plen] = '\0';
  memcpy(v, s, slen);
  v[slen] = '\0';
  return fnmatch(p, v, 0) == 0;
}

/* Each simple command of a shell line, trimmed, against the pattern. */
static bool any_segment(const char *pat, size_t plen, const char *cmd) {
  const char *p = cmd;

  while (*p != '\0') {
    size_t n = strcspn(p, ";&|\n\r`");
    const char *b = p;
    const char *e = p + n;

    while (b < e && (*b == ' ' || *b == '\t' || *b == '(' || *b == '$')) {
      b++;
    }
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == ')')) {
      e--;
    }
    if (e > b && glob(pat, plen, b, (size_t)(e - b))) {
      return true;
    }
    p += n;
    while (*p != '\0' && strchr(";&|\n\r`", *p) != NULL) {
      p++;
    }
  }
  return false;
}

bool al__perm_rule_match(const char *rule, const char *tool,
                         const json_t *input, bool allow) {
  const char *open = strchr(rule, '(');
  size_t rl = strlen(rule);
  const char *arg;
  size_t plen;
  char *dumped = NULL;
  bool m;

  if (open == NULL) {
    return glob(rule, rl, tool, strlen(tool));
  }
  if (rl < 2 || rule[rl - 1] != ')' ||
      !glob(rule, (size_t)(open - rule), tool, strlen(tool))) {
    return false;
  }
  plen = (size_t)(rule + rl - 1 - (open + 1));
  arg = main_arg(tool, input);
  if (arg == NULL) {
    dumped = input != NULL ? json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS)
                           : NULL;
    arg = dumped != NULL ? dumped : "{}";
  } else if (strcmp(tool, "bash") == 0 && has_shell_ops(arg)) {
    m = !allow && (glob(open + 1, plen, arg, strlen(arg)) ||
                   any_segment(open + 1, plen, arg));
    return m;
  }
  m = glob(open + 1, plen, arg, strlen(arg));
  al_free(dumped);
  return m;
}

bool al__perm_rules_match(char *const *rules, const char *tool,
                          const json_t *input, bool allow) {
  size_t i;

  for (i = 0; rules != NULL && rules[i] != NULL; i++) {
    if (al__perm_rule_match(rules[i], tool, input, allow)) {
      return true;
    }
  }
  return false;
}
