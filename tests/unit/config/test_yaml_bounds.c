/* The bounds of the one YAML loader (src/common/yamldoc.c, issue 22
 * defects 3 and 4) through every kind of file that uses it: config.yaml,
 * tools.d, mockllm scenarios and the models catalogue. A "billion laughs"
 * document (aliases of aliases) and a 10-line variant are refused with
 * FILE:LINE:COL before anything walks them, in bounded memory (measured in
 * a forked child); nesting is bounded the same way; the work of a load is
 * linear in the file's size (a 4x input's time ratio, measured in CPU time
 * within one run, loosely). */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "agentloop/models.h"
#include "common/yamlnode.h"
#include "config/config.h"
#include "mockllm/mockllm.h"
#include "test.h"
#include "tools/clitool.h"

typedef enum { K_CONFIG, K_TOOLS, K_SCENARIO, K_MODELS, K_N } kind_t;

static const char *const kind_names[] = {"config", "tools.d", "scenario",
                                         "models"};

/* Lines that define `levels` anchors l0.. (each a list of `width` of the
 * previous one; l0 holds strings), each at `indent` spaces, as a mapping. */
static void laughs(al_buf_t *b, int indent, int levels, int width) {
  int l, i;

  for (l = 0; l < levels; l++) {
    al_buf_printf(b, "%*sk%d: &l%d [", indent, "", l, l);
    for (i = 0; i < width; i++) {
      if (l == 0) {
        al_buf_printf(b, "%s\"lol\"", i > 0 ? "," : "");
      } else {
        al_buf_printf(b, "%s*l%d", i > 0 ? "," : "", l - 1);
      }
    }
    al_buf_append_str(b, "]\n");
  }
}

/* A document of the kind whose walk would meet every alias (the config's
 * kept sections, a scenario's tool input are turned into JSON whole). */
static char *laughs_doc(kind_t k, int levels, int width) {
  al_buf_t b;

  al_buf_init(&b, (size_t)1 << 24);
  switch (k) {
  case K_CONFIG:
    al_buf_append_str(&b, "model: m\nhooks:\n");
    laughs(&b, 2, levels, width);
    break;
  case K_TOOLS:
    al_buf_append_str(&b, "tools:\n  - name: t\n    description: d\n"
                          "    cmd: echo\n    x:\n");
    laughs(&b, 6, levels, width);
    break;
  case K_SCENARIO:
    al_buf_append_str(&b, "responses:\n  - reply:\n      content:\n"
                          "        - type: tool_use\n          name: t\n"
                          "          input:\n");
    laughs(&b, 12, levels, width);
    break;
  default:
    al_buf_append_str(&b, "models:\n  - match: m\n    x:\n");
    laughs(&b, 6, levels, width);
    break;
  }
  return b.data;
}

/* Loads text as a file of kind k; the first error line, malloc'd. */
static char *load_kind(kind_t k, const char *text) {
  char *out = NULL;

  switch (k) {
  case K_CONFIG: {
    al_config_t cfg;

    al_config_init(&cfg);
    ASSERT_EQ(al_config_load_string(&cfg, AL_CFG_USER, "c.yaml", text,
                                    strlen(text)),
              0);
    out = strdup(cfg.errors.data != NULL ? cfg.errors.data : "");
    al_config_free(&cfg);
    break;
  }
  case K_TOOLS: {
    al_cli_set_t set;

    al__cli_set_init(&set);
    ASSERT_EQ(al__cli_load_string(&set, "t.yaml", text, strlen(text), false),
              0);
    out = strdup(set.errors.data != NULL ? set.errors.data : "");
    al__cli_set_free(&set);
    break;
  }
  case K_SCENARIO: {
    al_mockllm_scenario_t *s = NULL;
    char err[1024] = "";

    (void)al_mockllm_load_scenario_string(text, strlen(text), "s.yaml", &s,
                                          err, sizeof(err));
    al_mockllm_scenario_free(s);
    out = strdup(err);
    break;
  }
  default: {
    al_models_t *m = NULL;
    char *err = NULL;

    (void)al_models_parse(&m, text, strlen(text), "m.yaml", &err);
    al_models_free(m);
    out = strdup(err != NULL ? err : "");
    al_free(err);
    break;
  }
  }
  return out;
}

