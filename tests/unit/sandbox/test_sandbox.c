/* Sandbox probe, modes and fallbacks (RELIABILITY.md D13), the host's
 * hygiene (E2, E4, D16) and the agent's use of them (run_started, headless
 * refusal, --sandbox=none / required). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "unit/loop/agent_fx.h"
#include "unit/sandbox/sbx.h"

#define HELPER AL_BINARY_DIR "/agentloop-exec"

static al_sandbox_info_t probe(const char *bwrap, const char *helper,
                               bool no_landlock) {
  al_sandbox_probe_options_t o;
  al_sandbox_info_t info;

  al_sandbox_probe_options_init(&o);
  o.bwrap = bwrap;
  o.helper = helper;
  o.no_landlock = no_landlock;
  ASSERT_EQ(al_sandbox_probe(&o, &info), 0);
  return info;
}

/* CI installs bubblewrap: there bwrap mode must work, or the suite fails
 * (CI=true); elsewhere the test does not run where it cannot. */
TEST_IMPL(sandbox_probe_bwrap_mode) {
  al_sandbox_info_t info;
  char *json = NULL;
  json_t *o;

  al_test_need_bwrap();
  info = probe(NULL, HELPER, false);
  if (info.mode != AL_SANDBOX_MODE_BWRAP) {
    AL_TEST_FAIL("bwrap mode does not work here: %s", info.detail);
  }
  ASSERT(info.bwrap_ok);
  ASSERT(info.helper_ok);
  ASSERT(info.seccomp_ok);
  ASSERT_GE(info.landlock_abi, 1);
  ASSERT_STR_EQ(al_sandbox_mode_name(info.mode), "bwrap");
  ASSERT_EQ(al_sandbox_info_json(&info, &json), 0);
  o = json_loads(json, 0, NULL);
  ASSERT_NOT_NULL(o);
  ASSERT_STR_EQ(json_string_value(json_object_get(o, "mode")), "bwrap");
  ASSERT_EQ(json_integer_value(json_object_get(o, "landlock_abi")),
            info.landlock_abi);
  ASSERT(json_is_array(json_object_get(o, "missing")));
  printf("probe: %s\n", json);
  json_decref(o);
  al_free(json);
  return 0;
}

/* A bwrap that fails (as AppArmor's userns restriction makes it): the
 * helper alone, reported as degraded with what is missing. */
TEST_IMPL(sandbox_probe_degraded_when_bwrap_fails) {
  al_sandbox_info_t info = probe("/bin/false", HELPER, false);

  ASSERT_EQ(info.mode, AL_SANDBOX_MODE_DEGRADED);
  ASSERT(!info.bwrap_ok);
  ASSERT(info.helper_ok);
  ASSERT_NOT_NULL(strstr(info.detail, "bwrap failed"));
  ASSERT_NOT_NULL(strstr(info.missing, "pid-namespace"));
  ASSERT_NOT_NULL(strstr(info.missing, "protected-subpaths"));
  ASSERT_STR_EQ(al_sandbox_mode_name(info.mode), "degraded");
  info = probe("/nonexistent/bwrap", HELPER, false);
  ASSERT_EQ(info.mode, AL_SANDBOX_MODE_DEGRADED);
  ASSERT_NOT_NULL(strstr(info.detail, "apt-get install bubblewrap"));
  return 0;
}

/* Neither bwrap nor Landlock (the test seam reports it missing): none. */
TEST_IMPL(sandbox_probe_none_without_landlock_or_helper) {
  al_sandbox_info_t info = probe("/bin/false", HELPER, true);

  ASSERT_EQ(info.mode, AL_SANDBOX_MODE_NONE);
  ASSERT_EQ(info.landlock_abi, 0);
  ASSERT_STR_EQ(info.missing, "all");
  info = probe(NULL, "/nonexistent/agentloop-exec", false);
  ASSERT_EQ(info.mode, AL_SANDBOX_MODE_NONE);
  ASSERT_NOT_NULL(strstr(info.detail, "agentloop-exec not found"));
  /* bwrap works but Landlock is missing: still bwrap mode, reported. */
  al_test_need_bwrap();
  info = probe(NULL, HELPER, true);
  ASSERT_EQ(info.mode, AL_SANDBOX_MODE_BWRAP);
  ASSERT_NOT_NULL(strstr(info.missing, "landlock"));
  return 0;
}

