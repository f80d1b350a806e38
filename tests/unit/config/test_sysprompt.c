/* The system prompt (src/config/sysprompt.c): the base prompt's facts,
 * the instruction files in order (user, then repository root down to the
 * workspace, AGENTS.md before CLAUDE.md), no file above the repository,
 * the configured text and --system last, and the size cap with its
 * notice. */
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config/config.h"
#include "config/sysprompt.h"
#include "test.h"

static int rm_cb(const char *p, const struct stat *s, int f, struct FTW *w) {
  (void)s;
  (void)f;
  (void)w;
  return remove(p);
}

static void put(const char *root, const char *rel, const char *text) {
  char p[512];
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", root, rel);
  f = fopen(p, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

static void dir(const char *root, const char *rel) {
  char p[512];

  snprintf(p, sizeof(p), "%s/%s", root, rel);
  ASSERT_EQ(mkdir(p, 0700), 0);
}

static const char *at(const char *hay, const char *needle) {
  const char *p = strstr(hay, needle);

  if (p == NULL) {
    AL_TEST_FAIL("'%s' not in the prompt:\n%s", needle, hay);
  }
  return p;
}

TEST_IMPL(sysprompt_order_and_bounds) {
  char root[] = "/tmp/al_sysp_XXXXXX";
  char ws[300], cfgdir[300];
  al_sysprompt_options_t o;
  al_config_t cfg;
  al_buf_t out, notes;
  json_t *src = NULL;
  const char *p;

  ASSERT_NOT_NULL(mkdtemp(root));
  /* above/ has an AGENTS.md that must not be read: the repository
   * starts at above/repo. */
  dir(root, "above");
  put(root, "above/AGENTS.md", "OUTSIDE-THE-REPO\n");
  dir(root, "above/repo");
  dir(root, "above/repo/.git");
  put(root, "above/repo/AGENTS.md", "ROOT-AGENTS\n");
  put(root, "above/repo/CLAUDE.md", "ROOT-CLAUDE\n");
  dir(root, "above/repo/pkg");
  dir(root, "above/repo/pkg/ws");
  put(root, "above/repo/pkg/ws/CLAUDE.md", "WS-CLAUDE");
  dir(root, "cfg");
  put(root, "cfg/AGENTS.md", "USER-AGENTS\n");
  put(root, "above/repo/pkg/ws/style.md", "CONFIGURED-FILE\n");
  snprintf(ws, sizeof(ws), "%s/above/repo/pkg/ws", root);
  snprintf(cfgdir, sizeof(cfgdir), "%s/cfg", root);

  al_config_init(&cfg);
  ASSERT_EQ(al_config_load_string(&cfg, AL_CFG_PROJECT, "p.yaml",
                                  "system_prompt: {file: style.md, append: "
                                  "CONFIGURED-APPEND}\n",
                                  strlen("system_prompt: {file: style.md, "
                                         "append: CONFIGURED-APPEND}\n")),
            0);
  ASSERT_EQ(cfg.n_errors, 0);
  memset(&o, 0, sizeof(o));
  o.workspace = ws;
  o.sandbox = "bwrap: test";
  o.config_dir = cfgdir;
  o.cfg = &cfg;
  o.extra = "FLAG-TEXT";
  o.now = 86400 * 365; /* 1971-01-01 */
  al_buf_init(&out, 1 << 20);
  al_buf_init(&notes, 1 << 16);
  ASSERT_EQ(al_sysprompt_build(&o, &out, &src, &notes), 0);
  p = at(out.data, "- Working directory: ");
  at(p, ws);
  at(out.data, "- Date: 1971-01-01\n");
  at(out.data, "- Sandbox: bwrap: test\n");
  at(out.data, "- Platform: ");
  ASSERT_NULL(strstr(out.data, "OUTSIDE-THE-REPO"));
  /* In order, each after the one before. */
  p = at(out.data, "USER-AGENTS");
  p = at(p, "ROOT-AGENTS");
  p = at(p, "ROOT-CLAUDE");
  p = at(p, "WS-CLAUDE\n");
  p = at(p, "CONFIGURED-FILE");
  p = at(p, "CONFIGURED-APPEND");
  p = at(p, "FLAG-TEXT\n");
  ASSERT_EQ(json_array_size(src), 5);
  ASSERT_NULL(notes.data);
  json_decref(src);
  al_buf_free(&out);

  /* A cap the files do not fit in: cut, said in the prompt and in the
   * notices; the flag text is never cut. */
  o.cap = 16;
  src = NULL;
  al_buf_init(&out, 1 << 20);
  ASSERT_EQ(al_sysprompt_build(&o, &out, &src, &notes), 0);
  at(out.data, "USER-AGENTS\n");
  at(out.data, "\n\nROOT\n[... 8 more bytes");
  ASSERT_NULL(strstr(out.data, "WS-CLAUDE"));
  at(out.data, "more bytes of this file left out");
  ASSERT_NOT_NULL(notes.data);
  at(notes.data, "AGENTS.md cut to 4 of 12 bytes");
  at(out.data, "FLAG-TEXT");
  json_decref(src);
  al_buf_free(&out);
  al_buf_free(&notes);

  /* Without a repository, only the workspace's own files. */
  {
    char lone[300];

    dir(root, "lone");
    put(root, "lone/AGENTS.md", "LONE\n");
    snprintf(lone, sizeof(lone), "%s/lone", root);
    memset(&o, 0, sizeof(o));
    o.workspace = lone;
    o.config_dir = "/nonexistent";
    al_buf_init(&out, 1 << 20);
    ASSERT_EQ(al_sysprompt_build(&o, &out, NULL, NULL), 0);
    at(out.data, "LONE");
    at(out.data, "- Sandbox: unknown");
    ASSERT_NULL(strstr(out.data, "OUTSIDE-THE-REPO"));
    al_buf_free(&out);
  }
  al_config_free(&cfg);
  nftw(root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
