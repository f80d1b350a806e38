/* Socket path resolution, NDJSON framing and JSON-RPC message helpers
 * (rpc.h). The framer copies only the tail of an incomplete line; whole
 * lines inside one read are handed out in place. */
#include "rpc/rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

static void say(char *why, size_t why_len, const char *fmt, const char *a) {
  if (why != NULL && why_len > 0) {
    snprintf(why, why_len, fmt, a);
  }
}

/* ---- socket path ---------------------------------------------------------- */

/* Test seam (RELIABILITY G2), set only by the test binary: no binary
 * reads it from the environment, so a stray variable cannot loosen the
 * directory rule of a real daemon or client. */
bool al__rpc_test_open_mode = false;

static bool open_mode_allowed(void) { return al__rpc_test_open_mode; }

int al__rpc_dir_check(const char *dir, bool create, char *why,
                      size_t why_len) {
  struct stat st;
  mode_t bad = 077;

  if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int e = -errno;

    say(why, why_len, "cannot create %s", dir);
    return e;
  }
  if (lstat(dir, &st) != 0) {
    int e = -errno;

    say(why, why_len, "cannot stat %s", dir);
    return e;
  }
  if (S_ISLNK(st.st_mode)) {
    say(why, why_len, "%s is a symlink; refusing it", dir);
    return UV_EPERM;
  }
  if (!S_ISDIR(st.st_mode)) {
    say(why, why_len, "%s is not a directory", dir);
    return UV_EPERM;
  }
  if (st.st_uid != geteuid()) {
    say(why, why_len, "%s is owned by another user; refusing it", dir);
    return UV_EPERM;
  }
  if (open_mode_allowed()) {
    bad = 066; /* test-only: 0711 lets other uids reach the socket */
  }
  if ((st.st_mode & bad) != 0) {
    say(why, why_len, "%s is accessible by other users (mode must be 0700)",
        dir);
    return UV_EPERM;
  }
  return 0;
}

int al__rpc_socket_path_check(const char *path, char *why, size_t why_len) {
  struct sockaddr_un sa;
  char dir[sizeof(sa.sun_path)];
  const char *slash;

  if (path == NULL || path[0] == '\0') {
    say(why, why_len, "%s", "empty socket path");
    return UV_EINVAL;
  }
  if (strlen(path) >= sizeof(sa.sun_path)) {
    say(why, why_len, "socket path too long (max 107 bytes): %s", path);
    return UV_ENAMETOOLONG;
  }
  slash = strrchr(path, '/');
  if (slash == NULL) {
    return 0; /* relative name in the cwd: the caller chose it */
  }
  if (slash == path) {
    say(why, why_len, "%s", "refusing a socket directly under /");
    return UV_EPERM;
  }
  memcpy(dir, path, (size_t)(slash - path));
  dir[slash - path] = '\0';
  return al__rpc_dir_check(dir, false, why, why_len);
}

static bool usable_runtime_dir(const char *d) {
  struct stat st;

  return d != NULL && d[0] == '/' && stat(d, &st) == 0 &&
         S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

int al__rpc_socket_path(char *buf, size_t len, bool create_dir, char *why,
                        size_t why_len) {
  struct sockaddr_un sa;
  const char *env = getenv("AGENTLOOP_SOCKET");
  const char *rt = getenv("XDG_RUNTIME_DIR");
  char dir[sizeof(sa.sun_path) + 64];
  int n;
  int rc;

  if (env != NULL && env[0] != '\0') {
    if (strlen(env) >= len) {
      say(why, why_len, "socket path too long: %s", env);
      return UV_ENAMETOOLONG;
    }
    strcpy(buf, env);
    return al__rpc_socket_path_check(buf, why, why_len);
  }
  if (usable_runtime_dir(rt)) {
    n = snprintf(dir, sizeof(dir), "%s/agentloop", rt);
  } else {
    n = snprintf(dir, sizeof(dir), "/tmp/agentloop-%lu",
                 (unsigned long)geteuid());
  }
  if (n < 0 || (size_t)n >= sizeof(dir)) {
    say(why, why_len, "%s", "socket directory path too long");
    return UV_ENAMETOOLONG;
  }
  n = snprintf(buf, len, "%s/%s", dir, AL_RPC_SOCKET_NAME);
  if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(sa.sun_path)) {
    say(why, why_len, "socket path too long (max 107 bytes) under %s", dir);
    return UV_ENAMETOOLONG;
  }
  rc = al__rpc_dir_check(dir, create_dir, why, why_len);
  return rc;
}