/* ---- the agent ------------------------------------------------------------- */

static const char two_tools_yaml[] =
    "responses:\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: b1, name: bash, input: {command: 'echo ran'}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: w1, name: write_file, input: {path: a.txt, "
    "content: x}}\n"
    "  - reply:\n"
    "      content:\n"
    "        - tool_use: {id: r1, name: list_directory, input: {}}\n"
    "  - reply: {content: [{text: 'done'}]}\n";

static const char *run_started_sandbox(const fx_t *f) {
  long i = fx_find(f, "run_started", NULL, 0);

  ASSERT(i >= 0);
  return fx_jstr(fx_event(f, i), "sandbox");
}

/* No sandbox works and nobody opted out: a headless run refuses bash and
 * write tools, read tools still run; run_started says "none". */
TEST_IMPL(sandbox_headless_refuses_without_sandbox) {
  fx_t f;
  const json_t *r;

  fx_init(&f, two_tools_yaml);
  f.opts.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  f.opts.sandbox_bwrap = "/bin/false";
  f.opts.sandbox_no_landlock = true;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_last_type(&f), "final");
  ASSERT_STR_EQ(run_started_sandbox(&f), "none");
  r = fx_tool_result(&f, 1, "b1");
  ASSERT_NOT_NULL(r);
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "no sandbox works"));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "--sandbox=none"));
  r = fx_tool_result(&f, 2, "w1");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "no sandbox works"));
  r = fx_tool_result(&f, 3, "r1");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  fx_assert_valid(&f);
  fx_finish(&f);
  return 0;
}

/* --sandbox=none: the user opted out; everything runs, unconfined. */
TEST_IMPL(sandbox_off_runs_unconfined) {
  fx_t f;
  const json_t *r;

  fx_init(&f, two_tools_yaml);
  f.opts.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  f.opts.sandbox = AL_SANDBOX_OFF;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(run_started_sandbox(&f), "none");
  r = fx_tool_result(&f, 1, "b1");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  ASSERT_STR_EQ(fx_jstr(r, "content"), "ran\n");
  r = fx_tool_result(&f, 2, "w1");
  ASSERT(!json_is_true(json_object_get(r, "is_error")));
  fx_finish(&f);
  return 0;
}

/* The default: bwrap mode, reported in run_started; bash runs inside it
 * (its PID 1 is bwrap). Degraded mode is reported as such. */
TEST_IMPL(sandbox_run_started_reports_mode) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: b1, name: bash, input: {command: 'cat "
      "/proc/1/comm'}}\n"
      "  - reply: {content: [{text: 'done'}]}\n";
  fx_t f;

  fx_init(&f, yaml);
  f.opts.sandbox_bwrap = "/bin/false";
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(run_started_sandbox(&f), "degraded");
  /* No PID namespace there: PID 1 is the machine's init. */
  ASSERT(strcmp(fx_jstr(fx_tool_result(&f, 1, "b1"), "content"),
                "bwrap\n") != 0);
  fx_finish(&f);

  al_test_need_bwrap();
  fx_init(&f, yaml);
  f.opts.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(run_started_sandbox(&f), "bwrap");
  ASSERT_STR_EQ(fx_jstr(fx_tool_result(&f, 1, "b1"), "content"), "bwrap\n");
  fx_finish(&f);
  return 0;
}

/* --sandbox=required where bwrap cannot run: the agent is not created. */
TEST_IMPL(sandbox_required_fails_without_bwrap) {
  fx_t f;
  al_agent_t *a = NULL;

  fx_init(&f, NULL);
  f.opts.sandbox = AL_SANDBOX_REQUIRED;
  f.opts.sandbox_bwrap = "/bin/false";
  ASSERT_EQ(al_agent_new(&f.loop, &f.opts, &a), AL_ENOTSUP);
  ASSERT_NULL(a);
  al_test_need_bwrap();
  f.opts.sandbox_bwrap = NULL;
  fx_start(&f);
  fx_finish(&f);
  return 0;
}

/* ---- hygiene of the host ----------------------------------------------------- */

