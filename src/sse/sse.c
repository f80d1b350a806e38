/* WHATWG event-stream parser (SPEC §4, PROTOCOLS.md §1).
 *
 * This module owns line splitting (CR, LF, CRLF; a CR that ends one chunk
 * pairs with an LF that starts the next), the one leading BOM, field
 * interpretation and event dispatch. It knows nothing about transports or
 * providers and does not include uv.h.
 *
 * Invariants:
 * - A line that is complete inside the current chunk is interpreted in
 *   place. Only a line cut by the end of a chunk is copied: into p->line, or,
 *   for a `data` line whose first value byte is known, straight into p->data
 *   (p->line_is_data; p->line_len counts the line against max_line).
 * - During one al_sse_feed() call, the event type and a block's first data
 *   value stay slices of the caller's bytes (struct slices). They are copied
 *   into p->type / p->data only if the call returns with the block still
 *   open, so an event that starts and ends inside one chunk is dispatched
 *   without any copy. Data bytes are copied at most once. The exception is a
 *   line split across chunks that is not a data line (event, id, retry,
 *   comment): it goes to p->line first and then, for event/id, into its
 *   buffer. Those lines are short. The same goes for the one value byte
 *   after "data:" that decides whether there is a leading space.
 * - p->data holds the data values joined with LF and never the trailing LF
 *   that WHATWG strips at dispatch, so max_event bounds exactly what
 *   on_event receives. p->has_data tells "no data field" from "data:".
 * - The block's own id is always the current last-event-ID buffer when
 *   p->has_id is set (a valid id field sets both), so p->id is unused and
 *   stays empty.
 * - Every limit is checked the same way whatever the chunking: a line
 *   (complete or not) longer than max_line, or joined data longer than
 *   max_event, fails with AL_ETOOBIG. No event can be dispatched between
 *   the start of that line and the point where either path notices, so the
 *   events seen before the error do not depend on the split.
 * - A block whose fields are an optional `id`, an optional `event` and one
 *   `data` line, whole inside the chunk, LF-only, is dispatched by
 *   block_fast() without
 *   going line by line; the randomized differential tests hold both paths
 *   to the reference interpreter.
 * - Bytes are not decoded. Invalid UTF-8 (and a truncated multi-byte
 *   character at the end of the stream) is passed through byte for byte;
 *   the layer above decides what to do with it. Where WHATWG would produce
 *   U+FFFD, field names still compare unequal to the known names, so field
 *   handling is the same as with a decoder.
 * - Errors and a callback's non-zero return are sticky until al_sse_reset():
 *   after a stop, the rest of that chunk has not been parsed, so the state
 *   is no longer a clean prefix of the stream.
 * - `retry` values with more digits than fit in uint64_t are clamped to
 *   UINT64_MAX (WHATWG says to take the integer; a huge one means "wait
 *   forever" to us, which is the closest representable value). */
#include "sse/sse.h"

#define DEFAULT_MAX_LINE ((size_t)1 << 20)
#define DEFAULT_MAX_EVENT ((size_t)8 << 20)

static const char bom[3] = {'\xEF', '\xBB', '\xBF'};

/* Per-call view of the block being built: slices of the input given to the
 * current al_sse_feed(), or NULL when the parser's own buffer holds the
 * value. Never outlives the call. */
struct slices {
  const char *type;
  size_t type_len;
  const char *data; /* the block's first and only data value so far */
  size_t data_len;
};

void al_sse_settings_init(al_sse_settings_t *s) {
  memset(s, 0, sizeof(*s));
  s->max_line = DEFAULT_MAX_LINE;
  s->max_event = DEFAULT_MAX_EVENT;
}

void al_sse_init(al_sse_parser_t *p, const al_sse_settings_t *s) {
  memset(p, 0, sizeof(*p));
  p->settings = *s;
  if (p->settings.max_line == 0) {
    p->settings.max_line = DEFAULT_MAX_LINE;
  }
  if (p->settings.max_event == 0) {
    p->settings.max_event = DEFAULT_MAX_EVENT;
  }
  al_buf_init(&p->line, p->settings.max_line);
  al_buf_init(&p->data, p->settings.max_event);
  /* A type or id is part of one line, so max_line bounds it. */
  al_buf_init(&p->type, p->settings.max_line);
  al_buf_init(&p->id, p->settings.max_line);
  al_buf_init(&p->last_id, p->settings.max_line);
  al_buf_init(&p->retry_digits, p->settings.max_line);
}