/* ---- framing -------------------------------------------------------------- */

void al_rpc_framer_init(al_rpc_framer_t *f, size_t max) {
  /* +1: al_buf keeps a NUL after the data within max. */
  al_buf_init(&f->buf, max + 1);
  f->max = max;
  f->skipping = false;
}

void al_rpc_framer_free(al_rpc_framer_t *f) { al_buf_free(&f->buf); }

size_t al_rpc_framer_pending(const al_rpc_framer_t *f) { return f->buf.len; }

static bool emit(al_rpc_framer_t *f, const char *p, size_t n,
                 al_rpc_line_cb cb, void *data) {
  if (n > 0 && p[n - 1] == '\r') {
    n--;
  }
  return cb(f, p, n, false, data);
}

int al_rpc_framer_feed(al_rpc_framer_t *f, const char *p, size_t n,
                       al_rpc_line_cb cb, void *data) {
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl != NULL ? (size_t)(nl - p) : n;

    if (f->skipping) {
      if (nl == NULL) {
        return 0;
      }
      f->skipping = false;
    } else if (f->buf.len + take > f->max) {
      /* Over the limit: report now, drop what we hold and skip on. */
      al_buf_reset(&f->buf);
      if (nl == NULL) {
        f->skipping = true;
      }
      if (!cb(f, NULL, 0, true, data)) {
        return AL_ECANCELED;
      }
      if (nl == NULL) {
        return 0;
      }
    } else if (nl == NULL) {
      return al_buf_append(&f->buf, p, take) == 0 ? 0 : AL_ENOMEM;
    } else if (f->buf.len == 0) {
      if (!emit(f, p, take, cb, data)) {
        return AL_ECANCELED;
      }
    } else {
      bool go;

      if (al_buf_append(&f->buf, p, take) != 0) {
        return AL_ENOMEM;
      }
      go = emit(f, f->buf.data, f->buf.len, cb, data);
      if (!go) {
        return AL_ECANCELED;
      }
      al_buf_reset(&f->buf);
    }
    p += take + 1;
    n -= take + 1;
  }
  return 0;
}

/* ---- messages ------------------------------------------------------------- */

static bool id_ok(const json_t *id) {
  return json_is_string(id) || json_is_integer(id);
}

int al_rpc_parse(const char *line, size_t len, al_rpc_msg_t *msg,
                 json_t **bad_id, char *why, size_t why_len) {
  json_error_t err;
  json_t *root;
  json_t *id;
  json_t *m;
  json_t *params;
  json_t *v;

  memset(msg, 0, sizeof(*msg));
  *bad_id = NULL;
  /* REJECT_DUPLICATES: {"id":1,"id":2} has no single meaning. */
  root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
  if (root == NULL) {
    say(why, why_len, "parse error: %s", err.text);
    return AL_RPC_PARSE_ERROR;
  }
  if (!json_is_object(root)) {
    json_decref(root);
    say(why, why_len, "%s", "invalid request: not a JSON object");
    return AL_RPC_INVALID_REQUEST;
  }
  id = json_object_get(root, "id");
  if (id != NULL && id_ok(id)) {
    *bad_id = json_incref(id);
  }
  v = json_object_get(root, "jsonrpc");
  if (!json_is_string(v) || strcmp(json_string_value(v), "2.0") != 0) {
    say(why, why_len, "%s", "invalid request: jsonrpc must be \"2.0\"");
    goto out_invalid;
  }
  m = json_object_get(root, "method");
  /* A response to a line whose id could not be read carries id null
   * (JSON-RPC 2.0 §5); nothing else may. */
  if (id != NULL && !id_ok(id) &&
      !(m == NULL && json_is_null(id) &&
        json_object_get(root, "error") != NULL)) {
    say(why, why_len, "%s", "invalid request: id must be a string or integer");
    goto out_invalid;
  }
  if (m != NULL) {
    if (!json_is_string(m) || json_string_length(m) == 0) {
      say(why, why_len, "%s", "invalid request: method must be a string");
      goto out_invalid;
    }
    params = json_object_get(root, "params");
    if (params != NULL && !json_is_object(params)) {
      if (json_is_null(params)) {
        params = NULL;
      } else {
        say(why, why_len, "%s", "invalid request: params must be an object");
        goto out_invalid;
      }
    }
    msg->kind = id != NULL ? AL_RPC_MSG_REQUEST : AL_RPC_MSG_NOTIFICATION;
    msg->method = json_string_value(m);
    msg->params = params;
  } else {
    json_t *res = json_object_get(root, "result");
    json_t *er = json_object_get(root, "error");

    if (id == NULL || (res == NULL) == (er == NULL) ||
        (er != NULL && !json_is_object(er))) {
      say(why, why_len, "%s", "invalid request: no method");
      goto out_invalid;
    }
    msg->kind = AL_RPC_MSG_RESPONSE;
    msg->result = res;
    msg->error = er;
  }
  msg->root = root;
  msg->id = id;
  json_decref(*bad_id);
  *bad_id = NULL;
  return 0;

out_invalid:
  json_decref(root);
  return AL_RPC_INVALID_REQUEST;
}

