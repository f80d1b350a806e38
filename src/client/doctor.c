/* `agentloop doctor`: is this machine ready? (CONVENTIONS.md 7.1)
 *
 *   ✓ CA bundle      /etc/ssl/certs/ca-certificates.crt: 144 certificates
 *   ! API key        ANTHROPIC_API_KEY not set (provider anthropic)
 *   ✓ proxy          none (https_proxy, HTTPS_PROXY, ALL_PROXY unset)
 *   ✓ socket dir     /run/user/1000/agentloop (0700, ours)
 *   ✓ daemon         agentloopd 0.1.0 (pid 4242) at /run/user/1000/...
 *   ✓ base URL       https://api.anthropic.com: TCP connect and TLS
 *                    handshake (certificate verified), HTTP 404, 87 ms
 *
 * ✓ passes, ! is a warning (the machine works, something is likely to
 * bite: no key yet, a name that does not resolve offline), ✗ fails. The
 * exit code is 1 when anything failed, else 0 - so a fresh machine with
 * no key configured yet passes with warnings. Secrets are never printed:
 * a key shows only its length, a proxy URL loses its password.
 *
 * The base URL is the one a run from this shell would use (flags, then
 * the configuration and environment, then the provider's endpoint), and it
 * is really reached: resolve, TCP connect and TLS handshake with
 * certificate verification, one GET, through the same transport and proxy
 * settings as a run. A loopback server needs no key.
 *
 * The local checks are plain blocking calls (stat, a file parse) before
 * any loop runs; the daemon and base URL checks each run their own loop:
 * the daemon one the same connect-or-start path as the chat (conn.c), the
 * base URL one the transport (libuv: DNS in the threadpool, connect and
 * handshake non-blocking). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/x509_crt.h>

#include "agentloop/sandbox.h"
#include "client/chat.h"
#include "client/cli.h"
#include "client/conn.h"
#include "config/config.h"
#include "client/tui.h"
#include "transport/transport.h"
#include "provider/provider.h"
#include "transport/transport_int.h"

typedef struct {
  bool color;
  int failed;
  int warned;
  /* What a run from this shell would use (check_settings fills them). */
  char provider[32];
  char base_url[1024]; /* "" until known; then never empty */
  bool has_key;
  char key_var[64];
  size_t key_len;
} doctor_t;

typedef enum { OK, WARN, FAIL } verdict_t;