/* Forgets the block being built (after a dispatch or a blank line). */
static void block_clear(al_sse_parser_t *p, struct slices *c) {
  c->type = NULL;
  c->data = NULL;
  al_buf_reset(&p->type);
  al_buf_reset(&p->data);
  p->has_data = false;
  p->has_id = false;
}

/* Moves a data slice into p->data, which is empty while a slice is held. */
static int data_own(al_sse_parser_t *p, struct slices *c) {
  int err = al_buf_append(&p->data, c->data, c->data_len);

  c->data = NULL;
  return err;
}

/* Copies whatever still points into the caller's bytes before feed returns
 * (the block continues in a later chunk). */
static int slices_own(al_sse_parser_t *p, struct slices *c) {
  int err;

  if (c->type != NULL) {
    al_buf_reset(&p->type);
    err = al_buf_append(&p->type, c->type, c->type_len);
    c->type = NULL;
    if (err != 0) {
      return err;
    }
  }
  if (c->data != NULL) {
    return data_own(p, c);
  }
  return 0;
}

/* A blank line: WHATWG "dispatch the event". The last-event-ID buffer is
 * the only ID state we keep; it already holds what WHATWG copies into the
 * last event ID string here, and it is never cleared. */
static int dispatch(al_sse_parser_t *p, struct slices *c) {
  al_sse_event_t ev;
  const char *type = c->type != NULL ? c->type : p->type.data;
  size_t type_len = c->type != NULL ? c->type_len : p->type.len;
  int rc;

  if (!p->has_data &&
      (type_len == 0 || !p->settings.dispatch_typed_without_data)) {
    block_clear(p, c);
    return 0;
  }
  ev.has_type = type_len > 0;
  ev.type = ev.has_type ? type : "message";
  ev.type_len = ev.has_type ? type_len : 7;
  if (c->data != NULL) {
    ev.data = c->data;
    ev.data_len = c->data_len;
  } else if (p->data.len > 0) {
    ev.data = p->data.data;
    ev.data_len = p->data.len;
  } else {
    ev.data = "";
    ev.data_len = 0;
  }
  ev.has_data = p->has_data;
  ev.last_event_id = p->last_id.len > 0 ? p->last_id.data : "";
  ev.last_event_id_len = p->last_id.len;
  ev.has_id = p->has_id;
  ev.id = p->has_id ? ev.last_event_id : "";
  ev.id_len = p->has_id ? ev.last_event_id_len : 0;
  rc = 0;
  if (p->settings.on_event != NULL) {
    rc = p->settings.on_event(p->settings.data, &ev);
  }
  /* Only now: clearing writes a NUL into the buffers ev points at. */
  block_clear(p, c);
  return rc;
}

static int field_data(al_sse_parser_t *p, struct slices *c, const char *v,
                      size_t vlen, bool in_input) {
  int err;

  if (!p->has_data) {
    p->has_data = true;
    if (in_input) {
      if (vlen > p->data.max) {
        return AL_ETOOBIG;
      }
      c->data = v;
      c->data_len = vlen;
      return 0;
    }
    return al_buf_append(&p->data, v, vlen);
  }
  if (c->data != NULL) {
    err = data_own(p, c);
    if (err != 0) {
      return err;
    }
  }
  /* One reserve for separator and value; the buffer's max is max_event. */
  err = al_buf_reserve(&p->data, vlen + 1);
  if (err != 0) {
    return err;
  }
  p->data.data[p->data.len] = '\n';
  memcpy(p->data.data + p->data.len + 1, v, vlen);
  p->data.len += vlen + 1;
  p->data.data[p->data.len] = '\0';
  return 0;
}

