/* agentloop-exec runs the bash tool's `/bin/sh -c CMD` itself when CMD
 * is one simple command of plain words (src/exec/main.c, exec_command):
 * what the command sees and what the tool reports must be what dash would
 * have given. Each command here runs both ways (AGENTLOOP_SH_DIRECT=0 is
 * through dash) and stdout, stderr and the exit status must match. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/common.h"
#include "test.h"

typedef struct {
  char out[8192];
  char err[8192];
  int status;
  pid_t pid;
} shrun_t;

static void slurp(const char *path, char *buf, size_t len) {
  size_t n = 0;
  FILE *f = fopen(path, "r");

  ASSERT_NOT_NULL(f);
  n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* agentloop-exec -- /bin/sh -c cmd in dir, with env (NULL-terminated). */
static void sh_run(const char *dir, const char *cmd, char **env, bool direct,
                   shrun_t *r) {
  char exe[4096], o[600], e[600];
  char *argv[] = {exe, "--", "/bin/sh", "-c", (char *)cmd, NULL};
  char *envp[16];
  size_t i, n = 0;
  posix_spawn_file_actions_t fa;

  snprintf(exe, sizeof(exe), "%s/agentloop-exec", AL_BINARY_DIR);
  snprintf(o, sizeof(o), "%s/.out", dir);
  snprintf(e, sizeof(e), "%s/.err", dir);
  for (i = 0; env[i] != NULL && n < 14; i++) {
    envp[n++] = env[i];
  }
  if (!direct) {
    envp[n++] = "AGENTLOOP_SH_DIRECT=0";
  }
  envp[n] = NULL;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addchdir_np(&fa, dir);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, o, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&fa, 2, e, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  ASSERT_EQ(posix_spawn(&r->pid, exe, &fa, NULL, argv, envp), 0);
  posix_spawn_file_actions_destroy(&fa);
  ASSERT_EQ(waitpid(r->pid, &r->status, 0), r->pid);
  slurp(o, r->out, sizeof(r->out));
  slurp(e, r->err, sizeof(r->err));
  ASSERT_EQ(unlink(o), 0);
  ASSERT_EQ(unlink(e), 0);
}

static void put(const char *dir, const char *name, const char *text,
                mode_t mode) {
  char p[600];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", dir, name);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
  ASSERT_EQ(chmod(p, mode), 0);
}

TEST_IMPL(sh_direct_matches_dash) {
  static const char *const cmds[] = {
      /* run here directly */
      "ls", "ls -1 -a .", "cat f1 f2", "cat missing", "wc -c f1",
      "  wc   -l\tf1  ", "grep -c x f1", "expr 1 + 2", "ls nonexist",
      "nonexist_cmd_zz a b", "./nonexist", "./adir", "./noexec",
      "./noshebang arg", "zzcmd", "printenv PWD", "printenv PATH",
      "/bin/pwd", "sleep 0", "tr a-z A-Z", "sub/tool --opt=1 a,b x@y:z%",
      "head -c 3 f1",
      /* dash's own: builtins, keywords, assignments, syntax */
      "echo hi", "pwd", "true", "false", "A=1 printenv A", "ls | wc -l",
      "cat f1; cat f2", "echo $HOME", "echo 'a  b'", "ls *", "cd sub",
      "kill -0 1", "test -e f1", "exit 3", "", "   ", "# comment",
      ". ./noshebang", ": anything", "command -v ls", "type ls",
      "~/x", "ls > /dev/null", NULL};
  char dir[] = "/var/tmp/al_shdirect_XXXXXX";
  char p[600], link[600];
  char path_env[700], pwd_env[700];
  char *env[6];
  size_t i, k;

  /* 272 runs of the helper, one after another: about 1 s idle, over 5 s
   * on a loaded 2-core machine (issue 22) and 14.5 s at worst in 10 runs
   * at load 15 with two spinning shells beside; each run is needed. */
  al_test_timeout_s(45);
  ASSERT_NOT_NULL(mkdtemp(dir));
  put(dir, "f1", "xyz\nabc\n", 0644);
  put(dir, "f2", "two\n", 0644);
  put(dir, "noexec", "true\n", 0644);
  put(dir, "noshebang", "echo script \"$1\"\n", 0755);
  snprintf(p, sizeof(p), "%s/adir", dir);
  ASSERT_EQ(mkdir(p, 0755), 0);
  snprintf(p, sizeof(p), "%s/sub", dir);
  ASSERT_EQ(mkdir(p, 0755), 0);
  put(p, "tool", "#!/bin/sh\necho tool \"$@\"\n", 0755);
  snprintf(p, sizeof(p), "%s/bin", dir);
  ASSERT_EQ(mkdir(p, 0755), 0);
  put(p, "zzcmd", "#!/bin/sh\necho zz\n", 0644); /* on PATH, not runnable */
  snprintf(path_env, sizeof(path_env), "PATH=%s/bin:/usr/bin:/bin", dir);
  snprintf(link, sizeof(link), "%s/link", dir);
  ASSERT_EQ(symlink(dir, link), 0);

  /* Three environments for PWD: none, a wrong one, a logical one (a
   * symlink to the directory, which dash keeps). */
  for (k = 0; k < 3; k++) {
    env[0] = path_env;
    env[1] = "HOME=/nonexistent";
    env[2] = "LC_ALL=C";
    env[3] = NULL;
    if (k == 1) {
      env[3] = "PWD=/tmp";
    } else if (k == 2) {
      snprintf(pwd_env, sizeof(pwd_env), "PWD=%s", link);
      env[3] = pwd_env;
    }
    env[4] = NULL;
    for (i = 0; cmds[i] != NULL; i++) {
      shrun_t a, b;

      sh_run(dir, cmds[i], env, true, &a);
      sh_run(dir, cmds[i], env, false, &b);
      if (strcmp(a.out, b.out) != 0 || strcmp(a.err, b.err) != 0 ||
          a.status != b.status) {
        AL_TEST_FAIL("[%s] env %zu differs:\n direct: %#x out [%s] err [%s]\n"
                     " dash:   %#x out [%s] err [%s]",
                     cmds[i], k, a.status, a.out, a.err, b.status, b.out,
                     b.err);
      }
    }
  }
  /* And the direct way was taken: the command is the helper's process
   * itself (its parent is us), not a child of dash. */
  {
    shrun_t a;
    long ppid = 0;
    const char *close_paren;

    env[3] = NULL;
    sh_run(dir, "cat /proc/self/stat", env, true, &a);
    close_paren = strrchr(a.out, ')');
    ASSERT_NOT_NULL(close_paren);
    ASSERT_EQ(sscanf(close_paren + 2, "%*c %ld", &ppid), 1);
    ASSERT_EQ(ppid, (long)getpid());
    ASSERT_EQ(atol(a.out), (long)a.pid);
    sh_run(dir, "cat /proc/self/stat", env, false, &a);
    ASSERT(atol(a.out) != (long)a.pid); /* through dash: its child */
  }
  snprintf(p, sizeof(p), "rm -rf '%s'", dir);
  ASSERT_EQ(system(p), 0);
  return 0;
}
