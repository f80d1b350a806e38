/* Session titles (issue 25): a chained {"rec":"title","title":...} record
 * appended to the transcript; the last one wins. The header is never
 * edited, so renaming continues the hash chain like any other record. */
#include <string.h>

#include "common/utf8.h"
#include "session/session.h"

const char *al__tx_title_check(const char *title) {
  size_t n;

  if (title == NULL || title[0] == '\0') {
    return "the title is empty";
  }
  n = strlen(title);
  if (n > AL_TX_TITLE_MAX) {
    return "the title is longer than 200 bytes";
  }
  if (!al__utf8_valid(title, n)) {
    return "the title is not valid UTF-8";
  }
  /* A title is printed by listings on a terminal: no escape sequences,
   * no line breaks, nothing a listing would have to clean up. */
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)title[i];

    if (ch < 0x20 || ch == 0x7f ||
        (ch == 0xc2 && i + 1 < n && (unsigned char)title[i + 1] >= 0x80 &&
         (unsigned char)title[i + 1] < 0xa0)) {
      return "the title has a control character";
    }
  }
  return NULL;
}

al_blob_t *al__tx_title_record(const char *title) {
  json_t *rec;
  al_blob_t *b;

  if (al__tx_title_check(title) != NULL) {
    return NULL;
  }
  rec = json_pack("{s:s, s:s}", "rec", "title", "title", title);
  b = rec != NULL ? al__tx_record(rec) : NULL;
  json_decref(rec);
  return b;
}

char *al__tx_scan_title(const char *p, size_t n) {
  const char *line = p;
  char *title = NULL;

  while (line < p + n) {
    const char *e = memchr(line, '\n', (size_t)(p + n - line));
    json_t *o;

    if (e == NULL) {
      break;
    }
    /* Only lines that can be title records are parsed. */
    if (memmem(line, (size_t)(e - line), "\"rec\":\"title\"", 13) != NULL &&
        (o = json_loadb(line, (size_t)(e - line), 0, NULL)) != NULL) {
      const char *t = json_string_value(json_object_get(o, "title"));

      if (t != NULL && al__tx_title_check(t) == NULL) {
        al_free(title);
        title = al_strdup(t);
      }
      json_decref(o);
    }
    line = e + 1;
  }
  return title;
}
