/* tools.d CLI tools (src/tools/clitool*.c): the loader's diagnostics
 * (FILE:LINE:COL), argument validation, trust of project tool files, the
 * shipped tools.d, seed 001 scenarios S6.1, S6.2, S6.5, S6.7, S6.10 and
 * S6.14 through a whole agent, and the file tools' openat2 confinement
 * against a racing symlink swap (D5). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "test.h"
#include "unit/loop/agent_fx.h"

#include "tools/clitool.h"
#include "tools/tools.h"

/* ---- loader diagnostics -------------------------------------------------- */

typedef struct {
  const char *yaml;
  const char *error; /* "LINE:COL: reason" after "t.yaml:" */
} bad_case_t;

#define T0 "tools:\n  - name: t\n    description: d\n    cmd: echo\n"

static const bad_case_t k_bad[] = {
    {"tools: [\n", "t.yaml:2:1: YAML: did not find expected node content"},
    {"tools:\n  - name: t\n   bad indent: x\n", "t.yaml:3:"},
    {"", "t.yaml:1:1: empty file"},
    {"- a\n- b\n", "t.yaml:1:1: expected a mapping with 'tools:'"},
    {"tools: {a: 1}\n", "t.yaml:1:8: 'tools' must be a list of tools"},
    {"tools:\n  - just a string\n", "t.yaml:2:5: a tool must be a mapping"},
    {"tools: []\nextra: 1\n", "t.yaml:2:1: unknown top-level key 'extra'"},
    {"tools:\n  - description: d\n    cmd: echo\n",
     "t.yaml:2:5: a tool needs a 'name'"},
    {"tools:\n  - name: 'bad name'\n    description: d\n    cmd: echo\n",
     "t.yaml:2:11: bad tool name 'bad name'"},
    {"tools:\n  - name: t\n    cmd: echo\n",
     "t.yaml:2:5: tool 't' needs a 'description'"},
    {"tools:\n  - name: t\n    description: d\n",
     "t.yaml:2:5: tool 't' needs a 'cmd'"},
    {"tools:\n  - name: t\n    description: d\n    cmd: ./run.sh\n",
     "t.yaml:4:10: tool 't': cmd must be a program name"},
    {"tools:\n  - name: t\n    description: d\n    cmd: '{{x}}'\n",
     "t.yaml:4:10: tool 't': cmd must be a program name"},
    {T0 "    category: root\n", "t.yaml:5:15: tool 't': category must be"},
    {T0 "    colour: red\n", "t.yaml:5:5: unknown key 'colour'"},
    {T0 "    concurrency_safe: yes\n",
     "t.yaml:5:23: 'concurrency_safe' must be true or false, not 'yes'"},
    {T0 "    compactable: sometimes\n",
     "t.yaml:5:18: 'compactable' must be true or false, not 'sometimes'"},
    {T0 "    timeout: -1\n", "t.yaml:5:14: tool 't': timeout must be in"},
    {T0 "    timeout: soon\n", "t.yaml:5:14: 'timeout' must be a number"},
    {T0 "    max_output: 0\n", "t.yaml:5:17: tool 't': max_output must be"},
    {T0 "    args: ['{{x}}']\n",
     "t.yaml:5:12: template '{{x}}' names an undeclared parameter 'x'"},
    {T0 "    args: ['{{x']\n    parameters:\n      x: {type: string}\n",
     "t.yaml:5:12: template '{{x' has '{{' without '}}'"},
    {T0 "    args: '{{x}}'\n", "t.yaml:5:11: 'args' must be a list of strings"},
    {T0 "    args: [[a]]\n", "t.yaml:5:12: every element of 'args' must be"},
    {T0 "    parameters:\n      x: {type: str}\n",
     "t.yaml:6:17: parameter 'x': type must be string, integer"},
    {T0 "    parameters:\n      x: {description: d}\n",
     "t.yaml:6:10: parameter 'x' has no type"},
    {T0 "    parameters:\n      x: {type: string, pattern: '(['}\n",
     "t.yaml:6:34: parameter 'x': bad pattern"},
    {T0 "    parameters:\n      x: {type: integer, enum: [a]}\n",
     "t.yaml:6:10: parameter 'x': enum, pattern, minLength and maxLength "
     "apply to strings only"},
    {T0 "    parameters:\n      x: {type: string, minimum: 1}\n",
     "t.yaml:6:10: parameter 'x': minimum and maximum apply to numbers only"},
    {T0 "    parameters:\n      x: {type: string, minLength: 5, maxLength: 2}\n",
     "t.yaml:6:10: parameter 'x': minLength > maxLength"},
    {T0 "    parameters:\n      x: {type: number, minimum: 5, maximum: 2}\n",
     "t.yaml:6:10: parameter 'x': minimum > maximum"},
    {T0 "    parameters:\n      x: {type: string, minLength: -1}\n",
     "t.yaml:6:36: 'minLength' must be a non-negative integer"},
    {T0 "    parameters:\n      x: {type: string, size: 3}\n",
     "t.yaml:6:25: parameter 'x': unknown key 'size'"},
    {T0 "    parameters:\n      x: {type: string}\n      x: {type: string}\n",
     "t.yaml:7:7: parameter 'x' is declared twice"},
    {T0 "    parameters:\n      'a b': {type: string}\n",
     "t.yaml:6:7: bad parameter name 'a b'"},
    {T0 "    parameters:\n      x: string\n",
     "t.yaml:6:10: parameter 'x' must be a mapping"},
    {T0 "    args: ['{{x}}']\n    parameters:\n      x: {type: string, "
        "optional: true}\n    optional_args:\n      x: ['{{x}}']\n",
     "t.yaml:5:12: optional parameter 'x' is used in args"},
    {T0 "    parameters:\n      x: {type: string, optional: true}\n",
     "t.yaml:2:5: tool 't': optional parameter 'x' has no optional_args"},
    {T0 "    optional_args:\n      y: ['-y']\n",
     "t.yaml:6:7: optional_args 'y' must name an optional parameter"},
    {T0 "    parameters:\n      x: {type: string}\n    optional_args:\n      "
        "x: ['-x']\n",
     "t.yaml:8:7: optional_args 'x' must name an optional parameter"},
    {T0 "    env: {LD_PRELOAD: /tmp/x.so}\n",
     "t.yaml:5:11: tool 't': env name 'LD_PRELOAD' is not allowed"},
    {T0 "    env: {BASH_ENV: /tmp/x}\n",
     "t.yaml:5:11: tool 't': env name 'BASH_ENV' is not allowed"},
    {T0 "    env: {'1X': a}\n",
     "t.yaml:5:11: tool 't': env name '1X' is not allowed"},
    {T0 "    env: {X: '${UNCLOSED'}\n",
     "t.yaml:5:14: env X: malformed ${...} reference"},
    {T0 "    env: [a]\n", "t.yaml:5:10: tool 't': env must be a mapping"},
    {T0 "  - name: t\n    description: d\n    cmd: echo\n",
     "t.yaml:5:11: tool 't' is already defined"},
    {T0 "    parameters:\n      x: {type: string, description: a, "
        "description: b}\n",
     "t.yaml:6:41: duplicate key 'description'"},
    {T0 "    cmd: sh\n", "t.yaml:5:5: duplicate key 'cmd'"},
    {T0 "    env: {A: x, A: y}\n", "t.yaml:5:17: duplicate key 'A'"},
};

