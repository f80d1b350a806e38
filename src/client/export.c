/* agentloop export (client/export.h, docs/export.md). The transcript is
 * read, never written: al__tx_load checks its hash chain, and the records
 * it skipped (edited, forged, torn) are left out of the export too, which
 * says so. Every message string is redacted before it is rendered. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/export.h"
#include "session/session.h"

#define REDACTED "[REDACTED]"
/* Sub-agents nest at most this deep in one export (a loop of links in a
 * hand-made file must end). */
#define EXPORT_DEPTH_MAX 8

static bool token_ch(char ch) {
  return isalnum((unsigned char)ch) || ch == '-' || ch == '_';
}

/* A case-insensitive prefix match of lit at s[i..n). */
static bool at_ci(const char *s, size_t n, size_t i, const char *lit) {
  size_t l = strlen(lit);

  return n - i >= l && strncasecmp(s + i, lit, l) == 0;
}

int al__export_redact(al_buf_t *b, const char *s, size_t n,
                      const char *const *keys, size_t nkeys) {
  size_t i = 0;
  size_t from = 0; /* s[from..i) not yet copied */
  static const char *const headers[] = {
      "authorization:", "x-api-key:", "api-key:"};

#define FLUSH()                                                  \
  do {                                                           \
    if (i > from && al_buf_append(b, s + from, i - from) != 0) { \
      return AL_ENOMEM;                                          \
    }                                                            \
  } while (0)
  while (i < n) {
    size_t k;
    size_t e;
    bool hit = false;

    /* The configured keys, whatever they look like (short ones would
     * redact ordinary words: 8 bytes at least). */
    for (k = 0; k < nkeys && !hit; k++) {
      size_t kl = keys[k] != NULL ? strlen(keys[k]) : 0;

      if (kl >= 8 && n - i >= kl && memcmp(s + i, keys[k], kl) == 0) {
        FLUSH();
        if (al_buf_append_str(b, REDACTED) != 0) {
          return AL_ENOMEM;
        }
        i += kl;
        from = i;
        hit = true;
      }
    }
    if (hit) {
      continue;
    }
    /* sk-... (OpenAI, sk-ant-... Anthropic): the whole token. */
    if (s[i] == 's' && n - i > 3 && memcmp(s + i, "sk-", 3) == 0 &&
        (i == 0 || !token_ch(s[i - 1]))) {
      for (e = i + 3; e < n && token_ch(s[e]); e++) {
      }
      if (e - i >= 3 + 16) {
        FLUSH();
        if (al_buf_append_str(b, REDACTED) != 0) {
          return AL_ENOMEM;
        }
        i = e;
        from = i;
        continue;
      }
    }
    /* A header's value, to the end of its line or its quote. */
    for (k = 0; k < AL_ARRAY_SIZE(headers) && !hit; k++) {
      /* Proxy-Authorization: too ('-' before the name). */
      if ((i == 0 || !isalnum((unsigned char)s[i - 1])) &&
          at_ci(s, n, i, headers[k])) {
        i += strlen(headers[k]);
        while (i < n && (s[i] == ' ' || s[i] == '\t')) {
          i++;
        }
        FLUSH();
        for (e = i; e < n && s[e] != '\n' && s[e] != '\r' && s[e] != '"' &&
                    s[e] != '\'';
             e++) {
        }
        if (e > i && al_buf_append_str(b, REDACTED) != 0) {
          return AL_ENOMEM;
        }
        i = e;
        from = i;
        hit = true;
      }
    }
    if (hit) {
      continue;
    }
    /* A bearer token anywhere (a URL's, a config file's). */
    if ((i == 0 || !token_ch(s[i - 1])) && at_ci(s, n, i, "bearer ")) {
      i += 7;
      while (i < n && s[i] == ' ') {
        i++;
      }
      for (e = i; e < n && !isspace((unsigned char)s[e]) && s[e] != '"' &&
                  s[e] != '\'';
           e++) {
      }
      if (e > i) {
        FLUSH();
        if (al_buf_append_str(b, REDACTED) != 0) {
          return AL_ENOMEM;
        }
        i = e;
        from = i;
      }
      continue;
    }
    i++;
  }
  FLUSH();
#undef FLUSH
  return 0;
}