static void report(doctor_t *d, verdict_t v, const char *what,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void report(doctor_t *d, verdict_t v, const char *what,
                   const char *fmt, ...) {
  static const char *const marks[] = {"✓", "!", "✗"};
  static const char *const colors[] = {AL_SGR_GREEN, AL_SGR_YELLOW,
                                       AL_SGR_RED};
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (d->color) {
    printf("%s%s%s %-12s %s\n", colors[v], marks[v], AL_SGR_RESET, what,
           msg);
  } else {
    printf("%s %-12s %s\n", marks[v], what, msg);
  }
  d->failed += v == FAIL;
  d->warned += v == WARN;
}

static void check_ca(doctor_t *d) {
  const char *file = getenv("SSL_CERT_FILE");
  const char *dir = getenv("SSL_CERT_DIR");
  mbedtls_x509_crt ca;
  const mbedtls_x509_crt *c;
  int n = 0;
  int rc;

  if (file == NULL || file[0] == '\0') {
    file = "/etc/ssl/certs/ca-certificates.crt";
  }
  mbedtls_x509_crt_init(&ca);
  rc = mbedtls_x509_crt_parse_file(&ca, file);
  if (rc < 0 && dir != NULL && dir[0] != '\0') {
    rc = mbedtls_x509_crt_parse_path(&ca, dir);
    file = dir;
  }
  for (c = &ca; c != NULL && c->version != 0; c = c->next) {
    n++;
  }
  if (rc < 0 || n == 0) {
    report(d, FAIL, "CA bundle",
           "%s: no certificate loads (install ca-certificates or set "
           "SSL_CERT_FILE)",
           file);
  } else if (rc > 0) {
    report(d, OK, "CA bundle", "%s: %d certificates (%d skipped)", file, n,
           rc);
  } else {
    report(d, OK, "CA bundle", "%s: %d certificates", file, n);
  }
  mbedtls_x509_crt_free(&ca);
}

static const char *env(const char *name) {
  const char *v = getenv(name);

  return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Whether the URL's host is this machine, as the transport decides it
 * (127.0.0.0/8, ::1, localhost and *.localhost). */
static bool is_loopback_url(const char *url) {
  al__transport_url_t u;
  bool local;

  if (al__transport_url_parse(url, true, &u) != 0) {
    return false;
  }
  local = al__transport_is_loopback(u.host);
  al__transport_url_free(&u);
  return local;
}

static void mask_url(const char *url, char *buf, size_t n);

static void check_keys(doctor_t *d) {
  if (d->has_key) {
    report(d, OK, "API key", "%s set (%zu characters; provider %s)",
           d->key_var, d->key_len, d->provider);
  } else if (is_loopback_url(d->base_url)) {
    char shown[1024];

    mask_url(d->base_url, shown, sizeof(shown));
    report(d, OK, "API key", "none needed for the local server at %s",
           shown);
  } else {
    report(d, WARN, "API key",
           "%s not set (provider %s): the daemon cannot call the model",
           d->key_var, d->provider);
  }
}

/* The URL with any user:password@ removed. */
static void mask_url(const char *url, char *buf, size_t n) {
  const char *scheme = strstr(url, "://");
  const char *host = scheme != NULL ? scheme + 3 : url;
  const char *at = strchr(host, '@');
  const char *slash = strchr(host, '/');

  if (at != NULL && (slash == NULL || at < slash)) {
    snprintf(buf, n, "%.*s***@%s", (int)(host - url), url, at + 1);
  } else {
    snprintf(buf, n, "%s", url);
  }
}

static void check_proxy(doctor_t *d) {
  static const char *const names[] = {"https_proxy", "HTTPS_PROXY",
                                      "http_proxy",  "HTTP_PROXY",
                                      "ALL_PROXY",   "all_proxy"};
  char line[1024] = "";
  size_t i;
  size_t len = 0;

  for (i = 0; i < AL_ARRAY_SIZE(names); i++) {
    const char *v = env(names[i]);
    char masked[512];

    if (v == NULL) {
      continue;
    }
    mask_url(v, masked, sizeof(masked));
    len += (size_t)snprintf(line + len, sizeof(line) - len, "%s%s=%s",
                            len > 0 ? ", " : "", names[i], masked);
    if (len >= sizeof(line)) {
      break;
    }
  }
  if (len == 0) {
    report(d, OK, "proxy", "none set (direct connections)");
    return;
  }
  report(d, OK, "proxy", "%s%s%s", line,
         env("no_proxy") || env("NO_PROXY") ? "; no_proxy=" : "",
         env("no_proxy")   ? env("no_proxy")
         : env("NO_PROXY") ? env("NO_PROXY")
                           : "");
}

static void check_socket_dir(doctor_t *d, char *path, size_t n) {
  char why[256] = "";
  char dir[PATH_MAX];
  char *slash;
  struct stat st;
  int rc = al__rpc_socket_path(path, n, true, why, sizeof(why));

  if (rc != 0) {
    report(d, FAIL, "socket dir", "%s", why[0] ? why : uv_strerror(rc));
    path[0] = '\0';
    return;
  }
  snprintf(dir, sizeof(dir), "%s", path);
  slash = strrchr(dir, '/');
  if (slash != NULL) {
    *slash = '\0';
  }
  if (stat(dir, &st) == 0) {
    report(d, OK, "socket dir", "%s (mode %04o, ours)", dir,
           (unsigned)(st.st_mode & 07777));
  } else {
    report(d, OK, "socket dir", "%s", dir);
  }
}

typedef struct {
  doctor_t *d;
  al__conn_t conn;
  bool was_running;
} daemon_check_t;

static void on_doctor_closed(al__conn_t *c) { (void)c; }

static void on_doctor_ready(al__conn_t *c, int status) {
  daemon_check_t *k = c->data;

  if (status != 0) {
    report(k->d, FAIL, "daemon", "cannot reach agentloopd at %s: %s",
           c->path, c->why[0] ? c->why : uv_strerror(status));
  } else {
    json_t *server = json_object_get(c->init_result, "server");
    const char *ver = json_string_value(json_object_get(server, "version"));

    report(k->d, OK, "daemon", "agentloopd %s (pid %" JSON_INTEGER_FORMAT
           ") %s at %s",
           ver != NULL ? ver : "?",
           json_integer_value(json_object_get(c->init_result, "pid")),
           c->spawned ? "started" : "running", c->path);
  }
  al__conn_close(c, on_doctor_closed);
}

static void check_daemon(doctor_t *d) {
  uv_loop_t loop;
  daemon_check_t k;

  memset(&k, 0, sizeof(k));
  signal(SIGPIPE, SIG_IGN);
  k.d = d;
  k.conn.data = &k;
  uv_loop_init(&loop);
  if (al__conn_open(&k.conn, &loop, true, on_doctor_ready) != 0) {
    report(d, FAIL, "daemon", "%s", k.conn.why);
    al__conn_close(&k.conn, on_doctor_closed);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

typedef struct {
  doctor_t *d;
  const char *url;
  bool tls;
  uint64_t t0;
  al_http_client_t *client;
  int http_status;
} url_check_t;

static void on_url_client_closed(al_http_client_t *c) { (void)c; }

static void on_url_done(al_http_request_t *r, int status,
                        const al_http_error_t *e) {
  url_check_t *k = al_http_request_get_data(r);
  unsigned ms = (unsigned)((uv_hrtime() - k->t0) / 1000000u);
  const char *how = k->tls ? "TCP connect and TLS handshake (certificate "
                             "verified)"
                           : "TCP connect (plain HTTP, no TLS)";
  int code = status == 0 ? k->http_status : e->http_status;

  if (code > 0) {
    /* Any answer means the path works; the status is for the curious
     * (a 401 or 404 on a bare GET is normal). */
    report(k->d, OK, "base URL", "%s: %s, HTTP %d, %u ms", k->url, how, code,
           ms);
  } else if (e->kind == AL_HTTP_ERR_TLS) {
    report(k->d, FAIL, "base URL", "%s: TLS handshake failed: %s%s%s", k->url,
           e->message, e->detail != NULL ? ": " : "",
           e->detail != NULL ? e->detail : "");
  } else if (status == UV_EAI_NONAME || status == UV_EAI_AGAIN ||
             status == UV_EAI_FAIL || status == UV_EAI_NODATA) {
    /* Offline is not broken: a warning, as before. */
    report(k->d, WARN, "base URL", "%s: the host does not resolve (%s)",
           k->url, e->message);
  } else {
    report(k->d, FAIL, "base URL", "%s: cannot connect: %s (%s)", k->url,
           e->message, al_http_error_kind_name(e->kind));
  }
  al_http_client_close(k->client, on_url_client_closed);
}

static void on_url_response(al_http_request_t *r, int code,
                            const al_http_headers_t *h) {
  url_check_t *k = al_http_request_get_data(r);

  (void)h;
  k->http_status = code;
}

/* Resolves, connects and (https) completes the TLS handshake with the
 * certificate verified against the CA bundle, then sends one GET without
 * credentials: proof that a run's requests can get through, not just DNS. */
static void check_base_url(doctor_t *d) {
  uv_loop_t loop;
  url_check_t k;
  al_http_client_options_t co;
  al_http_request_options_t ro;
  al_http_request_t *req;
  char shown[1024];
  char why[160];
  int rc;

  if (d->base_url[0] == '\0') {
    return; /* the configuration did not load: reported above */
  }
  mask_url(d->base_url, shown, sizeof(shown));
  if (al_http_url_check(d->base_url, why, sizeof(why)) != 0) {
    report(d, FAIL, "base URL", "%s: %s", shown, why);
    return;
  }
  memset(&k, 0, sizeof(k));
  k.d = d;
  k.url = shown;
  k.tls = strncasecmp(d->base_url, "https:", 6) == 0;
  signal(SIGPIPE, SIG_IGN);
  uv_loop_init(&loop);
  al_http_client_options_init(&co);
  co.connect_timeout_ms = 10000;
  co.total_timeout_ms = 20000;
  co.pool_max_idle_per_origin = 0;
  if (al_http_client_new(&loop, &co, &k.client) != 0) {
    report(d, FAIL, "base URL", "%s: out of memory", shown);
    uv_loop_close(&loop);
    return;
  }
  al_http_request_options_init(&ro);
  ro.url = d->base_url;
  ro.on_response = on_url_response;
  ro.on_complete = on_url_done;
  ro.data = &k;
  ro.max_error_body_bytes = 4096;
  k.t0 = uv_hrtime();
  rc = al_http_request_start(k.client, &ro, &req);
  if (rc != 0) {
    report(d, FAIL, "base URL", "%s: %s", shown, al_strerror(rc));
    al_http_client_close(k.client, on_url_client_closed);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

/* The sandbox tools would run in (RELIABILITY.md §4): bwrap is the goal;
 * degraded and none still work but are weaker, so they warn. */
static void check_sandbox(doctor_t *d) {
  al_sandbox_info_t si;

  (void)al_sandbox_probe(NULL, &si);
  switch (si.mode) {
  case AL_SANDBOX_MODE_BWRAP:
    report(d, OK, "sandbox", "bwrap + agentloop-exec (Landlock ABI %d, "
           "seccomp %s)%s%s", si.landlock_abi, si.seccomp_ok ? "on" : "off",
           si.missing[0] != '\0' ? "; missing: " : "", si.missing);
    break;
  case AL_SANDBOX_MODE_DEGRADED:
    report(d, WARN, "sandbox", "degraded (agentloop-exec alone, Landlock "
           "ABI %d); missing: %s%s%s", si.landlock_abi, si.missing,
           si.detail[0] != '\0' ? "; bwrap: " : "", si.detail);
    break;
  default:
    report(d, WARN, "sandbox", "none: headless runs refuse bash and write "
           "tools unless --sandbox=none%s%s (apt-get install bubblewrap)",
           si.detail[0] != '\0' ? "; " : "", si.detail);
    break;
  }  if (si.mode == AL_SANDBOX_MODE_NONE) {
    return;
  }
  /* The per-tool cgroup is what bounds a fork bomb for root (the kernel
   * exempts uid 0 from RLIMIT_NPROC). */
  if (si.cgroup_ok) {
    report(d, OK, "tool cgroup", "each tool in its own cgroup: pids.max "
           "under %s, memory limit %s%s", si.cgroup_pids,
           si.cgroup_memory[0] != '\0' ? "under " : "off",
           si.cgroup_memory);
    if (si.cgroup_detail[0] != '\0') {
      report(d, WARN, "tool cgroup", "%s", si.cgroup_detail);
    }
  } else {
    report(d, geteuid() == 0 ? WARN : OK, "tool cgroup",
           "not available (%s): tools have rlimits only%s",
           si.cgroup_detail[0] != '\0' ? si.cgroup_detail : "unknown",
           geteuid() == 0 ? "; as root RLIMIT_NPROC does not bind, so a "
                            "fork bomb is bounded only by the tool timeout"
                          : "");
  }
}

/* What a session started from this shell will use: the daemon takes the
 * provider, model, base URL and key from its client (docs/protocol.md),
 * so these are the configuration as seen from here, with their origins. */
static const char *origin_of(const al_config_t *cfg, const char *key,
                             char *buf, size_t n) {
  json_t *o = json_object_get(cfg->origins, key);

  if (o == NULL) {
    return "default";
  }
  snprintf(buf, n, "%s %s", json_string_value(json_object_get(o, "layer")),
           json_string_value(json_object_get(o, "where")));
  return buf;
}

/* The configuration as a run from here resolves it (the flags over the
 * files and environment); fills d's provider, base URL and key. */
static void check_settings(doctor_t *d, const char *provider_flag,
                           const char *base_url_flag) {
  al_config_t cfg;
  char o1[600], o2[600], o3[600], url[512];
  char why[700];
  const char *var = NULL;
  const char *key;
  const al_provider_t *prov;

  if (al__cli_config_load_for(&cfg, NULL, false, provider_flag,
                              "agentloop doctor") != 0) {
    report(d, FAIL, "config", "%zu error(s) in the configuration (above)",
           cfg.n_errors);
    al_config_free(&cfg);
    return;
  }
  if ((provider_flag != NULL &&
       al_config_set_flag(&cfg, "provider", provider_flag, "--provider", why,
                          sizeof(why)) != 0) ||
      (base_url_flag != NULL &&
       al_config_set_flag(&cfg, "base_url", base_url_flag, "--base-url", why,
                          sizeof(why)) != 0)) {
    report(d, FAIL, "config", "%s", why);
    al_config_free(&cfg);
    return;
  }
  report(d, OK, "config", "%s%s%s", cfg.user_file != NULL
                                        ? cfg.user_file
                                        : "no config directory",
         cfg.user_loaded ? "" : " (absent: defaults)",
         cfg.project_loaded ? " + project file" : "");
  key = al_config_api_key(&cfg, NULL, &var);
  prov = al_provider_by_name(al_config_provider(&cfg));
  snprintf(d->provider, sizeof(d->provider), "%s", al_config_provider(&cfg));
  /* Where a run from this shell would go: the agent's own default. */
  snprintf(d->base_url, sizeof(d->base_url), "%s",
           cfg.base_url != NULL ? cfg.base_url
           : al_provider_default_base_url(prov != NULL
                                              ? prov
                                              : &al_provider_anthropic));
  d->has_key = key != NULL;
  d->key_len = key != NULL ? strlen(key) : 0;
  snprintf(d->key_var, sizeof(d->key_var), "%s",
           var != NULL ? var : "ANTHROPIC_API_KEY");
  mask_url(cfg.base_url != NULL ? cfg.base_url : "(the provider's)", url,
           sizeof(url));
  report(d, OK, "daemon uses",
         "what this shell sends with each session: provider %s (%s), "
         "model %s (%s), base URL %s (%s), key from %s (%s)",
         al_config_provider(&cfg),
         origin_of(&cfg, "provider", o1, sizeof(o1)),
         cfg.model != NULL ? cfg.model : "the provider's default",
         origin_of(&cfg, "model", o2, sizeof(o2)), url,
         origin_of(&cfg, "base_url", o3, sizeof(o3)), var,
         key != NULL ? "set" : "not set");
  al_config_free(&cfg);
}

/* The configured MCP servers (docs/mcp.md): each is started and reported
 * ready (with its tool count) or failed (with its error). A failed server
 * is a warning: runs go on without it. */
static void check_mcp(doctor_t *d) {
  char cwd[PATH_MAX];
  size_t n = sizeof(cwd);
  char *json = NULL;
  json_t *states = NULL;
  al_buf_t err;
  size_t i;
  json_t *s;

  if (uv_cwd(cwd, &n) != 0) {
    return;
  }
  signal(SIGPIPE, SIG_IGN); /* a dead server costs a failed write */
  al_buf_init(&err, 16 * 1024);
  if (al__cli_mcp_load(cwd, NULL, false, &json, &err) != 0) {
    report(d, FAIL, "mcp", "configuration: %s",
           err.data != NULL ? err.data : "out of memory");
    al_buf_free(&err);
    return;
  }
  al_buf_free(&err);
  if (json == NULL) {
    report(d, OK, "mcp", "no servers configured");
    return;
  }
  if (al__cli_mcp_states(cwd, json, &states) != 0) {
    report(d, FAIL, "mcp", "the servers could not be started");
    al_free(json);
    return;
  }
  al_free(json);
  json_array_foreach(states, i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    const char *e = json_string_value(json_object_get(s, "error"));

    if (e == NULL) {
      report(d, OK, "mcp", "%s: ready, %lld tools, %lld ms", name,
             (long long)json_integer_value(json_object_get(s, "tools")),
             (long long)json_integer_value(json_object_get(s, "ms")));
    } else {
      report(d, WARN, "mcp", "%s: %.900s", name, e);
    }
  }
  json_decref(states);
}

int al_cli_doctor(int argc, char **argv) {
  doctor_t d;
  char path[128];
  int i;
  al_color_when_t when = AL_COLOR_AUTO;
  const char *base_url_flag = NULL;
  const char *provider_flag = NULL;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-color") == 0) {
      when = AL_COLOR_NEVER;
    } else if ((strcmp(argv[i], "--base-url") == 0 ||
                strcmp(argv[i], "--provider") == 0) &&
               i + 1 < argc) {
      *(argv[i][2] == 'b' ? &base_url_flag : &provider_flag) = argv[i + 1];
      i++;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      puts("usage: agentloop doctor [--no-color] [--provider NAME] "
           "[--base-url URL]\n\n"
           "Checks the CA bundle, API keys, proxy settings, the socket\n"
           "directory, that agentloopd answers (starting it if needed) and\n"
           "that the base URL a run would use is reached: TCP connect and\n"
           "TLS handshake with the certificate verified. Exit 1 if a check\n"
           "failed.");
      return 0;
    } else {
      fprintf(stderr, "agentloop doctor: unexpected argument '%s'\n",
              argv[i]);
      return 2;
    }
  }
  memset(&d, 0, sizeof(d));
  d.color = al__tui_want_color(when, STDOUT_FILENO);
  check_ca(&d);
  check_settings(&d, provider_flag, base_url_flag);
  if (d.base_url[0] != '\0') {
    check_keys(&d);
  }
  check_proxy(&d);
  check_socket_dir(&d, path, sizeof(path));
  if (path[0] != '\0') {
    check_daemon(&d);
  }
  check_sandbox(&d);
  check_mcp(&d);
  check_base_url(&d);
  printf("%s\n", d.failed > 0 ? "some checks failed"
                 : d.warned > 0 ? "ready, with warnings"
                                : "all checks passed");
  return d.failed > 0 ? 1 : 0;
}