/* Every bad file is reported with file:line:column and the reason, and
 * the good tool beside it still loads. */
TEST_IMPL(tools_d_load_errors_file_line_col) {
  size_t i;

  for (i = 0; i < sizeof(k_bad) / sizeof(k_bad[0]); i++) {
    al_cli_set_t set;
    char yaml[2048];

    al__cli_set_init(&set);
    /* The first tool of a file with several tools is fine. */
    ASSERT_EQ(al__cli_load_string(&set, "t.yaml", k_bad[i].yaml,
                                  strlen(k_bad[i].yaml), false),
              0);
    if (set.n_errors < 1 || strstr(set.errors.data, k_bad[i].error) == NULL) {
      AL_TEST_FAIL("case %zu: expected '%s', got '%s'", i, k_bad[i].error,
                   set.errors.data != NULL ? set.errors.data : "(none)");
    }
    al__cli_set_free(&set);
    (void)yaml;
  }
  printf("%zu bad tool files, each reported with file:line:col\n", i);
  return 0;
}

TEST_IMPL(tools_d_other_tools_still_load) {
  static const char yaml[] =
      "tools:\n"
      "  - name: good1\n"
      "    description: d\n"
      "    cmd: echo\n"
      "  - name: bad\n"
      "    description: d\n"
      "    cmd: echo\n"
      "    category: nope\n"
      "  - name: good2\n"
      "    description: d\n"
      "    cmd: echo\n";
  al_cli_set_t set;
  char dir[] = "/tmp/al_toolsd_XXXXXX";
  char p[256];
  FILE *f;

  al__cli_set_init(&set);
  ASSERT_EQ(al__cli_load_string(&set, "x.yaml", yaml, strlen(yaml), false),
            0);
  ASSERT_EQ(set.n, 2);
  ASSERT_STR_EQ(set.defs[0]->name, "good1");
  ASSERT_STR_EQ(set.defs[1]->name, "good2");
  ASSERT_EQ(set.n_errors, 1);
  ASSERT_NOT_NULL(strstr(set.errors.data, "x.yaml:8:15:"));
  al__cli_set_free(&set);

  /* A directory: files in name order, a broken file beside good ones,
   * non-YAML files ignored. */
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(p, sizeof(p), "%s/b.yaml", dir);
  f = fopen(p, "w");
  fputs("tools: [\n", f);
  fclose(f);
  snprintf(p, sizeof(p), "%s/a.yml", dir);
  f = fopen(p, "w");
  fputs("name: one\ndescription: d\ncmd: echo\n", f);
  fclose(f);
  snprintf(p, sizeof(p), "%s/c.txt", dir);
  f = fopen(p, "w");
  fputs("not yaml {{{\n", f);
  fclose(f);
  al__cli_set_init(&set);
  ASSERT_EQ(al__cli_load_dir(&set, dir, false), 0);
  ASSERT_EQ(set.n, 1);
  ASSERT_STR_EQ(set.defs[0]->name, "one");
  ASSERT_EQ(set.n_errors, 1);
  ASSERT_NOT_NULL(strstr(set.errors.data, "/b.yaml:2:1: YAML:"));
  al__cli_set_free(&set);
  /* A missing directory is no error. */
  al__cli_set_init(&set);
  ASSERT_EQ(al__cli_load_dir(&set, "/nonexistent/tools.d", false), 0);
  ASSERT_EQ(set.n_errors, 0);
  al__cli_set_free(&set);
  snprintf(p, sizeof(p), "rm -rf '%s'", dir);
  ASSERT_EQ(system(p), 0);
  return 0;
}