static int field_retry(al_sse_parser_t *p, const char *v, size_t vlen) {
  uint64_t ms = 0;
  size_t i;
  int err;

  if (vlen == 0) {
    return 0;
  }
  for (i = 0; i < vlen; i++) {
    unsigned d = (unsigned)(unsigned char)v[i] - '0';

    if (d > 9) {
      return 0;
    }
    /* Clamp instead of wrapping; once clamped it stays clamped. */
    if (ms > (UINT64_MAX - d) / 10) {
      ms = UINT64_MAX;
    } else {
      ms = ms * 10 + d;
    }
  }
  /* The exact value as digits (WHATWG keeps the integer exactly, however
   * large): leading zeros stripped, "0" when all were zeros. */
  for (i = 0; i + 1 < vlen && v[i] == '0'; i++) {
  }
  al_buf_reset(&p->retry_digits);
  if ((err = al_buf_append(&p->retry_digits, v + i, vlen - i)) != 0) {
    p->error = err;
    return err;
  }
  p->retry_ms = ms;
  p->has_retry = true;
  if (p->settings.on_retry != NULL) {
    p->settings.on_retry(p->settings.data, ms);
  }
  return 0;
}

const char *al_sse_retry_digits(const al_sse_parser_t *p, size_t *len) {
  if (!p->has_retry) {
    *len = 0;
    return NULL;
  }
  *len = p->retry_digits.len;
  return p->retry_digits.data;
}

static int field_event(al_sse_parser_t *p, struct slices *c, const char *v,
                       size_t vlen, bool in_input) {
  if (in_input) {
    c->type = v;
    c->type_len = vlen;
    return 0;
  }
  c->type = NULL;
  al_buf_reset(&p->type);
  return al_buf_append(&p->type, v, vlen);
}

static int field_id(al_sse_parser_t *p, const char *v, size_t vlen) {
  int err;

  if (memchr(v, '\0', vlen) != NULL) {
    return 0; /* WHATWG: ignore the whole field */
  }
  al_buf_reset(&p->last_id);
  err = al_buf_append(&p->last_id, v, vlen);
  p->has_id = true;
  return err;
}

/* One complete line without its line end. in_input says the bytes belong
 * to the caller's current chunk (so slices of it may be kept until feed
 * returns); otherwise they live in p->line and must be copied. */
static int line_process(al_sse_parser_t *p, struct slices *c, const char *line,
                        size_t len, bool in_input) {
  const char *colon;
  const char *v;
  size_t nlen;
  size_t vlen;

  if (len == 0) {
    return dispatch(p, c);
  }
  /* The two lines of nearly every LLM event go straight to their field,
   * without the colon search. */
  if (len >= 5 && memcmp(line, "data:", 5) == 0) {
    v = line + 5;
    vlen = len - 5;
    if (vlen > 0 && v[0] == ' ') {
      v++;
      vlen--;
    }
    return field_data(p, c, v, vlen, in_input);
  }
  if (len >= 6 && memcmp(line, "event:", 6) == 0) {
    v = line + 6;
    vlen = len - 6;
    if (vlen > 0 && v[0] == ' ') {
      v++;
      vlen--;
    }
    return field_event(p, c, v, vlen, in_input);
  }
  if (line[0] == ':') {
    if (p->settings.on_comment != NULL) {
      p->settings.on_comment(p->settings.data, line + 1, len - 1);
    }
    return 0;
  }
  colon = memchr(line, ':', len);
  if (colon != NULL) {
    nlen = (size_t)(colon - line);
    v = colon + 1;
    vlen = len - nlen - 1;
    if (vlen > 0 && v[0] == ' ') {
      v++;
      vlen--;
    }
  } else {
    /* No colon: the whole line is the name and the value is empty. */
    nlen = len;
    v = line + len;
    vlen = 0;
  }
  if (nlen == 4 && memcmp(line, "data", 4) == 0) {
    return field_data(p, c, v, vlen, in_input);
  }
  if (nlen == 5 && memcmp(line, "event", 5) == 0) {
    return field_event(p, c, v, vlen, in_input);
  }
  if (nlen == 2 && memcmp(line, "id", 2) == 0) {
    return field_id(p, v, vlen);
  }
  if (nlen == 5 && memcmp(line, "retry", 5) == 0) {
    return field_retry(p, v, vlen);
  }
  return 0; /* unknown field names are ignored */
}

