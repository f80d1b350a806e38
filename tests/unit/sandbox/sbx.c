/* Sandbox test fixture: see sbx.h. */
#include <dirent.h>
#include <poll.h>
#include <sys/pidfd.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "test.h"
#include "sandbox/launch.h"
#include "sandbox/pool.h"
#include "unit/sandbox/sbx.h"

uint64_t sbx_pool_idle_ms;
uint64_t sbx_data_bytes;
bool sbx_no_cgroup;
bool sbx_no_pool;
bool sbx_no_owner;

#include "tools/bash.h"

/* The CLI tools every escape test may call. */
static const char k_cli_yaml[] =
    "tools:\n"
    "  - name: show\n"
    "    description: print one value in brackets\n"
    "    category: read\n"
    "    cmd: printf\n"
    "    args: ['[%s]\\n', '{{v}}']\n"
    "    parameters:\n"
    "      v: {type: string}\n"
    "  - name: show_embedded\n"
    "    description: the value inside an option element\n"
    "    category: read\n"
    "    cmd: printf\n"
    "    args: ['[%s]\\n', '--name={{v}}']\n"
    "    optional_args:\n"
    "      extra: ['[{{extra}}]']\n"
    "    parameters:\n"
    "      v: {type: string}\n"
    "      extra: {type: string, optional: true}\n"
    "  - name: grep_ws\n"
    "    description: grep the workspace\n"
    "    category: read\n"
    "    cmd: grep\n"
    "    args: ['-rn', '{{pattern}}', '.']\n"
    "    parameters:\n"
    "      pattern: {type: string, maxLength: 200}\n"
    "  - name: kubectl_get\n"
    "    description: seed 001 example\n"
    "    category: read\n"
    "    cmd: printf\n"
    "    args: ['%s %s\\n', 'get', '{{resource}}']\n"
    "    optional_args:\n"
    "      namespace: ['-n', '{{namespace}}']\n"
    "    parameters:\n"
    "      resource:\n"
    "        type: string\n"
    "        enum: [pods, services, deployments]\n"
    "      namespace:\n"
    "        type: string\n"
    "        pattern: '^[a-z0-9-]+$'\n"
    "        optional: true\n"
    "  - name: curl_get\n"
    "    description: a tool that does not declare network\n"
    "    category: read\n"
    "    cmd: curl\n"
    "    args: ['-s', '-m', '2', '{{url}}']\n"
    "    parameters:\n"
    "      url: {type: string, pattern: '^http://'}\n"
    "  - name: env_tool\n"
    "    description: declared env\n"
    "    category: read\n"
    "    cmd: env\n"
    "    env:\n"
    "      DEPLOY_TOKEN: 'tok-${SBX_DEPLOY}'\n";

static void write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

  ASSERT(fd >= 0);
  ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  chmod(path, mode);
}

static void mkdirs(const char *path) {
  char buf[512];
  char *s;

  snprintf(buf, sizeof(buf), "%s", path);
  for (s = strchr(buf + 1, '/'); s != NULL; s = strchr(s + 1, '/')) {
    *s = '\0';
    mkdir(buf, 0755);
    *s = '/';
  }
  mkdir(buf, 0755);
}

static void pathf(char *dst, size_t n, const char *a, const char *b) {
  snprintf(dst, n, "%s/%s", a, b);
}