/* E3: project files are code from the repository; they may not pull host
 * variables (API keys) into a tool. User-level ones may. */
TEST_IMPL(tools_d_project_env_refused) {
  static const char yaml[] = T0 "    env: {X: 'k=${MY_API_KEY}'}\n";
  al_cli_set_t set;

  setenv("MY_API_KEY", "secret-value", 1);
  al__cli_set_init(&set);
  al__cli_load_string(&set, "t.yaml", yaml, strlen(yaml), true);
  ASSERT_EQ(set.n, 0);
  ASSERT_NOT_NULL(strstr(set.errors.data,
                         "t.yaml:5:14: env X: project tools cannot take "
                         "host variables (${MY_API_KEY})"));
  al__cli_set_free(&set);
  al__cli_set_init(&set);
  al__cli_load_string(&set, "t.yaml", yaml, strlen(yaml), false);
  ASSERT_EQ(set.n, 1);
  ASSERT_STR_EQ(set.defs[0]->env[0], "X=k=secret-value");
  al__cli_set_free(&set);
  return 0;
}

/* ---- validation ---------------------------------------------------------------- */

static const char k_valid_yaml[] =
    "tools:\n"
    "  - name: v\n"
    "    description: all the rules\n"
    "    cmd: prog\n"
    "    args: ['{{s}}', '--n={{n}}', '{{i}}']\n"
    "    optional_args:\n"
    "      flag: ['--flag']\n"
    "      opt: ['--', '{{opt}}']\n"
    "      e: ['-e', '{{e}}']\n"
    "    parameters:\n"
    "      s: {type: string, minLength: 2, maxLength: 5, pattern: '^[a-z]+$'}\n"
    "      n: {type: number, minimum: 0.5, maximum: 10}\n"
    "      i: {type: integer, minimum: -3, maximum: 3}\n"
    "      flag: {type: boolean, optional: true}\n"
    "      opt: {type: string, optional: true}\n"
    "      e: {type: string, enum: [red, green], optional: true}\n";

typedef struct {
  const char *input;
  const char *expect; /* argv joined with '|', or "ERR:" + reason */
} vcase_t;

static const vcase_t k_vcases[] = {
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0}", "prog|abc|--n=1|0"},
    {"{\"s\": \"abc\", \"n\": 2.5, \"i\": 3, \"flag\": true}",
     "prog|abc|--n=2.5|3|--flag"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"flag\": false}", "prog|abc|--n=1|0"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"opt\": \"-rf\"}",
     "prog|abc|--n=1|0|--|-rf"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"opt\": null}", "prog|abc|--n=1|0"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 2, \"e\": \"red\"}",
     "prog|abc|--n=1|2|-e|red"},
    /* A negative number at the start of an argument reads as an option. */
    {"{\"s\": \"abc\", \"n\": 1, \"i\": -3}",
     "ERR:parameter 'i' must not start with '-' (it would be read as an "
     "option)"},
    {"{\"n\": 1, \"i\": 0}", "ERR:missing required parameter 's'"},
    {"{\"s\": \"a\", \"n\": 1, \"i\": 0}",
     "ERR:parameter 's' is shorter than minLength 2"},
    {"{\"s\": \"abcdef\", \"n\": 1, \"i\": 0}",
     "ERR:parameter 's' is longer than maxLength 5"},
    {"{\"s\": \"ab1\", \"n\": 1, \"i\": 0}",
     "ERR:parameter 's' does not match pattern ^[a-z]+$"},
    {"{\"s\": 12, \"n\": 1, \"i\": 0}", "ERR:parameter 's' must be a string"},
    {"{\"s\": \"abc\", \"n\": \"1\", \"i\": 0}",
     "ERR:parameter 'n' must be a number"},
    {"{\"s\": \"abc\", \"n\": 0.1, \"i\": 0}",
     "ERR:parameter 'n' is below minimum 0.5"},
    {"{\"s\": \"abc\", \"n\": 11, \"i\": 0}",
     "ERR:parameter 'n' is above maximum 10"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 1.5}",
     "ERR:parameter 'i' must be an integer"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 4}",
     "ERR:parameter 'i' is above maximum 3"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"flag\": \"yes\"}",
     "ERR:parameter 'flag' must be a boolean"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"e\": \"blue\"}",
     "ERR:parameter 'e' must be one of the enum values (red, green)"},
    {"{\"s\": \"abc\", \"n\": 1, \"i\": 0, \"zz\": 1}",
     "ERR:unknown parameter 'zz'"},
    {"[1, 2]", "ERR:the input must be a JSON object"},
};