void al_rpc_msg_free(al_rpc_msg_t *msg) {
  json_decref(msg->root);
  memset(msg, 0, sizeof(*msg));
}

static json_t *base(void) {
  json_t *o = json_object();

  if (o != NULL && json_object_set_new(o, "jsonrpc", json_string("2.0")) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *id_copy(const json_t *id) {
  return id != NULL ? json_deep_copy(id) : json_null();
}

json_t *al_rpc_notification_new(const char *method, json_t *params_new) {
  json_t *o = base();

  if (o == NULL || json_object_set_new(o, "method", json_string(method)) != 0 ||
      (params_new != NULL &&
       json_object_set_new(o, "params", params_new) != 0)) {
    if (o == NULL) {
      json_decref(params_new);
    }
    json_decref(o);
    return NULL;
  }
  return o;
}

json_t *al_rpc_request_new(json_t *id, const char *method, json_t *params_new) {
  json_t *o = al_rpc_notification_new(method, params_new);

  /* jsonrpc, method, params, then id: key order does not matter to a
   * JSON-RPC peer. */
  if (o != NULL && json_object_set_new(o, "id", id_copy(id)) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

json_t *al_rpc_result_new(const json_t *id, json_t *result_new) {
  json_t *o = base();

  if (result_new == NULL) {
    json_decref(o);
    return NULL;
  }
  if (o == NULL || json_object_set_new(o, "id", id_copy(id)) != 0 ||
      json_object_set_new(o, "result", result_new) != 0) {
    if (o == NULL) {
      json_decref(result_new);
    }
    json_decref(o);
    return NULL;
  }
  return o;
}

json_t *al_rpc_error_new(const json_t *id, int code, const char *message,
                         json_t *data_new) {
  json_t *o = base();
  json_t *e = json_object();

  if (o == NULL || e == NULL ||
      json_object_set_new(e, "code", json_integer(code)) != 0 ||
      json_object_set_new(e, "message", json_string(message)) != 0 ||
      (data_new != NULL && json_object_set(e, "data", data_new) != 0) ||
      json_object_set_new(o, "id", id_copy(id)) != 0 ||
      json_object_set(o, "error", e) != 0) {
    json_decref(o);
    json_decref(e);
    json_decref(data_new);
    return NULL;
  }
  json_decref(e);
  json_decref(data_new);
  return o;
}

int al_rpc_dump_line(const json_t *msg, al_buf_t *out) {
  size_t len;
  char *s = al_rpc_dump_line_alloc(msg, &len);
  int rc;

  if (s == NULL) {
    return AL_ENOMEM;
  }
  rc = al_buf_append(out, s, len);
  al_free(s);
  return rc;
}

char *al_rpc_dump_line_alloc(const json_t *msg, size_t *len) {
  size_t n = json_dumpb(msg, NULL, 0, JSON_COMPACT);
  char *s;

  if (n == 0) {
    return NULL;
  }
  s = al_malloc(n + 2);
  if (s == NULL) {
    return NULL;
  }
  if (json_dumpb(msg, s, n, JSON_COMPACT) != n) {
    al_free(s);
    return NULL;
  }
  s[n] = '\n';
  s[n + 1] = '\0';
  *len = n + 1;
  return s;
}