/* Every string of j (values, not keys) redacted in place. */
static int redact_json(json_t *j, const al_export_opts_t *o) {
  size_t i;
  const char *key;
  json_t *v;

  if (json_is_string(j)) {
    al_buf_t b;
    int rc;

    al_buf_init(&b, SIZE_MAX / 2);
    rc = al__export_redact(&b, json_string_value(j), json_string_length(j),
                           o->keys, o->nkeys);
    if (rc == 0 && b.len != json_string_length(j)) {
      rc = json_string_setn(j, b.data != NULL ? b.data : "", b.len) == 0
               ? 0
               : AL_ENOMEM;
    } else if (rc == 0 && b.len > 0 &&
               memcmp(b.data, json_string_value(j), b.len) != 0) {
      rc = json_string_setn(j, b.data, b.len) == 0 ? 0 : AL_ENOMEM;
    }
    al_buf_free(&b);
    return rc;
  }
  if (json_is_array(j)) {
    json_array_foreach(j, i, v) {
      if (redact_json(v, o) != 0) {
        return AL_ENOMEM;
      }
    }
  } else if (json_is_object(j)) {
    json_object_foreach(j, key, v) {
      if (redact_json(v, o) != 0) {
        return AL_ENOMEM;
      }
    }
  }
  return 0;
}

/* ---- Markdown ---------------------------------------------------------------
 */

/* A code fence longer than any run of backticks in s. */
static void put_fenced(FILE *out, const char *info, const char *s, size_t n) {
  size_t run = 0;
  size_t best = 0;
  size_t i;

  for (i = 0; i < n; i++) {
    run = s[i] == '`' ? run + 1 : 0;
    best = AL_MAX(best, run);
  }
  best = AL_MAX(best + 1, (size_t)3);
  for (i = 0; i < best; i++) {
    fputc('`', out);
  }
  fprintf(out, "%s\n", info);
  fwrite(s, 1, n, out);
  if (n == 0 || s[n - 1] != '\n') {
    fputc('\n', out);
  }
  for (i = 0; i < best; i++) {
    fputc('`', out);
  }
  fputs("\n\n", out);
}

/* A tool result's text, cut past max on a character boundary. */
static void put_result_text(FILE *out, const char *s, size_t n, size_t max) {
  size_t keep = n;
  char marker[96];

  if (n <= max) {
    put_fenced(out, "", s, n);
    return;
  }
  keep = max;
  while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) {
    keep--;
  }
  put_fenced(out, "", s, keep);
  snprintf(marker, sizeof(marker),
           "*[... %zu more bytes of this result cut by export]*\n\n", n - keep);
  fputs(marker, out);
}

static void put_result(FILE *out, const json_t *blk, size_t max) {
  const json_t *c = json_object_get(blk, "content");
  const char *id = json_string_value(json_object_get(blk, "tool_use_id"));
  size_t i;
  const json_t *x;

  fprintf(out, "**Result** of `%s`%s:\n\n", id != NULL ? id : "?",
          json_is_true(json_object_get(blk, "is_error")) ? " (error)" : "");
  if (json_is_string(c)) {
    put_result_text(out, json_string_value(c), json_string_length(c), max);
    return;
  }
  json_array_foreach(c, i, x) {
    const json_t *t = json_object_get(x, "text");

    if (json_is_string(t)) {
      put_result_text(out, json_string_value(t), json_string_length(t), max);
    } else {
      fprintf(out, "*[%s block]*\n\n",
              json_string_value(json_object_get(x, "type")) != NULL
                  ? json_string_value(json_object_get(x, "type"))
                  : "non-text");
    }
  }
}