static void join_argv(char **argv, char *out, size_t n) {
  size_t i;

  out[0] = '\0';
  for (i = 0; argv[i] != NULL; i++) {
    if (i > 0) {
      strncat(out, "|", n - strlen(out) - 1);
    }
    strncat(out, argv[i], n - strlen(out) - 1);
  }
}

/* S6.2's rules one by one: every bad value is refused before anything
 * runs, naming the parameter and the rule. */
TEST_IMPL(tools_d_argument_validation) {
  al_cli_set_t set;
  size_t i;

  al__cli_set_init(&set);
  al__cli_load_string(&set, "v.yaml", k_valid_yaml, strlen(k_valid_yaml),
                      false);
  if (set.n != 1) {
    AL_TEST_FAIL("load: %s", set.errors.data);
  }
  for (i = 0; i < sizeof(k_vcases) / sizeof(k_vcases[0]); i++) {
    json_t *in = json_loads(k_vcases[i].input, JSON_DECODE_ANY, NULL);
    al_buf_t why;
    char **argv = NULL;
    char got[1024];
    int rc;

    ASSERT_NOT_NULL(in);
    al_buf_init(&why, 4096);
    rc = al__cli_build_argv(set.defs[0], in, &argv, &why);
    if (rc == 0) {
      join_argv(argv, got, sizeof(got));
      al__sandbox_argv_free(argv);
    } else {
      ASSERT_EQ(rc, AL_EINVAL);
      snprintf(got, sizeof(got), "ERR:%s", why.data);
    }
    if (strcmp(got, k_vcases[i].expect) != 0) {
      AL_TEST_FAIL("case %zu %s:\n  got      %s\n  expected %s", i,
                   k_vcases[i].input, got, k_vcases[i].expect);
    }
    al_buf_free(&why);
    json_decref(in);
  }
  al__cli_set_free(&set);
  return 0;
}

/* The schema the model sees carries every rule. */
TEST_IMPL(tools_d_schema_for_the_model) {
  al_cli_set_t set;
  json_t *s;
  json_t *p;

  al__cli_set_init(&set);
  al__cli_load_string(&set, "v.yaml", k_valid_yaml, strlen(k_valid_yaml),
                      false);
  s = al__cli_def_schema(set.defs[0]);
  ASSERT_NOT_NULL(s);
  ASSERT(json_is_false(json_object_get(s, "additionalProperties")));
  ASSERT_EQ(json_array_size(json_object_get(s, "required")), 3);
  p = json_object_get(json_object_get(s, "properties"), "s");
  ASSERT_STR_EQ(json_string_value(json_object_get(p, "pattern")), "^[a-z]+$");
  ASSERT_EQ(json_integer_value(json_object_get(p, "maxLength")), 5);
  p = json_object_get(json_object_get(s, "properties"), "e");
  ASSERT_EQ(json_array_size(json_object_get(p, "enum")), 2);
  json_decref(s);
  al__cli_set_free(&set);
  return 0;
}

/* ---- through the agent --------------------------------------------------------- */