static const char *file_of(kind_t k) {
  static const char *const f[] = {"c.yaml", "t.yaml", "s.yaml", "m.yaml"};

  return f[k];
}

/* err is "FILE:LINE:COL: ..." with LINE in [1, lines] and holds want. */
static void assert_placed(kind_t k, const char *err, int lines,
                          const char *want) {
  char pre[32];
  int line = 0, col = 0, used = 0;

  snprintf(pre, sizeof(pre), "%s:%%d:%%d: %%n", file_of(k));
  if (sscanf(err, pre, &line, &col, &used) < 2 || used == 0 || line < 1 ||
      line > lines || col < 1 || strstr(err, want) == NULL) {
    AL_TEST_FAIL("%s: wanted %s:LINE:COL: ...%s..., got: %s", kind_names[k],
                 file_of(k), want, err);
  }
}

static int count_lines(const char *s) {
  int n = 1;

  for (; *s != '\0'; s++) {
    n += *s == '\n';
  }
  return n;
}

/* Loads in a forked child; *err gets its error line, returns the child's
 * growth of maxrss in KiB. */
static long load_in_child(kind_t k, const char *text, char *err,
                          size_t err_len) {
  int fds[2];
  pid_t pid;
  int status;
  long grew = -1;
  ssize_t n;
  size_t got = 0;
  char buf[2048];

  ASSERT_EQ(pipe(fds), 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    struct rusage before, after;
    char *e;
    long d;

    close(fds[0]);
    getrusage(RUSAGE_SELF, &before);
    e = load_kind(k, text);
    getrusage(RUSAGE_SELF, &after);
    d = after.ru_maxrss - before.ru_maxrss;
    n = write(fds[1], &d, sizeof(d));
    n = write(fds[1], e, strlen(e) + 1);
    (void)n;
    _exit(0);
  }
  close(fds[1]);
  while ((n = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0) {
    got += (size_t)n;
  }
  close(fds[0]);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT(got > sizeof(grew));
  buf[got] = '\0';
  memcpy(&grew, buf, sizeof(grew));
  got = strlen(buf + sizeof(grew));
  got = got < err_len ? got : err_len - 1;
  memcpy(err, buf + sizeof(grew), got);
  err[got] = '\0';
  return grew;
}

/* The classic document (9 levels of 9: 10^9 strings) and a 10-line one
 * (10 levels of 60: 60^10), in every kind of file: refused at the alias
 * that passes the bound, with its place, in little memory. Before the
 * loader bounded them, a config or scenario of either never finished
 * (here: the runner's time limit) or a loader gave some other error. */
TEST_IMPL(yaml_billion_laughs_refused_in_every_loader) {
  static const int shapes[2][2] = {{9, 9}, {10, 60}};
  kind_t k;
  int s;

  for (k = 0; k < K_N; k++) {
    for (s = 0; s < 2; s++) {
      char *doc = laughs_doc(k, shapes[s][0], shapes[s][1]);
      char err[1024];
      long grew = load_in_child(k, doc, err, sizeof(err));

      assert_placed(k, err, count_lines(doc), "billion laughs");
      /* Loosely: the old loaders reached hundreds of MB. */
      if (grew > 32 * 1024) {
        AL_TEST_FAIL("%s: the load grew maxrss by %ld KiB", kind_names[k],
                     grew);
      }
      free(doc);
    }
  }
  return 0;
}

/* Aliases as a user writes them (a shared block reused) load as before;
 * an alias inside the node it names, an undefined one and more than
 * AL_YAML_MAX_ALIASES are refused with their place. */
TEST_IMPL(yaml_aliases_within_bounds) {
  static const char *const dry =
      "hooks:\n  base: &b {x: [1, 2]}\n  again: *b\n";
  al_config_t cfg;
  const json_t *hooks;
  al_buf_t b;
  char *e;
  int i;

  al_config_init(&cfg);
  ASSERT_EQ(al_config_load_string(&cfg, AL_CFG_USER, "c.yaml", dry,
                                  strlen(dry)),
            0);
  if (cfg.n_errors != 0) {
    AL_TEST_FAIL("%s", cfg.errors.data);
  }
  hooks = al_config_section(&cfg, "hooks");
  ASSERT_EQ(json_integer_value(json_array_get(
                json_object_get(json_object_get(hooks, "again"), "x"), 1)),
            2);
  al_config_free(&cfg);

  e = load_kind(K_CONFIG, "hooks:\n  a: &a [1, *a]\n");
  assert_placed(K_CONFIG, e, 2, "inside the node it names");
  if (strncmp(e, "c.yaml:2:13: YAML: alias", 24) != 0) {
    AL_TEST_FAIL("%s", e);
  }
  free(e);
  e = load_kind(K_SCENARIO, "responses:\n  - *nope\n");
  assert_placed(K_SCENARIO, e, 2, "undefined alias");
  free(e);

  al_buf_init(&b, (size_t)1 << 20);
  al_buf_append_str(&b, "hooks:\n  a: &a 1\n  b: [");
  for (i = 0; i <= AL_YAML_MAX_ALIASES; i++) {
    al_buf_append_str(&b, i > 0 ? ",*a" : "*a");
  }
  al_buf_append_str(&b, "]\n");
  e = load_kind(K_CONFIG, b.data);
  assert_placed(K_CONFIG, e, 3, "aliases");
  free(e);
  al_buf_free(&b);
  return 0;
}

static char *repeat(const char *head, const char *unit, size_t n,
                    const char *tail) {
  al_buf_t b;
  size_t i;

  al_buf_init(&b, (size_t)1 << 26);
  al_buf_append_str(&b, head);
  for (i = 0; i < n; i++) {
    al_buf_append_str(&b, unit);
  }
  al_buf_append_str(&b, tail);
  return b.data;
}

/* Nesting past AL_YAML_MAX_DEPTH, in flow and block style and in every
 * kind of file, is refused at the node that goes too deep. */
TEST_IMPL(yaml_deep_nesting_refused) {
  char *flow = repeat("model: m\nhooks: ", "[", 195 * 1024, "\n");
  char *e = load_kind(K_CONFIG, flow);
  char want[64];
  al_buf_t b;
  kind_t k;
  int i;

  /* "hooks: " is 7 columns; the 64th '[' is the 65th level. */
  snprintf(want, sizeof(want), "c.yaml:2:%d: YAML: nested deeper than %d",
           8 + AL_YAML_MAX_DEPTH - 1, AL_YAML_MAX_DEPTH);
  if (strncmp(e, want, strlen(want)) != 0) {
    AL_TEST_FAIL("got %s, wanted %s", e, want);
  }
  free(e);
  free(flow);
  for (k = 0; k < K_N; k++) {
    flow = repeat("", "[", 100 * 1024, "\n");
    e = load_kind(k, flow);
    assert_placed(k, e, 1, "nested deeper than");
    free(e);
    free(flow);
  }
  /* Block style: one more indent per level. */
  al_buf_init(&b, (size_t)1 << 24);
  for (i = 0; i < 2 * AL_YAML_MAX_DEPTH; i++) {
    al_buf_printf(&b, "%*sk%d:\n", i, "", i);
  }
  al_buf_printf(&b, "%*sx\n", i, "");
  e = load_kind(K_CONFIG, b.data);
  assert_placed(K_CONFIG, e, i + 1, "nested deeper than");
  free(e);
  al_buf_free(&b);
  return 0;
}

static double cpu_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The least CPU time of 3 loads of text (the least is the one the load
 * of the machine disturbed least). */
static double load_cpu(const char *text) {
  double best = 1e9;
  int i;

  for (i = 0; i < 3; i++) {
    yaml_document_t doc;
    al_yaml_error_t e;
    double t0 = cpu_now();
    double t;

    if (al_yaml_load(&doc, text, strlen(text), &e) == 0) {
      yaml_document_delete(&doc);
    }
    t = cpu_now() - t0;
    best = t < best ? t : best;
  }
  return best;
}

/* Four times the input, about four times the work: a large legal
 * document (a wide flow list, a long block mapping, nesting just under the
 * bound) and one nested too deep (refused after a constant amount of
 * work). A quadratic walk would take 16x; the bound, 8x, is loose for a
 * loaded machine. */
TEST_IMPL(yaml_load_work_linear) {
  static const struct {
    const char *head, *unit, *tail;
    size_t n;
  } shapes[] = {
      {"[", "abc, ", "x]\n", 5000},
      {"", "key_with_some_length: [1, {a: b}]\n", "", 1000},
      {"", NULL, "", 200}, /* lines nested just under the bound */
      {"", "[", "", 100000},
  };
  char deep[256];
  size_t i;
  int j;

  /* "- " is one level, then AL_YAML_MAX_DEPTH - 1 lists. */
  j = snprintf(deep, sizeof(deep), "- ");
  for (i = 0; i + 1 < AL_YAML_MAX_DEPTH; i++) {
    deep[j++] = '[';
  }
  deep[j++] = 'a';
  for (i = 0; i + 1 < AL_YAML_MAX_DEPTH; i++) {
    deep[j++] = ']';
  }
  deep[j++] = '\n';
  deep[j] = '\0';
  /* About 0.3 s of CPU, but wall time on a loaded 2-core machine. */
  al_test_timeout_s(30);
  for (i = 0; i < AL_ARRAY_SIZE(shapes); i++) {
    const char *unit = shapes[i].unit != NULL ? shapes[i].unit : deep;
    char *one = repeat(shapes[i].head, unit, shapes[i].n, shapes[i].tail);
    char *two = repeat(shapes[i].head, unit, 4 * shapes[i].n, shapes[i].tail);
    yaml_document_t doc;
    al_yaml_error_t e;
    double t1, t2;

    /* The legal ones load. */
    if (i < 3) {
      ASSERT_EQ(al_yaml_load(&doc, two, strlen(two), &e), 0);
      yaml_document_delete(&doc);
    }
    t1 = load_cpu(one);
    t2 = load_cpu(two);
    fprintf(stderr, "shape %zu: %zu bytes %.4f s, %zu bytes %.4f s\n", i,
            strlen(one), t1, strlen(two), t2);
    if (t2 > 8.0 * t1 + 0.002) {
      AL_TEST_FAIL("shape %zu: 4x the input took %.1fx the time", i, t2 / t1);
    }
    free(one);
    free(two);
  }
  return 0;
}

/* Runs bin with argv and env; returns its exit status, stderr into err. */
static int run_bin(char *const argv[], char *const env[], char *err,
                   size_t err_len) {
  int fds[2];
  pid_t pid;
  int status;
  size_t got = 0;
  ssize_t n;

  ASSERT_EQ(pipe(fds), 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execve(argv[0], argv, env);
    _exit(127);
  }
  close(fds[1]);
  while (got + 1 < err_len &&
         (n = read(fds[0], err + got, err_len - 1 - got)) > 0) {
    got += (size_t)n;
  }
  err[got] = '\0';
  close(fds[0]);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status));
  return WEXITSTATUS(status);
}

