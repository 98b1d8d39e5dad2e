/* safetensors_util.c: the helpers the safetensors reader and writer share
 * (safetensors_util.h). */
#include "safetensors_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ UTF-8 */
/* Length of the valid UTF-8 sequence at p (< end) that starts with a byte >=
 * 0x80, or 0 (a stray continuation byte, an overlong form, a surrogate, a code
 * point past U+10FFFF, a sequence cut short). */
int st_utf8_len(const unsigned char *p, const unsigned char *end)
{
    const unsigned c = p[0];
    int n;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* s as a string literal for a message (quotes, backslashes and control
 * characters escaped, bytes that are not UTF-8 as \xNN), cut at a character
 * boundary with "..." past about 80 bytes. */
const char *st_quoted(const char *s, char out[QLEN])
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    size_t o = 0;
    out[o++] = '"';
    while (p < end) {
        if (o > 80) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        const int k = *p < 0x80 ? 1 : st_utf8_len(p, end);
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p < 0x20 || *p == 0x7F) {
            o += (size_t)snprintf(out + o, QLEN - o, "\\u%04x", *p);
        } else if (!k) {
            o += (size_t)snprintf(out + o, QLEN - o, "\\x%02X", *p);
        } else {
            memcpy(out + o, p, (size_t)k);
            o += (size_t)k;
            p += k;
            continue;
        }
        p++;
    }
    out[o++] = '"';
    out[o] = 0;
    return out;
}

/* Elements of a shape (all dimensions >= 0), or -1 when the count or its
 * bytes (elements of `size` bytes) do not fit in a size_t. */
int st_count_elements(const int64_t *shape, int ndim, size_t size, size_t *numel)
{
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) n = 0;
    for (int i = 0; n && i < ndim; i++) {
        if ((uint64_t)shape[i] > SIZE_MAX || n > SIZE_MAX / (size_t)shape[i]) return -1;
        n *= (size_t)shape[i];
    }
    if (size && n > SIZE_MAX / size) return -1;
    *numel = n;
    return 0;
}

/* Sorted names: the first one that appears twice, or NULL. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *st_first_duplicate(const char **names, size_t n)
{
    if (n < 2) return NULL;
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}