static void write_at(const char *dir, const char *rel, const char *text) {
  char p[512];
  char cmd[600];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", dir, rel);
  snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", p);
  ASSERT_EQ(system(cmd), 0);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

static const char k_kube_yaml[] =
    "tools:\n"
    "  - name: kubectl_get\n"
    "    description: Get Kubernetes resources (printf stands in)\n"
    "    category: read\n"
    "    concurrency_safe: true\n"
    "    cmd: printf\n"
    "    args: ['get %s%s\\n', '{{resource}}']\n"
    "    optional_args:\n"
    "      namespace: [' -n {{namespace}}']\n"
    "    parameters:\n"
    "      resource:\n"
    "        type: string\n"
    "        enum: [pods, services, deployments]\n"
    "      namespace:\n"
    "        type: string\n"
    "        pattern: '^[a-z0-9-]+$'\n"
    "        optional: true\n"
    "  - name: deploy\n"
    "    description: an admin tool\n"
    "    category: admin\n"
    "    cmd: printf\n"
    "    args: ['deployed\\n']\n";

/* S6.1 + S6.7: a tool defined in YAML is registered, offered to the model
 * and callable; S6.2: invalid parameters come back as an error result
 * naming the parameter and the rule. */
TEST_IMPL(seed_s6_1_s6_7_cli_tool_registered_and_runs) {
  fx_t f;
  const json_t *r;
  const al_mockllm_record_t *rec;
  json_t *tools;
  json_t *t;
  size_t i;
  bool offered = false;
  char dir[] = "/tmp/al_toolsd_XXXXXX";
  const char *dirs[2];

  ASSERT_NOT_NULL(mkdtemp(dir));
  write_at(dir, "kube.yaml", k_kube_yaml);
  dirs[0] = dir;
  dirs[1] = NULL;
  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: k1, name: kubectl_get, input: {resource: "
          "pods, namespace: kube-system}}\n"
          "        - tool_use: {id: k2, name: kubectl_get, input: {resource: "
          "'pods; rm -rf ~'}}\n"
          "        - tool_use: {id: k3, name: kubectl_get, input: {resource: "
          "pods, namespace: 'Bad_NS'}}\n"
          "  - reply: {content: [{text: 'done'}]}\n");
  f.opts.tools_dirs = dirs;
  fx_start(&f);
  fx_run(&f, "list pods");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  rec = fx_request(&f, 0);
  tools = json_object_get(rec->body, "tools");
  json_array_foreach(tools, i, t) {
    offered = offered || strcmp(json_string_value(json_object_get(t, "name")),
                                "kubectl_get") == 0;
  }
  ASSERT(offered);
  r = fx_tool_result(&f, 1, "k1");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT_STR_EQ(fx_jstr(r, "content"), "get pods -n kube-system\n");
  r = fx_tool_result(&f, 1, "k2");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_STR_EQ(fx_jstr(r, "content"),
                "Error: invalid arguments for tool 'kubectl_get': parameter "
                "'resource' must be one of the enum values (pods, services, "
                "deployments)");
  r = fx_tool_result(&f, 1, "k3");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  if (strstr(fx_jstr(r, "content"),
             "parameter 'namespace' does not match pattern") == NULL) {
    AL_TEST_FAIL("k3: %s", fx_jstr(r, "content"));
  }
  fx_assert_valid(&f);
  fx_finish(&f);
  snprintf(dir + strlen(dir), 1, "%s", "");
  {
    char cmd[300];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ASSERT_EQ(system(cmd), 0);
  }
  return 0;
}

/* S6.5: rm -rf / is refused by the bash blocklist with a rejection
 * message; S6.10: read_file outside the allowed paths is a permission
 * error. */
TEST_IMPL(seed_s6_5_s6_10_blocked_and_outside) {
  fx_t f;
  const json_t *r;

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: b1, name: bash, input: {command: 'rm -rf "
          "/'}}\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: r1, name: read_file, input: {path: "
          "/etc/hostname}}\n"
          "  - reply: {content: [{text: 'done'}]}\n");
  fx_start(&f);
  fx_run(&f, "go");
  r = fx_tool_result(&f, 1, "b1");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "blocked by the bash safety "
                                                "blocklist"));
  r = fx_tool_result(&f, 2, "r1");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  if (strstr(fx_jstr(r, "content"), "outside the allowed paths") == NULL) {
    AL_TEST_FAIL("r1: %s", fx_jstr(r, "content"));
  }
  fx_finish(&f);
  return 0;
}

/* S6.14: an admin tool is blocked in a job (cron) session unless the job
 * lists it. */
TEST_IMPL(seed_s6_14_admin_tool_in_job_mode) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: d1, name: deploy, input: {}}\n"
      "  - reply: {content: [{text: 'done'}]}\n";
  fx_t f;
  const json_t *r;
  char dir[] = "/tmp/al_toolsd_XXXXXX";
  const char *dirs[2];
  const char *allow[2] = {"deploy", NULL};
  char cmd[300];

  ASSERT_NOT_NULL(mkdtemp(dir));
  write_at(dir, "kube.yaml", k_kube_yaml);
  dirs[0] = dir;
  dirs[1] = NULL;
  fx_init(&f, yaml);
  f.opts.tools_dirs = dirs;
  f.opts.permission_mode = AL_PERMISSION_MODE_JOB;
  fx_start(&f);
  fx_run(&f, "deploy");
  r = fx_tool_result(&f, 1, "d1");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "permission denied"));
  fx_finish(&f);

  fx_init(&f, yaml);
  f.opts.tools_dirs = dirs;
  f.opts.permission_mode = AL_PERMISSION_MODE_JOB;
  f.opts.allow_tools = allow;
  fx_start(&f);
  fx_run(&f, "deploy");
  r = fx_tool_result(&f, 1, "d1");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT_STR_EQ(fx_jstr(r, "content"), "deployed\n");
  fx_finish(&f);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

static bool has_tool(al_agent_t *a, const char *name, json_t **errors) {
  char *text = NULL;
  json_t *o;
  json_t *t;
  size_t i;
  bool found = false;

  ASSERT_EQ(al_agent_tools_json(a, &text), 0);
  o = json_loads(text, 0, NULL);
  al_free(text);
  json_array_foreach(json_object_get(o, "tools"), i, t) {
    found = found ||
            strcmp(json_string_value(json_object_get(t, "name")), name) == 0;
  }
  if (errors != NULL) {
    *errors = json_incref(json_object_get(o, "errors"));
  }
  json_decref(o);
  return found;
}

