/* Built-in file tools and their path policy (SPEC §8, seed 001 §6).
 *
 * read_file, write_file, list_directory and done are al_tool_impl_t values
 * (executor/executor.h) made by one constructor each from an
 * al_fstools_options_t. Every call does its blocking work (realpath, policy
 * check, open, read/write) in one uv_queue_work request on the threadpool
 * and completes on the loop thread in the after-work callback, so start()
 * never calls back synchronously and the loop thread never touches the
 * filesystem. Bad arguments, denied paths and I/O failures are error
 * results (is_error), never refused starts.
 *
 * Decisions:
 *  - read_file {path, offset?, limit?}: offset is the 1-based first line
 *    (default 1), limit the number of lines (default: to the end). An
 *    offset past the last line is an error result. At most output_max bytes
 *    of the selection are kept; the characters past that are still counted.
 *    Invalid UTF-8 becomes U+FFFD.
 *  - Every tool's content is capped at display_max characters (Unicode code
 *    points) followed by "\n[OUTPUT TRUNCATED: showing X of Y characters
 *    from TOOL]".
 *  - write_file {path, content}: creates missing parent directories (inside
 *    the policy); never follows a final symlink (O_NOFOLLOW); refuses a file
 *    with more than one hard link, and any non-regular file; truncates only
 *    after those checks.
 *  - list_directory {path?}: path defaults to the workspace root; entries
 *    sorted bytewise, "/" after directories, "@" after symlinks; at most
 *    list_max shown, then "[LIST TRUNCATED: showing X of Y entries]".
 *  - done {message}: completes (on a later loop iteration) with the message
 *    as its content. It is concurrency-unsafe, so it runs alone: calls
 *    before it finish first and nothing starts beside it.
 *  - read_file and list_directory are concurrency-safe; write_file is not.
 *
 * Path policy (pathpolicy.c), on the resolved real path: relative paths
 * resolve against the workspace root; symlinks and ".." are resolved with
 * realpath() (of the file, or of its nearest existing ancestor for a path
 * that does not exist yet); denied_paths wins over allowed_paths; the
 * default allowed list is the workspace root alone. Rules are matched per
 * path component ("/a/b" covers "/a/b" and "/a/b/c", not "/a/bc"). */
#ifndef AL_TOOLS_H
#define AL_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/common.h"
#include "executor/executor.h"

#define AL_FSTOOLS_DEFAULT_OUTPUT_MAX (200 * 1024)
#define AL_FSTOOLS_DEFAULT_DISPLAY_MAX 40000
#define AL_FSTOOLS_DEFAULT_LIST_MAX 1000

/* ---- path policy --------------------------------------------------------- */

/* Every path in it is absolute and normalized (realpath when the path
 * exists, lexical otherwise); "~" and "~/x" expand with $HOME. */
typedef struct al_pathpolicy_s {
  char *root; /* the workspace root's real path */
  char **allowed;
  size_t n_allowed;
  char **denied;
  size_t n_denied;
  /* O_PATH directory fd per allowed rule (-1 where it does not exist):
   * every open goes through openat2(RESOLVE_BENEATH) from one of them. */
  int *root_fds;
} al_pathpolicy_t;

/* What the path is resolved for. */
typedef enum {
  AL_PATH_EXISTING = 0, /* read / list: the path must exist */
  AL_PATH_CREATE        /* write: the file may be new, its dirs too */
} al_path_mode_t;

/* Result of al__pathpolicy_resolve(). */
typedef struct al_path_s {
  char *real; /* al_malloc'd resolved path (NULL on error) */
  /* AL_PATH_CREATE: some parent directories do not exist yet; the first
   * of them begins at real + missing_from (at its '/'). */
  bool has_missing;
  size_t missing_from;
} al_path_t;

/* In place, cannot fail; al__pathpolicy_free() is safe afterwards. */
void al__pathpolicy_init(al_pathpolicy_t *p);
/* Sets the rules (blocking: realpath). root must be an existing directory
 * (AL_EINVAL otherwise). allowed NULL or n_allowed 0: the root alone.
 * Relative rules resolve against the root. AL_ENOMEM. */
int al__pathpolicy_set(al_pathpolicy_t *p, const char *root,
                       const char *const *allowed, size_t n_allowed,
                       const char *const *denied, size_t n_denied);
void al__pathpolicy_free(al_pathpolicy_t *p);
/* Whether an absolute normalized path is allowed. 0, or UV_EACCES with the
 * reason (naming the rule) appended to why (may be NULL). Pure. */
int al__pathpolicy_check(const al_pathpolicy_t *p, const char *real,
                         al_buf_t *why);
/* Resolves `path` (as the model gave it) and checks it. Blocking (run it
 * on the threadpool). 0 with out->real set, or a negative code with a
 * message in err: UV_EACCES (policy), UV_ENOENT (does not exist), UV_EINVAL
 * (empty path, names a directory for CREATE), other UV_E* from the OS. */
int al__pathpolicy_resolve(const al_pathpolicy_t *p, const char *path,
                           al_path_mode_t mode, al_path_t *out,
                           al_buf_t *err);
