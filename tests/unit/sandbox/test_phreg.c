/* The placeholder registry (src/sandbox/phreg.c) on its own: a release
 * removes what a placeholder is on disk (an empty directory, an empty
 * file) and nothing a user put there, and forgets the entry once no live
 * noter is left; an entry names its path, so a non-empty one is the
 * user's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/phreg.h"
#include "test.h"

static void make_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");

  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

static bool there(const char *path) {
  struct stat st;

  return lstat(path, &st) == 0;
}

TEST_IMPL(phreg_release_removes_only_placeholders) {
  char dir[] = "/var/tmp/al_phreg_XXXXXX";
  char reg[300], p[300], me[64], cmd[400];
  struct {
    const char *name;
    bool is_dir;
    const char *content; /* a file inside for a directory */
    bool removed;
  } cases[] = {
      {"empty_dir", true, NULL, true},   {"full_dir", true, "x", false},
      {"empty_file", false, "", true},   {"full_file", false, "x", false},
  };
  size_t i;

  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(reg, sizeof(reg), "%s/registry", dir);
  snprintf(me, sizeof(me), "%ld 1", (long)getpid());
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, cases[i].name);
    if (cases[i].is_dir) {
      char in[400];

      ASSERT_EQ(mkdir(p, 0755), 0);
      if (cases[i].content != NULL) {
        snprintf(in, sizeof(in), "%s/f", p);
        make_file(in, cases[i].content);
      }
    } else {
      make_file(p, cases[i].content);
    }
    ASSERT_EQ(al_phreg_note(reg, p, me), 0);
    ASSERT(al_phreg_known(reg, p));
    /* Ours alone: nothing else can have it mounted. */
    ASSERT(al_phreg_release(reg, p, me));
    if (there(p) == cases[i].removed) {
      AL_TEST_FAIL("%s: %s", cases[i].name,
                   cases[i].removed ? "left" : "removed");
    }
    /* A noter stays one for its life: we live, so the entry stays, and
     * a release with no noter given (the janitor's) leaves it to us. */
    ASSERT(al_phreg_known(reg, p));
    ASSERT(!al_phreg_release(reg, p, NULL));
    ASSERT_EQ(there(p), !cases[i].removed);
  }
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  return 0;
}

/* The entry goes with its last live noter: a noter that has exited is
 * taken off by a release with none given (the janitor's, the sweep's). */
TEST_IMPL(phreg_entry_goes_with_last_noter) {
  char dir[] = "/var/tmp/al_phreg_XXXXXX";
  char reg[300], p[300], gone[64];
  pid_t dead = fork();

  ASSERT(dead >= 0);
  if (dead == 0) {
    _exit(0);
  }
  ASSERT_EQ(waitpid(dead, NULL, 0), dead);
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(reg, sizeof(reg), "%s/registry", dir);
  snprintf(p, sizeof(p), "%s/.git", dir);
  snprintf(gone, sizeof(gone), "%ld 1", (long)dead);
  ASSERT_EQ(al_phreg_note(reg, p, gone), 0);
  ASSERT(al_phreg_known(reg, p));
  al_phreg_sweep(reg); /* the placeholder itself was never made */
  ASSERT(!al_phreg_known(reg, p));
  ASSERT_EQ(rmdir(reg), 0);
  ASSERT_EQ(rmdir(dir), 0);
  return 0;
}

/* A release with no noter given (the janitor's, a sweep's) leaves a
 * placeholder a live agent noted: that agent may be between bwrap's mkdir
 * and its mount, where no mount table shows it yet (seen as a failed
 * bash call in the suite, a sweep of another test's janitor having
 * removed the mount point). Once only dead noters are left, it goes. */
TEST_IMPL(phreg_sweep_leaves_live_noters_placeholder) {
  char dir[] = "/var/tmp/al_phreg_XXXXXX";
  char reg[300], p[300], me[64], gone[64];
  pid_t dead = fork();

  ASSERT(dead >= 0);
  if (dead == 0) {
    _exit(0);
  }
  ASSERT_EQ(waitpid(dead, NULL, 0), dead);
  ASSERT_NOT_NULL(mkdtemp(dir));
  snprintf(reg, sizeof(reg), "%s/registry", dir);
  snprintf(p, sizeof(p), "%s/tools.d", dir);
  snprintf(me, sizeof(me), "%ld 7", (long)getpid());
  snprintf(gone, sizeof(gone), "%ld 1", (long)dead);
  ASSERT_EQ(mkdir(p, 0755), 0); /* made, not mounted yet */
  ASSERT_EQ(al_phreg_note(reg, p, gone), 0);
  ASSERT_EQ(al_phreg_note(reg, p, me), 0);
  al_phreg_sweep(reg);
  ASSERT(there(p));
  ASSERT(!al_phreg_release(reg, p, NULL));
  ASSERT(there(p));
  /* Its own release (alone now but for the dead one) removes it. */
  ASSERT(al_phreg_release(reg, p, me));
  ASSERT(!there(p));
  al_phreg_sweep(reg); /* our line stays while we live */
  ASSERT(al_phreg_known(reg, p));
  snprintf(p, sizeof(p), "rm -rf '%s'", dir);
  ASSERT_EQ(system(p), 0);
  return 0;
}