/* The project's tools.d is code from the repository: it loads only when
 * the project is trusted, by flag or by a recorded decision. */
TEST_IMPL(tools_d_project_needs_trust) {
  fx_t f;
  char cfg[] = "/tmp/al_cfg_XXXXXX";
  char cmd[300];
  json_t *errs = NULL;

  ASSERT_NOT_NULL(mkdtemp(cfg));
  setenv("XDG_CONFIG_HOME", cfg, 1);
  fx_init(&f, NULL);
  write_at(f.workspace, "tools.d/p.yaml",
           "name: proj_tool\ndescription: d\ncmd: echo\n");
  f.opts.tools_d = true;
  fx_start(&f);
  ASSERT(!has_tool(f.agent, "proj_tool", NULL));
  fx_finish(&f);

  fx_init(&f, NULL);
  write_at(f.workspace, "tools.d/p.yaml",
           "name: proj_tool\ndescription: d\ncmd: echo\n");
  f.opts.tools_d = true;
  f.opts.trust_project = true;
  fx_start(&f);
  ASSERT(has_tool(f.agent, "proj_tool", NULL));
  fx_finish(&f);

  /* A recorded decision; and the user's own tools.d always loads, with
   * its load errors listed. */
  fx_init(&f, NULL);
  write_at(f.workspace, "tools.d/p.yaml",
           "name: proj_tool\ndescription: d\ncmd: echo\n");
  ASSERT_EQ(al__tools_trust_project(f.workspace, NULL), 0);
  ASSERT(al__tools_project_trusted(f.workspace));
  snprintf(cmd, sizeof(cmd), "%s/agentloop/tools.d", cfg);
  write_at(cmd, "u.yaml", "name: user_tool\ndescription: d\ncmd: echo\n");
  write_at(cmd, "broken.yaml", "tools:\n  - name: [\n");
  f.opts.tools_d = true;
  fx_start(&f);
  ASSERT(has_tool(f.agent, "proj_tool", NULL));
  ASSERT(has_tool(f.agent, "user_tool", &errs));
  ASSERT_EQ(json_array_size(errs), 1);
  if (strstr(json_string_value(json_array_get(errs, 0)), "broken.yaml:") ==
      NULL) {
    AL_TEST_FAIL("errors: %s", json_string_value(json_array_get(errs, 0)));
  }
  json_decref(errs);
  fx_finish(&f);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cfg);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* A tools.d tool named like a built-in is reported, not registered. */
TEST_IMPL(tools_d_name_clash_with_builtin) {
  fx_t f;
  json_t *errs = NULL;
  char dir[] = "/tmp/al_toolsd_XXXXXX";
  const char *dirs[2];
  char cmd[300];

  ASSERT_NOT_NULL(mkdtemp(dir));
  write_at(dir, "x.yaml", "name: bash\ndescription: fake\ncmd: echo\n");
  dirs[0] = dir;
  dirs[1] = NULL;
  fx_init(&f, NULL);
  f.opts.tools_dirs = dirs;
  fx_start(&f);
  ASSERT(has_tool(f.agent, "bash", &errs));
  ASSERT_EQ(json_array_size(errs), 1);
  ASSERT_NOT_NULL(strstr(json_string_value(json_array_get(errs, 0)),
                         "x.yaml:1:1: tool 'bash' is already defined"));
  json_decref(errs);
  fx_finish(&f);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* The tools shipped in the repository's tools.d load cleanly and work in
 * a git workspace, inside the sandbox. */
TEST_IMPL(tools_d_shipped_tools_work) {
  fx_t f;
  const char *dirs[2] = {AL_SOURCE_DIR "/tools.d", NULL};
  const json_t *r;
  json_t *errs = NULL;
  char cmd[600];

  fx_init(&f,
          "responses:\n"
          "  - reply:\n"
          "      content:\n"
          "        - tool_use: {id: g1, name: grep_workspace, input: "
          "{pattern: 'needle[0-9]', path: '.'}}\n"
          "        - tool_use: {id: g2, name: find_files, input: {name: "
          "'*.txt'}}\n"
          "        - tool_use: {id: g3, name: git_status, input: {}}\n"
          "        - tool_use: {id: g4, name: git_log, input: {count: 5}}\n"
          "        - tool_use: {id: g5, name: git_diff, input: {path: "
          "a.txt}}\n"
          "        - tool_use: {id: g6, name: grep_workspace, input: "
          "{pattern: '-x', path: '--help'}}\n"
          "  - reply: {content: [{text: 'done'}]}\n");
  fx_write(&f, "a.txt", "hay\nneedle7\n");
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && git init -q && git -c user.email=t@t -c user.name=t "
           "add a.txt && git -c user.email=t@t -c user.name=t commit -qm "
           "first && echo more >> a.txt",
           f.workspace);
  ASSERT_EQ(system(cmd), 0);
  f.opts.tools_dirs = dirs;
  fx_start(&f);
  ASSERT(has_tool(f.agent, "git_diff", &errs));
  ASSERT_EQ(json_array_size(errs), 0);
  json_decref(errs);
  fx_run(&f, "look");
  r = fx_tool_result(&f, 1, "g1");
  ASSERT_STR_EQ(fx_jstr(r, "content"), "./a.txt:2:needle7\n");
  r = fx_tool_result(&f, 1, "g2");
  ASSERT_STR_EQ(fx_jstr(r, "content"), "./a.txt\n");
  r = fx_tool_result(&f, 1, "g3");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), " M a.txt"));
  r = fx_tool_result(&f, 1, "g4");
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), " first\n"));
  r = fx_tool_result(&f, 1, "g5");
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "+more"));
  /* A path that looks like an option is refused by its pattern. */
  r = fx_tool_result(&f, 1, "g6");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "parameter 'path'"));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* ---- D5: the file tools against a racing symlink swap ------------------------ */