/* The value of the data line cut by the chunk end goes straight into
 * p->data from now on: line.data holds "data:" and one more byte. */
static int data_line_start(al_sse_parser_t *p, struct slices *c,
                           const char *tail, size_t n) {
  char first = p->line.data[5];
  int err;

  al_buf_reset(&p->line);
  p->line_is_data = true;
  p->line_len = 6;
  if (p->has_data) {
    if (c->data != NULL) {
      err = data_own(p, c);
      if (err != 0) {
        return err;
      }
    }
    err = al_buf_append(&p->data, "\n", 1);
    if (err != 0) {
      return err;
    }
  }
  p->has_data = true;
  if (first != ' ') {
    err = al_buf_append(&p->data, &first, 1);
    if (err != 0) {
      return err;
    }
  }
  if (n > p->line.max - p->line_len) {
    return AL_ETOOBIG;
  }
  p->line_len += n;
  return al_buf_append(&p->data, tail, n);
}

/* The chunk ended inside a line: keep its bytes for the next call. */
static int line_partial(al_sse_parser_t *p, struct slices *c, const char *tail,
                        size_t n) {
  size_t take;
  int err;

  if (p->line_is_data) {
    if (n > p->line.max - p->line_len) {
      return AL_ETOOBIG;
    }
    p->line_len += n;
    return al_buf_append(&p->data, tail, n);
  }
  if (p->line.len < 6) {
    /* Six bytes decide it: "data:" and whether a space follows. */
    take = AL_MIN(6 - p->line.len, n);
    err = al_buf_append(&p->line, tail, take);
    if (err != 0) {
      return err;
    }
    tail += take;
    n -= take;
    if (p->line.len == 6 && memcmp(p->line.data, "data:", 5) == 0) {
      return data_line_start(p, c, tail, n);
    }
  }
  return al_buf_append(&p->line, tail, n);
}

/* The line started in an earlier chunk and ends after tail[0..n). */
static int line_complete(al_sse_parser_t *p, struct slices *c, const char *tail,
                         size_t n) {
  int err;

  if (p->line_is_data) {
    p->line_is_data = false;
    if (n > p->line.max - p->line_len) {
      return AL_ETOOBIG;
    }
    p->line_len = 0;
    return al_buf_append(&p->data, tail, n);
  }
  err = al_buf_append(&p->line, tail, n);
  if (err != 0) {
    return err;
  }
  err = line_process(p, c, p->line.data, p->line.len, false);
  al_buf_reset(&p->line);
  return err;
}

/* The block shape of nearly every LLM event, at a block start and whole
 * inside the chunk: an optional `id:` line (block_fast_id), an optional
 * `event:` line, one `data:` line and the blank line, all LF-terminated
 * with no CR before the blank line's LF. It is dispatched as the
 * line-by-line path would (same limits, same event, same last event ID),
 * with one memchr per line and no per-line calls or copies. Returns where
 * parsing continues, or NULL having done nothing: anything else (another
 * field or order, a second data line, a CR, a limit hit, a cut by the
 * chunk end) takes the general path. *cr caches the next CR as in
 * al_sse_feed. block_rest parses from q, after the id line if there was
 * one (id, id_len; id NULL if none). */