/* Run with the canary in its initial environment block. */
HELPER_IMPL(sandbox_harden_child) {
  char buf[65536];
  size_t n;
  FILE *f;
  struct rlimit rl;
  int fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */

  (void)argc;
  (void)argv;
  if (getenv("ANTHROPIC_API_KEY") == NULL || fd < 0) {
    return 10;
  }
  if (al_sandbox_harden_process() != 0) {
    return 11;
  }
  if (prctl(PR_GET_DUMPABLE) != 0) {
    return 16;
  }
  /* Not dumpable, /proc/self/environ belongs to root: a non-root process
   * cannot read even its own. Make it readable again to look at the bytes
   * the hardening left there. */
  if (prctl(PR_SET_DUMPABLE, 1) != 0) {
    return 19;
  }
  f = fopen("/proc/self/environ", "r");
  if (f == NULL) {
    return 12;
  }
  n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  if (memmem(buf, n, SBX_CANARY1, strlen(SBX_CANARY1)) != NULL ||
      memmem(buf, n, SBX_CANARY2, strlen(SBX_CANARY2)) != NULL) {
    return 13; /* the bytes are still there */
  }
  if (memmem(buf, n, "KEEP_ME=visible", 15) == NULL) {
    return 14; /* an ordinary variable must stay */
  }
  if (getenv("ANTHROPIC_API_KEY") != NULL ||
      strcmp(al_sandbox_getenv("ANTHROPIC_API_KEY"), SBX_CANARY1) != 0 ||
      strcmp(al_sandbox_getenv("MY_SECRET_TOKEN"), SBX_CANARY2) != 0) {
    return 15;
  }
  if (getrlimit(RLIMIT_CORE, &rl) != 0 || rl.rlim_cur != 0) {
    return 17;
  }
  if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
    return 18;
  }
  return 0;
}

TEST_IMPL(sandbox_harden_process_scrubs_and_closes) {
  char *const argv[] = {(char *)al_test_exe(), "--helper",
                        "sandbox_harden_child", NULL};
  char *const envp[] = {"ANTHROPIC_API_KEY=" SBX_CANARY1,
                        "MY_SECRET_TOKEN=" SBX_CANARY2, "KEEP_ME=visible",
                        "PATH=/usr/bin:/bin", NULL};
  pid_t pid = fork();
  int status;

  ASSERT(pid >= 0);
  if (pid == 0) {
    execve(argv[0], argv, envp);
    _exit(127);
  }
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  return 0;
}

/* ---- cancel -------------------------------------------------------------------- */

typedef struct {
  uv_timer_t t;
  sbx_t *x;
  const char *mark;
} cancel_t;

static void on_cancel_poll(uv_timer_t *t) {
  cancel_t *c = t->data;

  /* Cancel once the tool's processes surely run. */
  if (sbx_process_with(c->mark)) {
    uv_timer_stop(t);
    ASSERT_EQ(al__executor_abort_all(&c->x->ex,
                                     AL_EXECUTOR_ABORT_USER_INTERRUPTED),
              0);
  }
}

/* A cancelled tool leaves nothing behind, double-forked children
 * included (bwrap: the group kill and the PID namespace; degraded: the
 * helper's subreaper sweep). */
static void cancel_case(sbx_mode_t mode) {
  sbx_t x;
  cancel_t c;
  char mark[64];
  char in[512];

  snprintf(mark, sizeof(mark), "ALCANCEL%d", (int)getpid());
  sbx_init(&x, mode);
  c.x = &x;
  c.mark = mark;
  ASSERT_EQ(uv_timer_init(&x.loop, &c.t), 0);
  c.t.data = &c;
  ASSERT_EQ(uv_timer_start(&c.t, on_cancel_poll, 0, 2), 0);
  /* exec -a is bash's; sh runs bash for it. */
  snprintf(in, sizeof(in),
           "{\"command\": \"(setsid bash -c 'exec -a %s sleep 1000' &); bash "
           "-c 'exec -a %s sleep 1000'\"}",
           mark, mark);
  sbx_call(&x, "bash", in);
  ASSERT(x.is_error);
  ASSERT(sbx_wait_no_process(&x, mark));
  uv_close((uv_handle_t *)&c.t, NULL);
  sbx_finish(&x);
}

TEST_IMPL(sandbox_cancel_leaves_no_process) {
  al_test_need_bwrap();
  cancel_case(SBX_BWRAP);
  return 0;
}

TEST_IMPL(sandbox_cancel_leaves_no_process_degraded) {
  cancel_case(SBX_DEGRADED);
  return 0;
}

/* Degraded mode has no private /tmp: tools get a TMPDIR of their own
 * (writable, unlike the shared /tmp), removed with the sandbox. */