static int listen_tcp(int *port) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

  ASSERT(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ASSERT_EQ(listen(fd, 64), 0);
  ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

static int listen_unix(const char *path) {
  struct sockaddr_un sa;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

  ASSERT(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  ASSERT(strlen(path) < sizeof(sa.sun_path));
  strcpy(sa.sun_path, path);
  ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ASSERT_EQ(listen(fd, 64), 0);
  return fd;
}

int sbx_connections(sbx_t *x) {
  int n = 0;
  int c;

  while ((c = accept(x->tcp_fd, NULL, NULL)) >= 0) {
    close(c);
    n++;
  }
  while ((c = accept(x->unix_fd, NULL, NULL)) >= 0) {
    close(c);
    n++;
  }
  return n;
}

/* ---- executor plumbing ----------------------------------------------------- */

static const al_tool_impl_t *lookup(al_executor_t *ex, const char *name) {
  sbx_t *x = ex->data;
  size_t i;

  if (strcmp(name, "bash") == 0) {
    return x->bash;
  }
  if (strcmp(name, "read_file") == 0) {
    return x->read_file;
  }
  if (strcmp(name, "write_file") == 0) {
    return x->write_file;
  }
  if (strcmp(name, "list_directory") == 0) {
    return x->list_dir;
  }
  for (i = 0; i < x->cli.n; i++) {
    if (strcmp(name, x->cli.defs[i]->name) == 0) {
      return x->cli_tools[i];
    }
  }
  return NULL;
}

static void on_completed(al_executor_t *ex, al_tool_call_t *call) {
  sbx_t *x = ex->data;

  x->completed++;
  x->is_error = call->is_error;
  free(x->content);
  x->content = strndup(call->content, call->content_len);
}

static void on_close(al_executor_t *ex) {
  sbx_t *x = ex->data;

  x->closed = true;
}

void sbx_init(sbx_t *x, sbx_mode_t mode) {
  al_sandbox_config_t cfg;
  al_sandbox_info_t info;
  al_bash_options_t bo;
  al_fstools_options_t fo;
  al_clitool_options_t co;
  al_executor_options_t eo;
  const char *roots[1];
  const char *hidden[1];
  const char *denied[1];
  char p[512];
  char secret[256];
  int mult = al_test_timeout_multiplier();
  size_t i;
  int fd;

  if (mode == SBX_BWRAP) {
    al_test_need_bwrap();
  }
  memset(x, 0, sizeof(*x));
  snprintf(x->base, sizeof(x->base), "/var/tmp/al_sbx_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(x->base));
  ASSERT_NOT_NULL(realpath(x->base, p));
  ASSERT(strlen(p) < 100);
  memcpy(x->base, p, strlen(p) + 1);
  pathf(x->ws, sizeof(x->ws), x->base, "ws");
  pathf(x->out, sizeof(x->out), x->base, "out");
  pathf(x->home, sizeof(x->home), x->base, "home");
  pathf(x->run, sizeof(x->run), x->base, "run");
  mkdirs(x->ws);
  mkdirs(x->out);
  mkdirs(x->run);
  chmod(x->base, 0755);

  /* Traps in and around the workspace. */
  pathf(p, sizeof(p), x->out, "canary");
  write_file(p, "original\n", 0644);
  pathf(p, sizeof(p), x->ws, "file.txt");
  write_file(p, "inside\n", 0644);
  pathf(p, sizeof(p), x->ws, "secret");
  mkdirs(p);
  pathf(secret, sizeof(secret), x->ws, "secret/key");
  write_file(secret, SBX_DENIED_CANARY "\n", 0600);
  pathf(p, sizeof(p), x->ws, ".git");
  mkdirs(p);
  pathf(p, sizeof(p), x->ws, ".git/config");
  write_file(p, "orig\n", 0644);
  {
    char t[512];

    pathf(t, sizeof(t), x->out, "canary");
    pathf(p, sizeof(p), x->ws, "link");
    ASSERT_EQ(symlink(t, p), 0);
    pathf(p, sizeof(p), x->ws, "dlink");
    ASSERT_EQ(symlink(x->out, p), 0);
    pathf(p, sizeof(p), x->ws, "l2");
    ASSERT_EQ(symlink(t, p), 0);
    pathf(p, sizeof(p), x->ws, "l1");
    ASSERT_EQ(symlink("l2", p), 0);
    pathf(t, sizeof(t), x->out, "newfile");
    pathf(p, sizeof(p), x->ws, "dangle");
    ASSERT_EQ(symlink(t, p), 0);
  }
  /* Secrets at home and in agentloop's own directories. */
  pathf(p, sizeof(p), x->home, ".ssh");
  mkdirs(p);
  pathf(p, sizeof(p), x->home, ".ssh/id_rsa");
  write_file(p, SBX_FILE_CANARY "\n", 0600);
  pathf(p, sizeof(p), x->home, ".config/agentloop");
  mkdirs(p);
  pathf(p, sizeof(p), x->home, ".config/agentloop/config.yaml");
  write_file(p, "api_key: " SBX_FILE_CANARY "\n", 0600);
  pathf(p, sizeof(p), x->home, ".local/state/agentloop");
  mkdirs(p);
  pathf(p, sizeof(p), x->home, ".local/state/agentloop/s.jsonl");
  write_file(p, SBX_FILE_CANARY "\n", 0600);
  pathf(p, sizeof(p), x->run, "agentloop");
  mkdirs(p);
  pathf(x->sock, sizeof(x->sock), x->run, "agentloop/agentloopd.sock");

  /* The host: secrets in its environment, then hardened as agentloopd /
   * agentloop run are. An fd opened before without O_CLOEXEC must not
   * reach a tool either. */
  setenv("HOME", x->home, 1);
  unsetenv("XDG_CONFIG_HOME");
  unsetenv("XDG_STATE_HOME");
  setenv("XDG_RUNTIME_DIR", x->run, 1);
  setenv("ANTHROPIC_API_KEY", SBX_CANARY1, 1);
  setenv("OPENAI_API_KEY", SBX_CANARY2, 1);
  setenv("GITHUB_TOKEN", SBX_CANARY3, 1);
  setenv("SBX_DEPLOY", "declared", 1);
  setenv("BASH_ENV", "/E1MARK", 1);
  setenv("ENV", "/E1MARK", 1);
  setenv("PROMPT_COMMAND", "E1MARK", 1);
  setenv("GIT_SSH_COMMAND", "E1MARK", 1);
  setenv("NODE_OPTIONS", "E1MARK", 1);
  setenv("PYTHONSTARTUP", "E1MARK", 1);
  fd = open(secret, O_RDONLY); /* deliberately without O_CLOEXEC */
  ASSERT(fd >= 3);
  ASSERT_EQ(al_sandbox_harden_process(), 0);
  ASSERT_NULL(getenv("ANTHROPIC_API_KEY"));
  ASSERT_STR_EQ(al_sandbox_getenv("ANTHROPIC_API_KEY"), SBX_CANARY1);
  x->tcp_fd = listen_tcp(&x->tcp_port);
  x->unix_fd = listen_unix(x->sock);

  /* The sandbox under test. */
  al__sandbox_config_init(&cfg);
  cfg.policy = AL_SANDBOX_AUTO;
  cfg.probe.helper = AL_BINARY_DIR "/agentloop-exec";
  cfg.probe.no_cgroup = sbx_no_cgroup;
  cfg.test_no_owner = sbx_no_owner;
  if (mode == SBX_DEGRADED) {
    /* A bwrap that fails the way a userns-restricted one does. */
    cfg.probe.bwrap = "/bin/false";
  }
  roots[0] = x->ws;
  pathf(p, sizeof(p), x->ws, "secret");
  hidden[0] = p;
  cfg.write_roots = roots;
  cfg.n_write_roots = 1;
  cfg.hidden = hidden;
  cfg.n_hidden = 1;
  cfg.nproc = 64;
  cfg.nofile = 256;
  cfg.as_bytes = (uint64_t)1 << 30;
  cfg.data_bytes = sbx_data_bytes;
  cfg.fsize_bytes = (uint64_t)16 << 20;
  ASSERT_EQ(al__sandbox_new(&cfg, &x->sb, &info), 0);
  if (info.mode != (mode == SBX_BWRAP ? AL_SANDBOX_MODE_BWRAP
                                      : AL_SANDBOX_MODE_DEGRADED)) {
    AL_TEST_FAIL("sandbox mode %s, wanted %s (%s)",
                 al_sandbox_mode_name(info.mode),
                 mode == SBX_BWRAP ? "bwrap" : "degraded", info.detail);
  }

  ASSERT_EQ(uv_loop_init(&x->loop), 0);
  if (mode == SBX_BWRAP && !sbx_no_pool) {
    /* Every bwrap-mode attempt goes through a warm sandbox (sbx_call
     * checks that it did), as agents run them. */
    ASSERT_EQ(al__pool_start(&x->loop, x->sb, 4, sbx_pool_idle_ms), 0);
    ASSERT(al__pool_stats(x->sb, &(al_pool_stats_t){0}));
  }
  /* Cold starts find their cgroup joined, as agents run them (where
   * tools get a cgroup). */
  ASSERT_EQ(al__launch_start(&x->loop, x->sb, sbx_pool_idle_ms), 0);
  al__executor_options_init(&eo);
  eo.lookup = lookup;
  eo.on_completed = on_completed;
  eo.data = x;
  ASSERT_EQ(al__executor_init(&x->loop, &x->ex, &eo), 0);

  al__bash_options_init(&bo);
  bo.loop = &x->loop;
  bo.workspace = x->ws;
  bo.sandbox = x->sb;
  bo.timeout_ms = 10000 * (uint64_t)mult;
  bo.kill_grace_ms = 100;
  bo.drain_ms = 200;
  ASSERT_EQ(al__bash_tool_new(&bo, &x->bash), 0);

  al__fstools_options_init(&fo);
  fo.loop = &x->loop;
  fo.workspace = x->ws;
  denied[0] = "secret";
  fo.denied_paths = denied;
  fo.n_denied_paths = 1;
  ASSERT_EQ(al__read_file_new(&fo, &x->read_file), 0);
  ASSERT_EQ(al__write_file_new(&fo, &x->write_file), 0);
  ASSERT_EQ(al__list_directory_new(&fo, &x->list_dir), 0);

  al__cli_set_init(&x->cli);
  ASSERT_EQ(al__cli_load_string(&x->cli, "sbx.yaml", k_cli_yaml,
                                strlen(k_cli_yaml), false),
            0);
  if (x->cli.n_errors != 0) {
    AL_TEST_FAIL("cli tools: %s", x->cli.errors.data);
  }
  x->cli_tools = calloc(x->cli.n, sizeof(*x->cli_tools));
  al__clitool_options_init(&co);
  co.loop = &x->loop;
  co.workspace = x->ws;
  co.sandbox = x->sb;
  co.kill_grace_ms = 100;
  co.drain_ms = 200;
  for (i = 0; i < x->cli.n; i++) {
    ASSERT_EQ(al__clitool_new(&co, x->cli.defs[i], &x->cli_tools[i]), 0);
  }
}

void sbx_call(sbx_t *x, const char *name, const char *input) {
  json_error_t jerr;
  json_t *in = json_loads(input, JSON_ALLOW_NUL, &jerr);
  int before = x->completed;
  al_pool_stats_t st;
  al_pool_stats_t after;

  if (in == NULL) {
    AL_TEST_FAIL("bad test input %s: %s", input, jerr.text);
  }
  ASSERT_EQ(al__executor_reset(&x->ex), 0);
  if (al__pool_stats(x->sb, &st)) {
    /* A warm sandbox that matches the workspace as the attempt set it
     * up (its set-up may have changed a protected path). */
    sbx_wait_warm(x);
    al__pool_stats(x->sb, &st);
  }
  ASSERT_EQ(al__executor_add(&x->ex, "call1", name, in), 0);
  json_decref(in);
  while (x->completed == before) {
    uv_run(&x->loop, UV_RUN_ONCE);
  }
  if (strcmp(name, "bash") == 0 && al__pool_stats(x->sb, &after)) {
    ASSERT_EQ(after.served, st.served + 1);
  }
}

void sbx_wait_warm(sbx_t *x) {
  al_pool_stats_t st;

  for (;;) {
    al__pool_prune(x->sb);
    ASSERT(al__pool_stats(x->sb, &st));
    if (st.idle_k[0] > 0 && st.planned) {
      return;
    }
    ASSERT_EQ(st.failed, 0);
    uv_run(&x->loop, UV_RUN_ONCE);
  }
}

const char *sbx_expand(const sbx_t *x, const char *s, const char *mark) {
  static char out[16384];
  size_t o = 0;

  while (*s != '\0' && o + 512 < sizeof(out)) {
    const char *v = NULL;
    char num[32];
    size_t skip = 0;

    if (strncmp(s, "${WS}", 5) == 0) {
      v = x->ws, skip = 5;
    } else if (strncmp(s, "${OUT}", 6) == 0) {
      v = x->out, skip = 6;
    } else if (strncmp(s, "${HOME}", 7) == 0) {
      v = x->home, skip = 7;
    } else if (strncmp(s, "${SOCK}", 7) == 0) {
      v = x->sock, skip = 7;
    } else if (strncmp(s, "${MARK}", 7) == 0) {
      v = mark, skip = 7;
    } else if (strncmp(s, "${PID}", 6) == 0) {
      snprintf(num, sizeof(num), "%d", (int)getpid());
      v = num, skip = 6;
    } else if (strncmp(s, "${PORT}", 7) == 0) {
      snprintf(num, sizeof(num), "%d", x->tcp_port);
      v = num, skip = 7;
    }
    if (v != NULL) {
      size_t l = strlen(v);

      memcpy(out + o, v, l);
      o += l;
      s += skip;
    } else {
      out[o++] = *s++;
    }
  }
  out[o] = '\0';
  return out;
}

/* ---- processes -------------------------------------------------------------- */

bool sbx_process_with(const char *mark) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  bool found = false;

  ASSERT_NOT_NULL(d);
  while (!found && (e = readdir(d)) != NULL) {
    char path[300];
    char buf[4096];
    char st[256];
    FILE *f;
    size_t n;
    size_t i;

    if (atol(e->d_name) <= 0 || atol(e->d_name) == (long)getpid()) {
      continue;
    }
    snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(st, 1, sizeof(st) - 1, f);
    fclose(f);
    st[n] = '\0';
    {
      char *rp = strrchr(st, ')');

      if (rp == NULL || rp[2] == 'Z' || rp[2] == 'X') {
        continue; /* a zombie is gone for our purpose */
      }
    }
    snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) {
      continue;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    for (i = 0; i < n; i++) {
      if (buf[i] == '\0') {
        buf[i] = ' ';
      }
    }
    buf[n] = '\0';
    found = strstr(buf, mark) != NULL;
  }
  closedir(d);
  return found;
}

typedef struct {
  uv_timer_t t;
  const char *mark;
  int polls;
  bool gone;
  bool done;
} pwait_t;

static void on_pw_close(uv_handle_t *h) { ((pwait_t *)h->data)->done = true; }

static void on_pw(uv_timer_t *t) {
  pwait_t *w = t->data;

  w->polls++;
  if (!sbx_process_with(w->mark)) {
    w->gone = true;
  }
  if (w->gone || w->polls > 600 * al_test_timeout_multiplier()) {
    uv_close((uv_handle_t *)t, on_pw_close);
  }
}

bool sbx_wait_no_process(sbx_t *x, const char *mark) {
  pwait_t w;

  memset(&w, 0, sizeof(w));
  w.mark = mark;
  ASSERT_EQ(uv_timer_init(&x->loop, &w.t), 0);
  w.t.data = &w;
  ASSERT_EQ(uv_timer_start(&w.t, on_pw, 0, 5), 0);
  while (!w.done) {
    uv_run(&x->loop, UV_RUN_ONCE);
  }
  return w.gone;
}

void sbx_finish(sbx_t *x) {
  char cmd[512];
  size_t i;

  al__executor_close(&x->ex, on_close);
  /* The warm pool goes with the sandbox, on the loop. */
  al__sandbox_free(x->sb);
  x->sb = NULL;
  ASSERT_LOOP_CLOSES(&x->loop);
  ASSERT(x->closed);
  al__bash_tool_free(x->bash);
  al__fstool_free(x->read_file);
  al__fstool_free(x->write_file);
  al__fstool_free(x->list_dir);
  for (i = 0; i < x->cli.n; i++) {
    al__clitool_free(x->cli_tools[i]);
  }
  free(x->cli_tools);
  al__cli_set_free(&x->cli);
  close(x->tcp_fd);
  close(x->unix_fd);
  free(x->content);
  snprintf(cmd, sizeof(cmd), "chmod -R u+rwX '%s' 2>/dev/null; rm -rf '%s'",
           x->base, x->base);
  ASSERT_EQ(system(cmd), 0);
}

static void run_done(al_spawn_t *sp, const al_spawn_result_t *r) {
  sbx_run_t *w = sp->data;

  w->done = true;
  w->status = r->status;
  w->pid = r->pid;
  w->exit_status = r->exit_status;
  snprintf(w->out, sizeof(w->out), "%.*s%.*s", (int)r->out_len, r->out,
           (int)r->err_len, r->err);
}

al_spawn_t *sbx_run_start(sbx_t *x, const char *cmd, sbx_run_t *w,
                          uint64_t timeout_ms) {
  const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  al_spawn_options_t o;
  al_spawn_t *sp = NULL;

  memset(w, 0, sizeof(*w));
  al__spawn_options_init(&o);
  o.argv = argv;
  o.cwd = x->ws;
  o.on_done = run_done;
  o.data = w;
  o.sandbox = x->sb;
  o.timeout_ms = timeout_ms;
  o.kill_grace_ms = 100;
  o.drain_ms = 200;
  ASSERT_EQ(al__spawn_start(&x->loop, &o, &sp), 0);
  return sp;
}

void sbx_run_wait(sbx_t *x, sbx_run_t *w) {
  while (!w->done) {
    uv_run(&x->loop, UV_RUN_ONCE);
  }
}

void sbx_need_cgroup(sbx_t *x) {
  const al_sandbox_info_t *info = al__sandbox_info(x->sb);

  if (info->cgroup_ok) {
    return;
  }
  if (al_test_ci()) {
    AL_TEST_FAIL("CI=true: tool cgroups are not available: %s",
                 info->cgroup_detail);
  }
  fprintf(stderr, "not run: tool cgroups cannot be made here: %s\n",
          info->cgroup_detail);
  sbx_finish(x);
  exit(AL_TEST_SKIP_CODE);
}

/* ---- process trees --------------------------------------------------------- */

static int ppid_of(int pid) {
  char path[64];
  char buf[1024];
  FILE *f;
  size_t n;
  char *rp;
  int ppid = -1;

  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  f = fopen(path, "re");
  if (f == NULL) {
    return -1;
  }
  n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  rp = strrchr(buf, ')');
  if (rp == NULL || sscanf(rp + 1, " %*c %d", &ppid) != 1) {
    return -1;
  }
  return ppid;
}

/* `root` and every process below it; a pidfd for each (readable once it
 * has exited, whoever its parent). */
size_t sbx_tree_pidfds(int root, int *fds, size_t max) {
  int pids[SBX_MAX_TREE];
  size_t n = 0, i, k;
  bool grew = true;

  pids[n++] = root;
  while (grew && n < SBX_MAX_TREE) {
    DIR *d = opendir("/proc");
    struct dirent *de;

    ASSERT_NOT_NULL(d);
    grew = false;
    while ((de = readdir(d)) != NULL && n < SBX_MAX_TREE) {
      int pid = atoi(de->d_name);
      int pp;
      bool known = false;

      if (pid <= 0) {
        continue;
      }
      for (k = 0; k < n; k++) {
        known = known || pids[k] == pid;
      }
      pp = known ? -1 : ppid_of(pid);
      for (k = 0; k < n && pp > 0; k++) {
        if (pids[k] == pp) {
          pids[n++] = pid;
          grew = true;
          break;
        }
      }
    }
    closedir(d);
  }
  for (i = 0, k = 0; i < n && k < max; i++) {
    int fd = (int)pidfd_open(pids[i], 0);

    if (fd >= 0) {
      fds[k++] = fd;
    }
  }
  return k;
}

/* True when every process exits within the (scaled) limit. */
bool sbx_all_exit(int *fds, size_t n) {
  int limit_ms = 10000 * al_test_timeout_multiplier();
  size_t i;
  bool ok = true;

  for (i = 0; i < n; i++) {
    struct pollfd p = {fds[i], POLLIN, 0};
    int r;

    do {
      r = poll(&p, 1, limit_ms);
    } while (r < 0 && errno == EINTR);
    ok = ok && r == 1;
    close(fds[i]);
  }
  return ok;
}