typedef struct {
  char dir[320]; /* ws/d: flips between a directory and a link to out */
  char out[320];
  atomic_int stop;
  long flips;
} flip_t;

static void *flipper(void *arg) {
  flip_t *fl = arg;
  char other[340];

  /* d and d.x trade places atomically: d is always either the real
   * directory or a symlink to out. */
  snprintf(other, sizeof(other), "%s.x", fl->dir);
  ASSERT_EQ(symlink(fl->out, other), 0);
  while (!atomic_load(&fl->stop)) {
    if (renameat2(AT_FDCWD, other, AT_FDCWD, fl->dir, RENAME_EXCHANGE) ==
        0) {
      fl->flips++;
    }
  }
  return NULL;
}

typedef struct {
  int done;
  int n;
  int outside_ok;
} wr_t;

static void wr_completed(al_executor_t *ex, al_tool_call_t *call) {
  wr_t *w = ex->data;

  w->done++;
  if (!call->is_error) {
    w->outside_ok++;
  }
}

static al_tool_impl_t *g_write;

static const al_tool_impl_t *wr_lookup(al_executor_t *ex, const char *name) {
  (void)ex;
  (void)name;
  return g_write;
}

TEST_IMPL(tools_write_toctou_symlink_flip) {
  char base[] = "/tmp/al_toctou_XXXXXX";
  char ws[300];
  char cmd[700];
  flip_t fl;
  pthread_t th;
  uv_loop_t loop;
  al_executor_t ex;
  al_executor_options_t eo;
  al_fstools_options_t fo;
  wr_t w;
  int i;
  int rounds = 400;
  DIR *d;
  struct dirent *e;
  int outside = 0;

  ASSERT_NOT_NULL(mkdtemp(base));
  snprintf(ws, sizeof(ws), "%s/ws", base);
  memset(&fl, 0, sizeof(fl));
  snprintf(fl.out, sizeof(fl.out), "%s/out", base);
  snprintf(fl.dir, sizeof(fl.dir), "%s/d", ws);
  ASSERT_EQ(mkdir(ws, 0755), 0);
  ASSERT_EQ(mkdir(fl.out, 0755), 0);
  ASSERT_EQ(mkdir(fl.dir, 0755), 0);
  ASSERT_EQ(uv_loop_init(&loop), 0);
  al__fstools_options_init(&fo);
  fo.loop = &loop;
  fo.workspace = ws;
  ASSERT_EQ(al__write_file_new(&fo, &g_write), 0);
  memset(&w, 0, sizeof(w));
  al__executor_options_init(&eo);
  eo.lookup = wr_lookup;
  eo.on_completed = wr_completed;
  eo.data = &w;
  ASSERT_EQ(al__executor_init(&loop, &ex, &eo), 0);
  ASSERT_EQ(pthread_create(&th, NULL, flipper, &fl), 0);
  for (i = 0; i < rounds; i++) {
    json_t *in = json_pack("{s:s, s:s}", "path", "d/f", "content", "x");

    ASSERT_EQ(al__executor_reset(&ex), 0);
    ASSERT_EQ(al__executor_add(&ex, "w", "write_file", in), 0);
    json_decref(in);
    while (w.done == i) {
      uv_run(&loop, UV_RUN_ONCE);
    }
  }
  atomic_store(&fl.stop, 1);
  pthread_join(th, NULL);
  d = opendir(fl.out);
  while ((e = readdir(d)) != NULL) {
    outside += e->d_name[0] != '.';
  }
  closedir(d);
  printf("%d writes during %ld swaps: %d succeeded inside, %d refused, %d "
         "files outside\n",
         rounds, fl.flips, w.outside_ok, rounds - w.outside_ok, outside);
  ASSERT_EQ(outside, 0);
  ASSERT_GE(fl.flips, 1);
  al__executor_close(&ex, NULL);
  ASSERT_LOOP_CLOSES(&loop);
  al__fstool_free(g_write);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* `agentloop tools` lists the tools that load and, beside them, every
 * file that does not, with file:line:col; --json has the same. */
TEST_IMPL(tools_cmd_lists_tools_and_errors) {
  char dir[] = "/tmp/al_toolscmd_XXXXXX";
  char cfg[] = "/tmp/al_toolscfg_XXXXXX";
  char cmd[1200];
  char out[65536];
  size_t n;
  FILE *p;
  json_t *o;
  json_t *t;
  size_t i;
  bool good = false;
  int status;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_NOT_NULL(mkdtemp(cfg));
  write_at(dir, "ok.yaml", "name: good_tool\ndescription: d\ncmd: echo\n");
  write_at(dir, "bad.yaml",
           "tools:\n  - name: bad_tool\n    description: d\n    cmd: echo\n"
           "    category: nope\n");
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s' '%s/agentloop' tools --json "
           "--tools-dir '%s'",
           dir, cfg, AL_BINARY_DIR, dir);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  status = pclose(p);
  ASSERT_EQ(status, 0);
  o = json_loads(out, 0, NULL);
  if (o == NULL) {
    AL_TEST_FAIL("not JSON: %s", out);
  }
  json_array_foreach(json_object_get(o, "tools"), i, t) {
    good = good || strcmp(json_string_value(json_object_get(t, "name")),
                          "good_tool") == 0;
  }
  ASSERT(good);
  ASSERT_EQ(json_array_size(json_object_get(o, "errors")), 1);
  ASSERT_NOT_NULL(strstr(json_string_value(json_array_get(
                             json_object_get(o, "errors"), 0)),
                         "bad.yaml:5:15: tool 'bad_tool': category must be"));
  /* The mode the host's probe finds (not what this test is about). */
  ASSERT_STR_EQ(json_string_value(json_object_get(
                    json_object_get(o, "sandbox"), "mode")),
                al_test_bwrap_available(NULL, 0) ? "bwrap" : "degraded");
  json_decref(o);
  /* The text form names both. */
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s' '%s/agentloop' tools "
           "--tools-dir '%s'",
           dir, cfg, AL_BINARY_DIR, dir);
  p = popen(cmd, "r");
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  ASSERT_EQ(pclose(p), 0);
  ASSERT_NOT_NULL(strstr(out, "good_tool"));
  ASSERT_NOT_NULL(strstr(out, "errors:\n"));
  ASSERT_NOT_NULL(strstr(out, "bad.yaml:5:15:"));
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, cfg);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* Runs `agentloop tools ARGS` in dir with its own config home; returns
 * stdout (static) and asserts exit 0. */