/* Opens a path that al__pathpolicy_resolve() accepted (`real`), closing
 * its check-then-open window: the open is
 * openat2(root fd, rest, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from the
 * allowed rule covering it, so a component swapped for a symlink meanwhile
 * cannot leave the root; then the opened file's own path is checked again
 * (a swap towards a denied path inside the root). O_CREAT: missing parent
 * directories are made the same way (mkdirat under a beneath-resolved
 * parent), the last component is never followed (O_NOFOLLOW) and
 * protected paths (al__pathpolicy_is_protected) are refused. Returns the
 * fd (O_CLOEXEC added) or a negative code with the reason in err
 * (UV_EACCES for policy). Blocking: threadpool only. */
int al__pathpolicy_open(const al_pathpolicy_t *p, const char *real,
                        int flags, int mode, al_buf_t *err);
/* True when `real` is one of the paths a tool must not create or change
 * inside an allowed root (tools.d, .agentloop, .git/hooks, .git/config,
 * shell rc files: AL_SANDBOX_PROTECTED). */
bool al__pathpolicy_is_protected(const al_pathpolicy_t *p, const char *real);

/* Lexical normalization of an absolute path ("//", ".", ".."); al_malloc'd
 * or NULL. */
char *al__path_normalize(const char *abs);

/* Test seam (fstools.c): called between a file tool's policy check and its
 * open, on the threadpool. NULL in production. */
extern void (*al__fstools_test_between)(const char *real);

/* ---- file tools ---------------------------------------------------------- */

typedef struct al_fstools_options_s {
  uv_loop_t *loop;       /* required: where the tools complete */
  const char *workspace; /* required: existing directory */
  const char *const *allowed_paths; /* NULL: the workspace alone */
  size_t n_allowed_paths;
  const char *const *denied_paths;
  size_t n_denied_paths;
  size_t output_max;  /* bytes kept; default 200 KB */
  size_t display_max; /* characters the model sees; default 40,000 */
  size_t list_max;    /* list_directory entries shown; default 1000 */
} al_fstools_options_t;

/* Defaults; loop and workspace NULL. */
void al__fstools_options_init(al_fstools_options_t *opts);

/* Each fills *out with a new tool (free with al__fstool_free). AL_EINVAL:
 * no loop, or the workspace is not an existing directory; AL_ENOMEM. The
 * options are copied. */
int al__read_file_new(const al_fstools_options_t *opts, al_tool_impl_t **out);
int al__write_file_new(const al_fstools_options_t *opts,
                       al_tool_impl_t **out);
int al__list_directory_new(const al_fstools_options_t *opts,
                           al_tool_impl_t **out);
int al__done_tool_new(const al_fstools_options_t *opts, al_tool_impl_t **out);
/* Only once no call of the tool is in flight. NULL is fine. */
void al__fstool_free(al_tool_impl_t *impl);

/* ---- the model's view of tool output (output.c) ---------------------------- */

/* For sanitized UTF-8 s: the byte offset where the first `limit`
 * characters end (len if they all fit). *shown gets the characters before
 * the cut, *total the characters in s plus extra_chars (output that was
 * counted but not kept). Truncated when *shown < *total. */
size_t al__tool_display_cut(const char *s, size_t len, size_t extra_chars,
                            size_t limit, size_t *shown, size_t *total);
/* Appends "[OUTPUT TRUNCATED: showing SHOWN of TOTAL characters from
 * TOOL]" (the caller puts the separator before it). */
int al__tool_truncation_notice(al_buf_t *b, size_t shown, size_t total,
                               const char *tool);

struct al_spawn_result_s;
/* A child's result as the model sees it (bash and CLI tools):
 *   [Error: command timed out after N s | Error: command cancelled\n]
 *   STDOUT [\n][stderr]\nSTDERR   cut at display_max characters
 *   [\n[OUTPUT TRUNCATED: showing X of Y characters from TOOL]]
 *   [\n]exit code N | killed by signal N
 * "(no output)" when all that is empty. *is_error: timeout, cancel,
 * non-zero exit, signal. On ENOMEM b is left empty. */
void al__tool_format_spawn(const struct al_spawn_result_s *res,
                           const char *tool, size_t display_max,
                           uint64_t timeout_ms, al_buf_t *b, bool *is_error);
/* Formats a child's result (al__tool_format_spawn) and completes the call
 * with it. */
void al__tool_complete_spawn(al_tool_call_t *call,
                             const struct al_spawn_result_s *res,
                             const char *tool, size_t display_max,
                             uint64_t timeout_ms);
/* Completes `call` with the error result `msg` from a zero timer: a tool's
 * start must never complete synchronously. Takes msg (al_malloc'd; NULL
 * means "Error: out of memory"). Sets call->tool_data to NULL, so the
 * tool's cancel finds nothing to stop. Returns 0 (start's "accepted"). */
int al__tool_fail_later(uv_loop_t *loop, al_tool_call_t *call, char *msg);

#endif