TEST_IMPL(sandbox_degraded_private_tmpdir) {
  sbx_t x;
  char dir[512];
  char *nl;
  struct stat st;

  sbx_init(&x, SBX_DEGRADED);
  sbx_call(&x, "bash",
           "{\"command\": \"echo $TMPDIR; echo kept > $TMPDIR/f && cat "
           "$TMPDIR/f; echo no > /tmp/al_shared_$$ || echo refused\"}");
  ASSERT_NOT_NULL(strstr(x.content, "/agentloop-tmp-"));
  ASSERT_NOT_NULL(strstr(x.content, "kept\n"));
  ASSERT_NOT_NULL(strstr(x.content, "refused"));
  snprintf(dir, sizeof(dir), "%s", x.content);
  nl = strchr(dir, '\n');
  ASSERT_NOT_NULL(nl);
  *nl = '\0';
  ASSERT_EQ(stat(dir, &st), 0);
  sbx_finish(&x);
  ASSERT(stat(dir, &st) != 0);
  return 0;
}

/* agentloop run from its own build tree inside the workspace: a tool must
 * not be able to replace agentloop-exec, or the next tool would start
 * without the inner layer (bwrap) or unconfined (degraded). bwrap mode
 * mounts it read-only and the file tools refuse it; degraded mode turns
 * itself off. */
TEST_IMPL(sandbox_helper_inside_root_is_protected) {
  static const char yaml[] =
      "responses:\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: b1, name: bash, input: {command: 'echo evil "
      "> bin/agentloop-exec; echo done'}}\n"
      "  - reply:\n"
      "      content:\n"
      "        - tool_use: {id: w1, name: write_file, input: {path: "
      "bin/agentloop-exec, content: evil}}\n"
      "  - reply: {content: [{text: 'done'}]}\n";
  fx_t f;
  char helper[400];
  char cmd[1000];
  const json_t *r;
  struct stat before;
  struct stat after;
  al_agent_t *a = NULL;

  al_test_need_bwrap();
  fx_init(&f, yaml);
  snprintf(helper, sizeof(helper), "%s/bin/agentloop-exec", f.workspace);
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s/bin' && cp '%s' '%s'",
           f.workspace, HELPER, helper);
  ASSERT_EQ(system(cmd), 0);
  ASSERT_EQ(stat(helper, &before), 0);
  f.opts.sandbox_helper = helper;
  f.opts.permission_mode = AL_PERMISSION_MODE_HEADLESS;
  fx_start(&f);
  fx_run(&f, "go");
  ASSERT_STR_EQ(fx_jstr(fx_event(&f, fx_find(&f, "run_started", NULL, 0)),
                        "sandbox"),
                "bwrap");
  r = fx_tool_result(&f, 1, "b1");
  ASSERT_NOT_NULL(strstr(fx_jstr(r, "content"), "Read-only file system"));
  r = fx_tool_result(&f, 2, "w1");
  ASSERT(json_is_true(json_object_get(r, "is_error")));
  ASSERT_EQ(stat(helper, &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_mtime, before.st_mtime);
  fx_finish(&f);

  /* Degraded mode would run it outside any sandbox: off. */
  fx_init(&f, NULL);
  snprintf(helper, sizeof(helper), "%s/agentloop-exec", f.workspace);
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", HELPER, helper);
  ASSERT_EQ(system(cmd), 0);
  f.opts.sandbox_helper = helper;
  f.opts.sandbox_bwrap = "/bin/false";
  f.opts.sandbox = AL_SANDBOX_REQUIRED;
  ASSERT_EQ(al_agent_new(&f.loop, &f.opts, &a), AL_ENOTSUP);
  f.opts.sandbox = AL_SANDBOX_AUTO;
  fx_start(&f);
  {
    char *text = NULL;
    json_t *o;

    ASSERT_EQ(al_agent_tools_json(f.agent, &text), 0);
    o = json_loads(text, 0, NULL);
    al_free(text);
    ASSERT_STR_EQ(json_string_value(json_object_get(
                      json_object_get(o, "sandbox"), "mode")),
                  "none");
    ASSERT_NOT_NULL(strstr(json_string_value(json_object_get(
                               json_object_get(o, "sandbox"), "detail")),
                           "lies inside a writable root"));
    json_decref(o);
  }
  fx_finish(&f);
  return 0;
}