static void put_message(FILE *out, const char *kind, const json_t *m, int depth,
                        size_t max) {
  const json_t *c = json_object_get(m, "content");
  const char *role = json_string_value(json_object_get(m, "role"));
  size_t i;
  const json_t *blk;
  bool assistant = role != NULL && strcmp(role, "assistant") == 0;

  (void)kind;
  if (json_is_string(c)) {
    fprintf(out, "%.*s %s\n\n%s\n\n", depth + 2, "########",
            assistant ? "Assistant" : "User", json_string_value(c));
    return;
  }
  json_array_foreach(c, i, blk) {
    const char *type = json_string_value(json_object_get(blk, "type"));

    if (type == NULL) {
      continue;
    }
    if (strcmp(type, "text") == 0) {
      fprintf(out, "%.*s %s\n\n%s\n\n", depth + 2, "########",
              assistant ? "Assistant" : "User",
              json_is_string(json_object_get(blk, "text"))
                  ? json_string_value(json_object_get(blk, "text"))
                  : "");
    } else if (strcmp(type, "tool_use") == 0) {
      char *in = json_dumps(json_object_get(blk, "input"),
                            JSON_INDENT(2) | JSON_ENSURE_ASCII);
      const char *name = json_string_value(json_object_get(blk, "name"));
      const char *id = json_string_value(json_object_get(blk, "id"));

      fprintf(out, "**Tool call** `%s` (`%s`):\n\n", name != NULL ? name : "?",
              id != NULL ? id : "?");
      put_fenced(out, "json", in != NULL ? in : "{}",
                 in != NULL ? strlen(in) : 2);
      al_free(in);
    } else if (strcmp(type, "tool_result") == 0) {
      put_result(out, blk, max);
    }
    /* Thinking blocks are the model's scratch work: not exported. */
  }
}

/* ---- the walk
 * ----------------------------------------------------------------- */

static bool skipped_line(const json_t *skipped, size_t lineno) {
  size_t i;
  const json_t *x;

  json_array_foreach(skipped, i, x) {
    if ((size_t)json_integer_value(json_object_get(x, "line")) == lineno) {
      return true;
    }
  }
  return false;
}

static int export_one(const char *dir, const char *id,
                      const al_export_opts_t *o, FILE *out, int depth,
                      bool *broken, char *why, size_t why_len);

static void put_line(FILE *out, const char *id, const char *kind, json_t *m) {
  json_t *line =
      json_pack("{s:s, s:s, s:O}", "session", id, "kind", kind, "message", m);
  char *s = line != NULL ? json_dumps(line, JSON_COMPACT) : NULL;

  if (s != NULL) {
    fprintf(out, "%s\n", s);
  }
  al_free(s);
  json_decref(line);
}