static inline __attribute__((always_inline)) const char *
block_rest(al_sse_parser_t *p, const char *pos, const char *q,
           const char *end, const char **cr, int *rc, const char *id,
           size_t id_len) {
  al_sse_event_t ev;
  const char *line;
  const char *lf;

  ev.type = "message";
  ev.type_len = 7;
  ev.has_type = false;
  if (end - q > 6 && memcmp(q, "event:", 6) == 0) {
    line = q;
    q += 6;
    q += *q == ' ';
    lf = memchr(q, '\n', (size_t)(end - q));
    if (lf == NULL || (size_t)(lf - line) > p->line.max) {
      return NULL;
    }
    if (lf > q) {
      ev.type = q;
      ev.type_len = (size_t)(lf - q);
      ev.has_type = true;
    }
    q = lf + 1;
  }
  if (end - q <= 5 || memcmp(q, "data:", 5) != 0) {
    return NULL;
  }
  line = q;
  q += 5;
  q += *q == ' ';
  lf = memchr(q, '\n', (size_t)(end - q));
  if (lf == NULL || end - lf < 2 || lf[1] != '\n' ||
      (size_t)(lf - line) > p->line.max || (size_t)(lf - q) > p->data.max) {
    return NULL;
  }
  if (*cr == NULL || *cr < pos) {
    *cr = memchr(pos, '\r', (size_t)(end - pos));
    if (*cr == NULL) {
      *cr = end;
    }
  }
  if (*cr < lf) {
    return NULL;
  }
  ev.has_id = false;
  if (id != NULL && memchr(id, '\0', id_len) == NULL) {
    /* field_id's effect (a value with a NUL is ignored, as there). */
    al_buf_reset(&p->last_id);
    if ((*rc = al_buf_append(&p->last_id, id, id_len)) != 0) {
      return lf + 2;
    }
    ev.has_id = true;
  }
  ev.data = q;
  ev.data_len = (size_t)(lf - q);
  ev.has_data = true;
  ev.last_event_id = p->last_id.len > 0 ? p->last_id.data : "";
  ev.last_event_id_len = p->last_id.len;
  ev.id = ev.has_id ? ev.last_event_id : "";
  ev.id_len = ev.has_id ? ev.last_event_id_len : 0;
  *rc = p->settings.on_event != NULL
            ? p->settings.on_event(p->settings.data, &ev)
            : 0;
  return lf + 2;
}

static const char *block_fast(al_sse_parser_t *p, const char *pos,
                              const char *end, const char **cr, int *rc) {
  return block_rest(p, pos, pos, end, cr, rc, NULL, 0);
}

/* A stamped stream's blocks (the latency scenario's) open with `id:`;
 * apart, so the plain path keeps its registers. */
static __attribute__((noinline)) const char *
block_fast_id(al_sse_parser_t *p, const char *pos, const char *end,
              const char **cr, int *rc) {
  const char *id;
  const char *lf;

  if (end - pos <= 3 || memcmp(pos, "id:", 3) != 0) {
    return NULL;
  }
  id = pos + 3;
  id += *id == ' ';
  lf = memchr(id, '\n', (size_t)(end - id));
  if (lf == NULL || (size_t)(lf - pos) > p->line.max) {
    return NULL;
  }
  return block_rest(p, pos, lf + 1, end, cr, rc, id, (size_t)(lf - id));
}

/* Matches the leading BOM byte by byte, so it may be split across chunks.
 * On a mismatch the matched prefix is ordinary text: it starts the first
 * line. Returns where parsing continues. */
static const char *bom_skip(al_sse_parser_t *p, const char *pos,
                            const char *end, int *err) {
  while (p->bom_state < 3 && pos < end) {
    if (*pos != bom[p->bom_state]) {
      unsigned n = p->bom_state;

      p->bom_state = 3;
      if (n > 0) {
        *err = al_buf_append(&p->line, bom, n);
      }
      break;
    }
    p->bom_state++;
    pos++;
  }
  return pos;
}

