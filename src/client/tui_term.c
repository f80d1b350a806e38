/* Terminal facts for the front end: when to colour, how wide text is, and
 * how model and tool text is made harmless before it reaches the terminal.
 *
 * Neutralisation (RELIABILITY E5): text from the model or a tool must not
 * be able to move the cursor, rewrite what is on screen (\r, cursor
 * moves), set the clipboard (OSC 52), plant links (OSC 8) or flip text
 * direction - otherwise it could draw a fake approval prompt, or hide a
 * command in one. Every control character is therefore replaced by a
 * visible, inert spelling; the only escape sequences the front end ever
 * writes are its own. */
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <uv.h>

#include "client/tui.h"

bool al__tui_parse_color(const char *s, al_color_when_t *out) {
  if (strcmp(s, "auto") == 0) {
    *out = AL_COLOR_AUTO;
  } else if (strcmp(s, "always") == 0) {
    *out = AL_COLOR_ALWAYS;
  } else if (strcmp(s, "never") == 0) {
    *out = AL_COLOR_NEVER;
  } else {
    return false;
  }
  return true;
}

bool al__tui_color_decide(al_color_when_t when, bool is_tty, const char *term,
                          const char *no_color, const char *force_color) {
  if (when == AL_COLOR_ALWAYS) {
    return true;
  }
  if (when == AL_COLOR_NEVER) {
    return false;
  }
  /* FORCE_COLOR=0 is the convention for "do not force". */
  if (force_color != NULL && *force_color != '\0' &&
      strcmp(force_color, "0") != 0) {
    return true;
  }
  if (no_color != NULL && *no_color != '\0') {
    return false;
  }
  if (term != NULL && strcmp(term, "dumb") == 0) {
    return false;
  }
  return is_tty;
}

bool al__tui_want_color(al_color_when_t when, int fd) {
  return al__tui_color_decide(when, uv_guess_handle(fd) == UV_TTY,
                              getenv("TERM"), getenv("NO_COLOR"),
                              getenv("FORCE_COLOR"));
}

/* Decodes one UTF-8 character at s (n > 0 bytes). Returns its length, or 0
 * for an invalid or truncated sequence (overlongs and surrogates too). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
  uint32_t c = s[0];
  size_t len;
  size_t i;
  uint32_t min;

  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    c &= 0x1F;
    min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    c &= 0x0F;
    min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    c &= 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if (n < len) {
    return 0;
  }
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      return 0;
    }
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
    return 0;
  }
  *cp = c;
  return len;
}

/* Characters that change how the terminal lays out or directs text. */
static bool is_bidi_control(uint32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x200E || cp == 0x200F || cp == 0x061C;
}

int al__tui_sanitize(al_buf_t *out, const char *s, size_t n, bool one_line) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  size_t run = 0; /* start of a run of bytes that pass unchanged */
  int rc;

#define FLUSH_RUN()                                               \
  do {                                                            \
    if (i > run && (rc = al_buf_append(out, s + run, i - run))) { \
      return rc;                                                  \
    }                                                             \
  } while (0)

  while (i < n) {
    unsigned char c = p[i];
    uint32_t cp;
    size_t len;
    char esc[16];

    if (c >= 0x20 && c < 0x7f) {
      i++;
      continue;
    }
    if (c == '\n' || c == '\t') {
      if (!one_line) {
        i++;
        continue;
      }
      FLUSH_RUN();
      if ((rc = al_buf_append(out, " ", 1)) != 0) {
        return rc;
      }
      run = ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      FLUSH_RUN();
      esc[0] = '^';
      esc[1] = c == 0x7f ? '?' : (char)(c + 0x40);
      if ((rc = al_buf_append(out, esc, 2)) != 0) {
        return rc;
      }
      run = ++i;
      continue;
    }
    len = utf8_decode(p + i, n - i, &cp);
    if (len == 0) {
      FLUSH_RUN();
      if ((rc = al_buf_append(out, "\xEF\xBF\xBD", 3)) != 0) {
        return rc;
      }
      run = ++i;
      continue;
    }
    if ((cp >= 0x80 && cp <= 0x9F) || is_bidi_control(cp)) {
      FLUSH_RUN();
      snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
      if ((rc = al_buf_append_str(out, esc)) != 0) {
        return rc;
      }
      i += len;
      run = i;
      continue;
    }
    i += len;
  }
  FLUSH_RUN();
#undef FLUSH_RUN
  return 0;
}

static int cp_width(uint32_t cp) {
  int w = wcwidth((wchar_t)cp);

  /* Unknown to the C library (a non-UTF-8 locale): assume one column,
   * the common case, rather than zero (which would overdraw). */
  return w < 0 ? 1 : w;
}

size_t al__tui_fit(const char *s, size_t n, size_t max_width) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  size_t w = 0;

  while (i < n) {
    uint32_t cp;
    size_t len = utf8_decode(p + i, n - i, &cp);
    int cw;

    if (len == 0) {
      len = 1;
      cw = 1;
    } else {
      cw = cp_width(cp);
    }
    if (w + (size_t)cw > max_width) {
      break;
    }
    w += (size_t)cw;
    i += len;
  }
  return i;
}

size_t al__tui_width(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  size_t w = 0;

  while (i < n) {
    uint32_t cp;
    size_t len = utf8_decode(p + i, n - i, &cp);

    if (len == 0) {
      w++;
      i++;
      continue;
    }
    w += (size_t)cp_width(cp);
    i += len;
  }
  return w;
}

size_t al__tui_visible_width(const char *s, size_t n) {
  size_t w = 0;
  size_t i = 0;

  while (i < n) {
    const char *esc = memchr(s + i, '\x1b', n - i);
    size_t end = esc != NULL ? (size_t)(esc - s) : n;

    w += al__tui_width(s + i, end - i);
    if (esc == NULL) {
      break;
    }
    /* Skip our own CSI sequences: ESC [ params final-byte. */
    i = end + 1;
    if (i < n && s[i] == '[') {
      i++;
      while (i < n && !((unsigned char)s[i] >= 0x40 &&
                        (unsigned char)s[i] <= 0x7e)) {
        i++;
      }
      if (i < n) {
        i++;
      }
    }
  }
  return w;
}