static int export_records(const char *dir, const char *id, const char *p,
                          size_t n, const al_tx_loaded_t *l,
                          const al_export_opts_t *o, FILE *out, int depth,
                          bool *broken, char *why, size_t why_len) {
  size_t max = o->result_max != 0 ? o->result_max : AL_EXPORT_RESULT_MAX;
  const char *line = p;
  size_t lineno = 0;
  bool header = false;
  size_t stop = SIZE_MAX;

  /* The loader names its first 64 skipped lines: past the last of them,
   * when it skipped more, no line is known to verify. */
  if (l->bad_lines > json_array_size(l->skipped)) {
    stop = (size_t)json_integer_value(json_object_get(
        json_array_get(l->skipped, json_array_size(l->skipped) - 1), "line"));
  }

  while (line < p + n) {
    const char *e = memchr(line, '\n', (size_t)(p + n - line));
    json_t *rec;
    const char *kind;
    json_t *m;

    if (e == NULL) {
      break; /* a torn tail: the loader cut it too */
    }
    if (++lineno >= stop) {
      if (o->md) {
        fputs(
            "*[the rest of this transcript is left out: too many records "
            "fail its chain]*\n\n",
            out);
      }
      break;
    }
    rec = skipped_line(l->skipped, lineno)
              ? NULL
              : json_loadb(line, (size_t)(e - line), 0, NULL);
    line = e + 1;
    kind = json_string_value(json_object_get(rec, "rec"));
    if (kind == NULL) {
      json_decref(rec);
      continue; /* events, and what the loader skipped */
    }
    m = json_object_get(rec, "message");
    if (m != NULL && redact_json(m, o) != 0) {
      json_decref(rec);
      return AL_ENOMEM;
    }
    if (strcmp(kind, "session") == 0 && !header && o->md) {
      json_t *cwd = json_object_get(rec, "cwd");
      json_t *model = json_object_get(rec, "model");

      header = true;
      fprintf(out, "%.*s Session %s\n\n", depth + 1, "########", id);
      if (json_is_string(cwd)) {
        fprintf(out, "- directory: `%s`\n", json_string_value(cwd));
      }
      if (json_is_string(model)) {
        fprintf(out, "- model: `%s`\n", json_string_value(model));
      }
      fputc('\n', out);
    } else if (strcmp(kind, "title") == 0 && o->md) {
      const json_t *title = json_object_get(rec, "title");

      fprintf(out, "*Titled: %s*\n\n",
              json_is_string(title) ? json_string_value(title) : "");
    } else if ((strcmp(kind, "user") == 0 || strcmp(kind, "assistant") == 0 ||
                strcmp(kind, "tool_results") == 0 ||
                strcmp(kind, "compaction") == 0) &&
               json_is_object(m)) {
      if (!o->md) {
        put_line(out, id, kind, m);
      } else if (strcmp(kind, "compaction") == 0) {
        fputs(
            "*[the history was compacted here: what the model saw from "
            "here on (the summary, and the messages it kept, repeated) "
            "follows]*\n\n",
            out);
        {
          size_t k;
          const json_t *x;

          /* The history from here on: the first input with the summary,
           * and the tail it kept (already above: repeated, so that the
           * summary is read in its place). */
          json_array_foreach(json_object_get(m, "messages"), k, x) {
            put_message(out, kind, x, depth, max);
          }
        }
      } else {
        put_message(out, kind, m, depth, max);
      }
    } else if (strcmp(kind, "child") == 0 && depth < EXPORT_DEPTH_MAX) {
      const char *child = json_string_value(json_object_get(rec, "transcript"));
      const char *agent = json_string_value(json_object_get(rec, "agent"));
      const char *call = json_string_value(json_object_get(rec, "parent_call"));

      if (child != NULL && al__session_id_valid(child)) {
        if (o->md) {
          fprintf(out, "%.*s Sub-agent %s (%s, from call `%s`)\n\n", depth + 2,
                  "########", child, agent != NULL ? agent : "?",
                  call != NULL ? call : "?");
        }
        if (export_one(dir, child, o, out, depth + 1, broken, why, why_len) !=
                0 &&
            o->md) {
          fprintf(out, "*[its transcript cannot be read: %s]*\n\n", why);
        }
      }
    }
    json_decref(rec);
  }
  return 0;
}

static int export_one(const char *dir, const char *id,
                      const al_export_opts_t *o, FILE *out, int depth,
                      bool *broken, char *why, size_t why_len) {
  char path[4096];
  al_tx_loaded_t l;
  char *buf = NULL;
  int rc;
  int fd;
  struct stat st;

  if (!al__session_id_valid(id) || snprintf(path, sizeof(path), "%s/%s.jsonl",
                                            dir, id) >= (int)sizeof(path)) {
    snprintf(why, why_len, "%s is no session id", id);
    return AL_EINVAL;
  }
  rc = al__tx_load(path, false, 0, &l);
  if (rc != 0) {
    snprintf(why, why_len, "%s: %s", path, strerror(-rc));
    al__tx_loaded_free(&l);
    return rc;
  }
  if (l.chain_breaks > 0 || l.bad_lines > 0) {
    *broken = true;
    fprintf(stderr,
            "agentloop export: %s: the transcript's hash chain is broken: "
            "%zu record(s) fail it (edited, forged or copied), %zu line(s) "
            "skipped in all; they are left out of the export\n",
            id, l.chain_breaks, l.bad_lines);
    if (o->md) {
      fprintf(out,
              "> **Warning:** the transcript's hash chain is broken "
              "(%zu record(s) fail it); those records are left out.\n\n",
              l.chain_breaks);
    }
  }
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 || fstat(fd, &st) != 0 ||
      (buf = al_malloc((size_t)st.st_size + 1)) == NULL) {
    rc = fd < 0 ? -errno : AL_ENOMEM;
  } else {
    size_t got = 0;

    while (got < (size_t)st.st_size) {
      ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

      if (r <= 0) {
        break;
      }
      got += (size_t)r;
    }
    rc = export_records(dir, id, buf, got, &l, o, out, depth, broken, why,
                        why_len);
  }
  if (fd >= 0) {
    close(fd);
  }
  if (rc != 0 && why[0] == '\0') {
    snprintf(why, why_len, "%s: %s", path, strerror(-rc));
  }
  al_free(buf);
  al__tx_loaded_free(&l);
  return rc;
}