int al_sse_feed(al_sse_parser_t *p, const char *bytes, size_t len) {
  struct slices c = {NULL, 0, NULL, 0};
  const char *pos = bytes;
  const char *end = bytes + len;
  const char *cr = NULL;
  const char *lf = NULL;
  const char *eol;
  const char *next;
  int rc = 0;

  if (p->error != 0) {
    return p->error;
  }
  if (len == 0) {
    return 0;
  }
  if (p->bom_state < 3) {
    pos = bom_skip(p, pos, end, &rc);
    if (rc != 0) {
      p->error = rc;
      return rc;
    }
  }
  if (p->skip_lf && pos < end) {
    p->skip_lf = false;
    if (*pos == '\n') {
      pos++;
    }
  }
  while (pos < end) {
    /* At a block start with nothing carried over from an earlier chunk. */
    if (c.type == NULL && c.data == NULL && !p->has_data && !p->has_id &&
        p->type.len == 0 && p->line.len == 0 && !p->line_is_data &&
        (next = *pos == 'i' ? block_fast_id(p, pos, end, &cr, &rc)
                            : block_fast(p, pos, end, &cr, &rc)) != NULL) {
      if (rc != 0) {
        break;
      }
      pos = next;
      continue;
    }
    if (*pos == '\n' || *pos == '\r') {
      /* A blank line (the end of every event): no search needed. */
      eol = pos;
    } else {
      /* The next CR and LF are cached and searched again only once
       * passed, so each byte is scanned at most once per character and a
       * stream with no CR pays one memchr per chunk for it. */
      if (cr == NULL || cr < pos) {
        cr = memchr(pos, '\r', (size_t)(end - pos));
        if (cr == NULL) {
          cr = end;
        }
      }
      if (lf == NULL || lf < pos) {
        lf = memchr(pos, '\n', (size_t)(end - pos));
        if (lf == NULL) {
          lf = end;
        }
      }
      eol = cr < lf ? cr : lf;
    }
    if (eol == end) {
      rc = line_partial(p, &c, pos, (size_t)(end - pos));
      break;
    }
    if (p->line.len == 0 && !p->line_is_data) {
      if ((size_t)(eol - pos) > p->line.max) {
        rc = AL_ETOOBIG;
      } else {
        rc = line_process(p, &c, pos, (size_t)(eol - pos), true);
      }
    } else {
      rc = line_complete(p, &c, pos, (size_t)(eol - pos));
    }
    if (rc != 0) {
      break;
    }
    if (*eol == '\n') {
      next = eol + 1;
    } else if (eol + 1 < end) {
      next = eol + 1 + (eol[1] == '\n');
    } else {
      /* A CR ends the chunk: its line is done, but an LF opening the next
       * chunk belongs to it. */
      p->skip_lf = true;
      next = end;
    }
    pos = next;
  }
  if (rc == 0) {
    rc = slices_own(p, &c);
  }
  if (rc != 0) {
    p->error = rc;
  }
  return rc;
}

int al_sse_finish(al_sse_parser_t *p) {
  struct slices c = {NULL, 0, NULL, 0};
  int rc = 0;

  if (p->error != 0) {
    return p->error;
  }
  /* A BOM prefix that never completed is text of an unterminated line. */
  if (p->bom_state > 0 && p->bom_state < 3) {
    rc = al_buf_append(&p->line, bom, p->bom_state);
  }
  p->bom_state = 3;
  /* A CR at the very end already completed its line in feed. */
  p->skip_lf = false;
  if (rc == 0 && p->settings.flush_at_eof) {
    if (p->line_is_data) {
      p->line_is_data = false; /* its value is already in p->data */
    } else if (p->line.len > 0) {
      rc = line_process(p, &c, p->line.data, p->line.len, false);
    }
    if (rc == 0) {
      rc = dispatch(p, &c);
    }
  }
  /* WHATWG: pending data is discarded at the end of the stream. */
  al_buf_reset(&p->line);
  p->line_is_data = false;
  p->line_len = 0;
  block_clear(p, &c);
  if (rc != 0) {
    p->error = rc;
  }
  return rc;
}

void al_sse_reset(al_sse_parser_t *p) {
  struct slices c = {NULL, 0, NULL, 0};

  /* Buffers keep their memory for the next stream. */
  block_clear(p, &c);
  al_buf_reset(&p->line);
  al_buf_reset(&p->id);
  al_buf_reset(&p->last_id);
  p->line_is_data = false;
  p->line_len = 0;
  p->bom_state = 0;
  p->skip_lf = false;
  p->error = 0;
  p->retry_ms = 0;
  p->has_retry = false;
  al_buf_reset(&p->retry_digits);
}

void al_sse_free(al_sse_parser_t *p) {
  al_sse_reset(p);
  al_buf_free(&p->line);
  al_buf_free(&p->data);
  al_buf_free(&p->type);
  al_buf_free(&p->id);
  al_buf_free(&p->last_id);
  al_buf_free(&p->retry_digits);
}