static const char *tools_cmd_out(const char *dir, const char *cfg,
                                 const char *args) {
  static char out[65536];
  char cmd[1400];
  size_t n;
  FILE *p;

  snprintf(cmd, sizeof(cmd),
           "cd '%s' && XDG_CONFIG_HOME='%s' '%s/agentloop' tools %s", dir,
           cfg, AL_BINARY_DIR, args);
  p = popen(cmd, "r");
  ASSERT_NOT_NULL(p);
  n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  ASSERT_EQ(pclose(p), 0);
  return out;
}

/* A project tools.d skipped for want of trust is said in both forms, and
 * after --trust-project its tools are listed. */
TEST_IMPL(tools_cmd_says_untrusted_project) {
  char dir[] = "/tmp/al_toolsprj_XXXXXX";
  char cfg[] = "/tmp/al_toolscfg_XXXXXX";
  char sub[256];
  char cmd[600];
  const char *out;
  json_t *o;
  json_t *pt;

  ASSERT_NOT_NULL(mkdtemp(dir));
  ASSERT_NOT_NULL(mkdtemp(cfg));
  snprintf(sub, sizeof(sub), "%s/tools.d", dir);
  ASSERT_EQ(mkdir(sub, 0700), 0);
  write_at(sub, "p.yaml", "name: project_tool\ndescription: d\ncmd: echo\n");
  out = tools_cmd_out(dir, cfg, "");
  ASSERT_NULL(strstr(out, "project_tool"));
  ASSERT_NOT_NULL(strstr(out, "was not loaded"));
  ASSERT_NOT_NULL(strstr(out, "--trust-project"));
  o = json_loads(tools_cmd_out(dir, cfg, "--json"), 0, NULL);
  ASSERT_NOT_NULL(o);
  pt = json_object_get(o, "project_tools_d");
  ASSERT_STR_EQ(json_string_value(json_object_get(pt, "path")), sub);
  ASSERT(json_is_false(json_object_get(pt, "trusted")));
  json_decref(o);
  out = tools_cmd_out(dir, cfg, "--trust-project");
  ASSERT_NOT_NULL(strstr(out, "project_tool"));
  ASSERT_NULL(strstr(out, "was not loaded"));
  /* The decision is recorded: a later listing loads it too. */
  o = json_loads(tools_cmd_out(dir, cfg, "--json"), 0, NULL);
  ASSERT_NOT_NULL(o);
  ASSERT(json_is_true(json_object_get(json_object_get(o, "project_tools_d"),
                                      "trusted")));
  json_decref(o);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", dir, cfg);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}