int al__export_session(const char *dir, const char *id,
                       const al_export_opts_t *o, FILE *out, bool *broken,
                       char *why, size_t why_len) {
  *broken = false;
  why[0] = '\0';
  return export_one(dir, id, o, out, 0, broken, why, why_len);
}

/* ---- naming a session without the daemon
 * -------------------------------------- */

#define SCAN_BYTES (64 * 1024)

/* The title of the transcript at path: the last title record in its first
 * or last SCAN_BYTES (as agentloopd's listing finds it). */
static char *file_title(const char *path, off_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  char *buf = al_malloc(SCAN_BYTES);
  char *title = NULL;
  ssize_t r;

  if (fd >= 0 && buf != NULL) {
    r = pread(fd, buf, SCAN_BYTES, 0);
    if (r > 0) {
      title = al__tx_scan_title(buf, (size_t)r);
    }
    if (size > SCAN_BYTES &&
        (r = pread(fd, buf, SCAN_BYTES, size - SCAN_BYTES)) > 0) {
      /* From its first whole line (it may overlap the head). */
      const char *nl = memchr(buf, '\n', (size_t)r);
      char *t = nl != NULL
                    ? al__tx_scan_title(nl + 1, (size_t)(buf + r - nl - 1))
                    : NULL;

      if (t != NULL) {
        al_free(title);
        title = t;
      }
    }
  }
  if (fd >= 0) {
    close(fd);
  }
  al_free(buf);
  return title;
}

al_pick_t al__export_find(const char *dir, const char *arg, char *out,
                          size_t out_len, char *why, size_t why_len) {
  DIR *d = opendir(dir);
  struct dirent *de;
  json_t *list = json_array();
  al_pick_t pick;

  if (d == NULL || list == NULL) {
    if (d != NULL) {
      closedir(d);
    }
    json_decref(list);
    snprintf(why, why_len, "cannot read %s", dir);
    return AL_PICK_NONE;
  }
  while ((de = readdir(d)) != NULL) {
    size_t nl = strlen(de->d_name);
    char id[64];
    char path[4096];
    struct stat st;
    char *title;
    json_t *s;
    size_t i;

    if (nl <= 6 || nl - 6 >= sizeof(id) ||
        strcmp(de->d_name + nl - 6, ".jsonl") != 0) {
      continue;
    }
    memcpy(id, de->d_name, nl - 6);
    id[nl - 6] = '\0';
    if (!al__session_id_valid(id) ||
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
            (int)sizeof(path) ||
        stat(path, &st) != 0) {
      continue;
    }
    title = file_title(path, st.st_size);
    s = json_pack("{s:s, s:s?, s:b, s:I}", "session", id, "title", title,
                  "named", title != NULL, "updated_ms",
                  (json_int_t)st.st_mtime * 1000);
    al_free(title);
    /* Newest first, as session/list. */
    for (i = 0; s != NULL && i < json_array_size(list); i++) {
      if (json_integer_value(
              json_object_get(json_array_get(list, i), "updated_ms")) <
          (json_int_t)st.st_mtime * 1000) {
        break;
      }
    }
    if (s != NULL) {
      json_array_insert_new(list, i, s);
    }
  }
  closedir(d);
  pick = al__session_pick(list, arg, out, out_len, why, why_len);
  json_decref(list);
  return pick;
}