/* The programs a user meets: `agentloop run` with a 10-line billion laughs
 * as the user's config.yaml stops with the file's place before anything
 * is sent (it never finished before), and agentloop-mockllm refuses such
 * a scenario file at start. */
TEST_IMPL(yaml_billion_laughs_refused_by_programs) {
  char root[] = "/tmp/al_laughs_XXXXXX";
  char dir[128], path[160], xdg[160], home[160], bin[4096], err[4096];
  char *env[] = {"PATH=/usr/bin:/bin", "NO_COLOR=1", xdg, home,
                 "ANTHROPIC_API_KEY=k", NULL};
  char *run_argv[] = {bin, "run", "--base-url", "http://127.0.0.1:9",
                      "-p", "hi", NULL};
  char *mock_argv[] = {bin, "--scenario", path, NULL};
  char *doc;
  FILE *f;
  int st;

  ASSERT_NOT_NULL(mkdtemp(root));
  snprintf(xdg, sizeof(xdg), "XDG_CONFIG_HOME=%s", root);
  snprintf(home, sizeof(home), "HOME=%s", root);
  snprintf(dir, sizeof(dir), "%s/agentloop", root);
  ASSERT_EQ(mkdir(dir, 0700), 0);
  snprintf(path, sizeof(path), "%s/config.yaml", dir);
  doc = laughs_doc(K_CONFIG, 10, 60);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(doc, f);
  fclose(f);
  free(doc);
  snprintf(bin, sizeof(bin), "%s/agentloop", AL_BINARY_DIR);
  st = run_bin(run_argv, env, err, sizeof(err));
  if (st != 2 || strstr(err, "config.yaml:") == NULL ||
      strstr(err, "billion laughs") == NULL) {
    AL_TEST_FAIL("agentloop run: exit %d: %s", st, err);
  }
  /* agentloopd said nothing of it and started without it: now it names
   * the file and the place (and still starts, without that file). */
  {
    char rundir[160], statedir[160], sock[200], xrun[180], xstate[180];
    char *denv[] = {"PATH=/usr/bin:/bin", xdg, home, xrun, xstate, NULL};
    char *d_argv[] = {bin, "--foreground", "--socket", sock,
                      "--idle-exit", "1", NULL};

    snprintf(rundir, sizeof(rundir), "%s/run", root);
    snprintf(statedir, sizeof(statedir), "%s/state", root);
    ASSERT_EQ(mkdir(rundir, 0700), 0);
    ASSERT_EQ(mkdir(statedir, 0700), 0);
    snprintf(sock, sizeof(sock), "%s/d.sock", rundir);
    snprintf(xrun, sizeof(xrun), "XDG_RUNTIME_DIR=%s", rundir);
    snprintf(xstate, sizeof(xstate), "XDG_STATE_HOME=%s", statedir);
    snprintf(bin, sizeof(bin), "%s/agentloopd", AL_BINARY_DIR);
    st = run_bin(d_argv, denv, err, sizeof(err));
    if (strstr(err, "config.yaml:") == NULL ||
        strstr(err, "billion laughs") == NULL) {
      AL_TEST_FAIL("agentloopd: exit %d: %s", st, err);
    }
    al_test_rm_tree(rundir);
    al_test_rm_tree(statedir);
  }
  unlink(path);

  snprintf(path, sizeof(path), "%s/s.yaml", root);
  doc = laughs_doc(K_SCENARIO, 10, 60);
  f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(doc, f);
  fclose(f);
  free(doc);
  snprintf(bin, sizeof(bin), "%s/agentloop-mockllm", AL_BINARY_DIR);
  st = run_bin(mock_argv, env, err, sizeof(err));
  if (st == 0 || strstr(err, "s.yaml:") == NULL ||
      strstr(err, "billion laughs") == NULL) {
    AL_TEST_FAIL("agentloop-mockllm: exit %d: %s", st, err);
  }
  unlink(path);
  rmdir(dir);
  rmdir(root);
  return 0;
}
