/* The safetensors codec of engine/safetensors.h: parsing a whole file held in
 * memory, converting its floating-point tensors to float, and writing the
 * header of a new file. Plain C, no StarPU, no JSON library: the header is
 * read by a small strict recursive-descent parser of exactly the format's
 * nesting
 *   {"__metadata__": {"key": "value", ...},                        (optional)
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
 * JSON strings with every escape (\uXXXX, surrogate pairs decoded to UTF-8;
 * the result must be valid UTF-8 without NUL, as names are C strings), JSON
 * whitespace between tokens, only spaces (the padding) after the object.
 *
 * Besides the syntax, a parsed file must have: no key twice (tensor names,
 * "__metadata__", metadata keys, a tensor's fields), exactly the three fields
 * in a tensor entry, known dtypes, at most ST_MAX_DIMS non-negative dimensions
 * whose product times the element size (overflow checked) is the offsets'
 * span, and offsets that tile the data section exactly: sorted by begin, the
 * first starts at 0, each starts where the previous one ended and the last
 * ends at the end of the file (zero-size tensors anywhere on that path).
 * Messages name the tensor (or "__metadata__") and, for syntax errors, the
 * byte of the file.
 *
 * Byte order: the format is little-endian and so must the host be (the static
 * assertion below): st_tensor.data and st_entry.data are used as they are.
 * The 8-byte header length is read and written byte by byte, and elements are
 * read with memcpy (a tensor's data may start at any byte of the buffer).
 */
#include "safetensors.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c assumes a little-endian host, as the format is");
#else
#error "safetensors.c: cannot tell the host's byte order (a little-endian host is assumed)"
#endif

#define MAX_HEADER 100000000u /* bytes of JSON, as the reference implementation's limit */
#define QLEN 112              /* a quoted name in a message, at most */

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_NDTYPES] = {
    [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},
    [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1}, [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1},
};

const char *st_dtype_name(st_dtype d)
{
    return (unsigned)d < ST_NDTYPES ? DTYPES[d].name : "(invalid dtype)";
}

int st_dtype_from_name(const char *s)
{
    for (int d = 0; s && d < ST_NDTYPES; d++)
        if (strcmp(s, DTYPES[d].name) == 0) return d;
    return -1;
}

size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST_NDTYPES ? DTYPES[d].size : 0; }

static void set_err(char *err, size_t errlen, const char *fmt, ...)
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
static int utf8_len(const unsigned char *p, const unsigned char *end)
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

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* s as a string literal for a message (quotes, backslashes and control
 * characters escaped, bytes that are not UTF-8 as \xNN), cut at a character
 * boundary with "..." past about 80 bytes. */
static const char *quoted(const char *s, char out[QLEN])
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
        const int k = *p < 0x80 ? 1 : utf8_len(p, end);
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

/* "(2, 3)", "(5)", "()" */
static const char *shape_str(const int64_t *shape, int ndim, char out[256])
{
    size_t o = 0;
    out[o++] = '(';
    for (int i = 0; i < ndim; i++)
        o += (size_t)snprintf(out + o, 256 - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(out + o, 256 - o, ")");
    return out;
}

/* Elements of a shape (all dimensions >= 0), or -1 when the count or its
 * bytes (elements of `size` bytes) do not fit in a size_t. */
static int count_elements(const int64_t *shape, int ndim, size_t size, size_t *numel)
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

static const char *first_duplicate(const char **names, size_t n)
{
    if (n < 2) return NULL;
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) return names[i];
    return NULL;
}

/* ----------------------------------------------------------------- parsing */
typedef struct {
    st_tensor t;
    size_t begin, end; /* data_offsets */
    size_t order;      /* in the file */
} raw_tensor;

typedef struct {
    const unsigned char *s, *p, *end; /* the JSON header: start, cursor, end */
    char where[QLEN + 16];            /* "tensor \"x\": ", "__metadata__: " or "" */
    char *err;
    size_t errlen;
} jp;

/* "<where><message> (file offset N)"; returns -1. */
static int jfail(jp *j, const char *fmt, ...)
{
    if (!j->err || !j->errlen) return -1;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err(j->err, j->errlen, "%s%s (file offset %zu)", j->where, msg,
            (size_t)(j->p - j->s) + 8);
    return -1;
}

/* What the cursor is at, for messages. */
static const char *found(const jp *j, char out[32])
{
    if (j->p >= j->end) return "the end of the header";
    const unsigned c = *j->p;
    if (c >= 0x20 && c < 0x7F) snprintf(out, 32, "'%c'", c);
    else snprintf(out, 32, "byte 0x%02X", c);
    return out;
}

/* What kind of JSON value starts at the cursor, for messages. */
static const char *value_kind(const jp *j)
{
    if (j->p >= j->end) return "nothing";
    switch (*j->p) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    default: return (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) ? "a number" : "not JSON";
    }
}

static void skip_ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int expect(jp *j, char c, const char *what)
{
    char f[32];
    skip_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 0;
    }
    return jfail(j, "expected '%c' %s, found %s", c, what, found(j, f));
}

/* After a member or an element: 1 at ',', 0 at the closing character, else -1. */
static int next_or_close(jp *j, char close, const char *what)
{
    char f[32];
    skip_ws(j);
    if (j->p < j->end && (*j->p == ',' || *j->p == close)) return *j->p++ == ',';
    return jfail(j, "expected ',' or '%c' %s, found %s", close, what, found(j, f));
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *v)
{
    if (end - p < 4) return -1;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        const unsigned c = p[i];
        const int d = c >= '0' && c <= '9'   ? (int)(c - '0')
                      : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
                      : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10)
                                             : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (unsigned)d;
    }
    return 0;
}

/* A JSON string at the cursor, decoded into a malloc'd C string. */
static int parse_string(jp *j, const char *what, char **out)
{
    char f[32];
    *out = NULL;
    skip_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return jfail(j, "expected %s (a string), found %s", what, found(j, f));
    const unsigned char *open = j->p, *q = ++j->p;
    while (q < j->end && *q != '"')
        q += *q == '\\' && j->end - q >= 2 ? 2 : 1; /* an escape: two bytes at least */
    if (q >= j->end) {
        j->p = open;
        return jfail(j, "unterminated string");
    }
    char *o = malloc((size_t)(q - j->p) + 1);
    if (!o) return jfail(j, "out of memory");
    size_t n = 0;
    while (j->p < q) {
        const unsigned c = *j->p;
        if (c < 0x20) {
            free(o);
            return jfail(j, "control character 0x%02X in a string (it must be escaped)", c);
        }
        if (c >= 0x80) {
            const int k = utf8_len(j->p, q);
            if (!k) {
                free(o);
                return jfail(j, "invalid UTF-8 in a string");
            }
            memcpy(o + n, j->p, (size_t)k);
            n += (size_t)k;
            j->p += k;
            continue;
        }
        if (c != '\\') {
            o[n++] = (char)c;
            j->p++;
            continue;
        }
        const unsigned e = j->p[1];
        unsigned cp = 0;
        switch (e) {
        case '"': case '\\': case '/': cp = e; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(j->p + 2, q, &cp) != 0) {
                free(o);
                return jfail(j, "\\u must be followed by 4 hexadecimal digits");
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(o);
                return jfail(j, "\\u%04X: a low surrogate without a high one before it", cp);
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (q - j->p < 12 || j->p[6] != '\\' || j->p[7] != 'u' ||
                    hex4(j->p + 8, q, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
                    free(o);
                    return jfail(j, "\\u%04X: a high surrogate not followed by a low one (\\uDC00 "
                                    "to \\uDFFF)", cp);
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                j->p += 6;
            }
            if (cp == 0) {
                free(o);
                return jfail(j, "\\u0000 in a string (names and metadata cannot hold NUL)");
            }
            j->p += 4;
            break;
        default:
            free(o);
            return jfail(j, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7F ? e : '?');
        }
        n += put_utf8(o + n, cp);
        j->p += 2;
    }
    o[n] = 0;
    j->p = q + 1;
    *out = o;
    return 0;
}

/* A non-negative JSON integer at most max (no sign, fraction or exponent). */
static int parse_uint(jp *j, const char *what, uint64_t max, uint64_t *v)
{
    char f[32];
    skip_ws(j);
    if (j->p < j->end && *j->p == '-') return jfail(j, "%s is negative", what);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return jfail(j, "%s: expected a non-negative integer, found %s", what, found(j, f));
    if (*j->p == '0' && j->end - j->p > 1 && j->p[1] >= '0' && j->p[1] <= '9')
        return jfail(j, "%s: a number with a leading zero is not JSON", what);
    uint64_t x = 0;
    const unsigned char *start = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        const unsigned d = *j->p - '0';
        if (x > (max - d) / 10) {
            j->p = start;
            return jfail(j, "%s is too large (more than %llu)", what, (unsigned long long)max);
        }
        x = x * 10 + d;
        j->p++;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jfail(j, "%s must be an integer", what);
    *v = x;
    return 0;
}

/* {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, each field once. */
static int parse_tensor(jp *j, raw_tensor *r)
{
    enum { DTYPE, SHAPE, OFFSETS };
    static const char *const FIELDS[3] = {"dtype", "shape", "data_offsets"};
    int have[3] = {0, 0, 0};
    skip_ws(j);
    if (j->p >= j->end || *j->p != '{')
        return jfail(j, "expected an object {\"dtype\", \"shape\", \"data_offsets\"}, found %s",
                     value_kind(j));
    j->p++;
    skip_ws(j);
    int more = j->p < j->end && *j->p == '}' ? (j->p++, 0) : 1;
    while (more) {
        char *key;
        const unsigned char *at = (skip_ws(j), j->p);
        if (parse_string(j, "a field name", &key) != 0) return -1;
        int k = 0;
        while (k < 3 && strcmp(key, FIELDS[k]) != 0) k++;
        if (k == 3) {
            char q[QLEN];
            j->p = at;
            jfail(j, "unknown field %s (a tensor has \"dtype\", \"shape\" and \"data_offsets\")",
                  quoted(key, q));
            free(key);
            return -1;
        }
        free(key);
        if (have[k]) {
            j->p = at;
            return jfail(j, "field \"%s\" given twice", FIELDS[k]);
        }
        have[k] = 1;
        if (expect(j, ':', "after a field name") != 0) return -1;
        if (k == DTYPE) {
            char *name, q[QLEN];
            skip_ws(j);
            at = j->p;
            if (j->p < j->end && *j->p != '"')
                return jfail(j, "\"dtype\" is %s, not a string", value_kind(j));
            if (parse_string(j, "the dtype", &name) != 0) return -1;
            const int d = st_dtype_from_name(name);
            if (d < 0) {
                j->p = at;
                jfail(j, "unknown dtype %s (known: F32, F64, F16, BF16, I64, I32, I16, I8, U8, "
                         "BOOL)", quoted(name, q));
                free(name);
                return -1;
            }
            free(name);
            r->t.dtype = (st_dtype)d;
        } else if (k == SHAPE) {
            if (expect(j, '[', "to open \"shape\"") != 0) return -1;
            skip_ws(j);
            int go = j->p < j->end && *j->p == ']' ? (j->p++, 0) : 1;
            while (go) {
                uint64_t v;
                if (r->t.ndim == ST_MAX_DIMS)
                    return jfail(j, "\"shape\" has more than %d dimensions", ST_MAX_DIMS);
                if (parse_uint(j, "a dimension of \"shape\"", INT64_MAX, &v) != 0) return -1;
                r->t.shape[r->t.ndim++] = (int64_t)v;
                if ((go = next_or_close(j, ']', "in \"shape\"")) < 0) return -1;
            }
        } else {
            uint64_t v[2];
            if (expect(j, '[', "to open \"data_offsets\"") != 0) return -1;
            for (int i = 0; i < 2; i++) {
                if (i && expect(j, ',', "in \"data_offsets\" (it holds 2 integers)") != 0)
                    return -1;
                if (parse_uint(j, "an offset of \"data_offsets\"", SIZE_MAX, &v[i]) != 0)
                    return -1;
            }
            if (expect(j, ']', "after the 2 integers of \"data_offsets\"") != 0) return -1;
            r->begin = (size_t)v[0];
            r->end = (size_t)v[1];
        }
        if ((more = next_or_close(j, '}', "after a field of the tensor")) < 0) return -1;
    }
    for (int k = 0; k < 3; k++)
        if (!have[k]) return jfail(j, "no field \"%s\"", FIELDS[k]);
    return 0;
}

/* Growable arrays of the parse. */
typedef struct {
    raw_tensor *t;
    size_t n, cap;
    char **keys, **values;
    size_t nmeta, capkeys, capvalues;
} parsed;

/* An array of *cap elements with room for element n: p or its reallocation
 * (NULL: out of memory, or more than INT_MAX elements; p is kept). */
static void *grow(void *p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return p;
    const size_t c = *cap ? 2 * *cap : 16;
    if (c > (size_t)INT_MAX || c > SIZE_MAX / elem) return NULL;
    void *q = realloc(p, c * elem);
    if (q) *cap = c;
    return q;
}

/* {"key": "value", ...} */
static int parse_meta(jp *j, parsed *ps)
{
    skip_ws(j);
    if (j->p >= j->end || *j->p != '{')
        return jfail(j, "expected an object of strings, found %s", value_kind(j));
    j->p++;
    skip_ws(j);
    int more = j->p < j->end && *j->p == '}' ? (j->p++, 0) : 1;
    while (more) {
        char *key, *value, q[QLEN];
        if (parse_string(j, "a key", &key) != 0) return -1;
        if (expect(j, ':', "after a key") != 0) {
            free(key);
            return -1;
        }
        skip_ws(j);
        if (j->p >= j->end || *j->p != '"') {
            jfail(j, "the value of %s is %s, not a string", quoted(key, q), value_kind(j));
            free(key);
            return -1;
        }
        if (parse_string(j, "a value", &value) != 0) {
            free(key);
            return -1;
        }
        char **k = grow(ps->keys, &ps->capkeys, ps->nmeta, sizeof *ps->keys);
        if (k) ps->keys = k;
        char **v = k ? grow(ps->values, &ps->capvalues, ps->nmeta, sizeof *ps->values) : NULL;
        if (v) ps->values = v;
        if (!k || !v) {
            free(key);
            free(value);
            return jfail(j, "out of memory");
        }
        ps->keys[ps->nmeta] = key;
        ps->values[ps->nmeta++] = value;
        if ((more = next_or_close(j, '}', "after a metadata entry")) < 0) return -1;
    }
    return 0;
}

/* The whole header: {"__metadata__": {...}, "name": {...}, ...} then spaces. */
static int parse_header(jp *j, parsed *ps)
{
    char f[32], q[QLEN];
    int have_meta = 0;
    skip_ws(j);
    if (j->p >= j->end || *j->p != '{')
        return jfail(j, "the header is not a JSON object: expected '{', found %s", found(j, f));
    j->p++;
    skip_ws(j);
    int more = j->p < j->end && *j->p == '}' ? (j->p++, 0) : 1;
    while (more) {
        char *key;
        const unsigned char *at = (skip_ws(j), j->p);
        if (parse_string(j, "a tensor name or \"__metadata__\"", &key) != 0) return -1;
        if (expect(j, ':', "after a key") != 0) {
            free(key);
            return -1;
        }
        if (strcmp(key, "__metadata__") == 0) {
            free(key);
            if (have_meta) {
                j->p = at;
                return jfail(j, "\"__metadata__\" given twice");
            }
            have_meta = 1;
            snprintf(j->where, sizeof j->where, "__metadata__: ");
            if (parse_meta(j, ps) != 0) return -1;
        } else {
            raw_tensor *t = grow(ps->t, &ps->cap, ps->n, sizeof *ps->t);
            if (!t) {
                free(key);
                return jfail(j, "out of memory (or too many tensors)");
            }
            ps->t = t;
            t = &ps->t[ps->n];
            memset(t, 0, sizeof *t);
            t->t.name = key;
            t->order = ps->n++;
            snprintf(j->where, sizeof j->where, "tensor %s: ", quoted(key, q));
            if (parse_tensor(j, t) != 0) return -1;
        }
        j->where[0] = 0;
        if ((more = next_or_close(j, '}', "after an entry of the header")) < 0) return -1;
    }
    while (j->p < j->end && *j->p == ' ') j->p++;
    if (j->p < j->end)
        return jfail(j, "%s after the header's object (only spaces may follow it)", found(j, f));
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const raw_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sizes against shapes, offsets against the data section (dlen bytes). */
static int check_tensors(parsed *ps, size_t dlen, char *err, size_t errlen)
{
    char q[QLEN], q2[QLEN], sh[256];
    const char **names = malloc((ps->n + ps->nmeta + 1) * sizeof *names);
    if (!names) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < ps->n; i++) names[i] = ps->t[i].t.name;
    const char *dup = first_duplicate(names, ps->n);
    if (dup) set_err(err, errlen, "tensor %s appears twice in the header", quoted(dup, q));
    for (size_t i = 0; !dup && i < ps->nmeta; i++) names[i] = ps->keys[i];
    const char *mdup = dup ? NULL : first_duplicate(names, ps->nmeta);
    if (mdup) set_err(err, errlen, "__metadata__: key %s appears twice", quoted(mdup, q));
    free(names);
    if (dup || mdup) return -1;

    for (size_t i = 0; i < ps->n; i++) {
        raw_tensor *r = &ps->t[i];
        st_tensor *t = &r->t;
        const size_t size = st_dtype_size(t->dtype);
        quoted(t->name, q);
        if (r->begin > r->end) {
            set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] are reversed (begin after "
                                 "end)", q, r->begin, r->end);
            return -1;
        }
        if (r->end > dlen) {
            set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] go past the end of the data "
                                 "section (%zu bytes; a truncated file?)", q, r->begin, r->end,
                    dlen);
            return -1;
        }
        shape_str(t->shape, t->ndim, sh);
        if (count_elements(t->shape, t->ndim, size, &t->numel) != 0) {
            set_err(err, errlen, "tensor %s: %s %s has too many elements to address", q,
                    st_dtype_name(t->dtype), sh);
            return -1;
        }
        t->nbytes = t->numel * size;
        if (r->end - r->begin != t->nbytes) {
            set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] hold %zu bytes, but %s %s "
                                 "needs %zu", q, r->begin, r->end, r->end - r->begin,
                    st_dtype_name(t->dtype), sh, t->nbytes);
            return -1;
        }
    }

    if (ps->n) qsort(ps->t, ps->n, sizeof *ps->t, by_offset);
    size_t pos = 0;
    for (size_t i = 0; i < ps->n; i++) {
        const raw_tensor *r = &ps->t[i], *prev = i ? &ps->t[i - 1] : NULL;
        if (r->begin == pos) {
            pos = r->end;
            continue;
        }
        quoted(r->t.name, q);
        if (!prev)
            set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu]: the data section's first "
                                 "%zu bytes belong to no tensor (the first must start at 0)", q,
                    r->begin, r->end, r->begin);
        else if (r->begin > pos)
            set_err(err, errlen, "a gap of %zu bytes between tensor %s (data_offsets [%zu, %zu]) "
                                 "and tensor %s ([%zu, %zu])", r->begin - pos,
                    quoted(prev->t.name, q2), prev->begin, prev->end, q, r->begin, r->end);
        else
            set_err(err, errlen, "tensor %s (data_offsets [%zu, %zu]) overlaps tensor %s ([%zu, "
                                 "%zu])", q, r->begin, r->end, quoted(prev->t.name, q2),
                    prev->begin, prev->end);
        return -1;
    }
    if (pos != dlen) {
        if (ps->n)
            set_err(err, errlen, "%zu bytes after the last tensor (%s ends at byte %zu of the "
                                 "%zu-byte data section)", dlen - pos,
                    quoted(ps->t[ps->n - 1].t.name, q), pos, dlen);
        else
            set_err(err, errlen, "%zu bytes of data but no tensor in the header", dlen);
        return -1;
    }
    return 0;
}

int st_parse(const unsigned char *buf, size_t len, st_file *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    if (!buf || len < 8) {
        set_err(err, errlen, "a file of %zu bytes is too short for the 8-byte header length "
                             "(truncated?)", buf ? len : 0);
        return -1;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > MAX_HEADER) {
        set_err(err, errlen, "the header length %llu is absurd (more than %u bytes); not a "
                             "safetensors file?", (unsigned long long)hl, MAX_HEADER);
        return -1;
    }
    if (hl > len - 8) {
        set_err(err, errlen, "the header length %llu goes past the end of the file (%zu bytes "
                             "after the length; truncated?)", (unsigned long long)hl, len - 8);
        return -1;
    }
    jp j = {.s = buf + 8, .p = buf + 8, .end = buf + 8 + hl, .err = err, .errlen = errlen};
    parsed ps = {0};
    int rc = parse_header(&j, &ps);
    if (rc == 0) rc = check_tensors(&ps, len - 8 - (size_t)hl, err, errlen);
    if (rc == 0 && ps.n) {
        out->tensors = malloc(ps.n * sizeof *out->tensors);
        if (!out->tensors) {
            set_err(err, errlen, "out of memory");
            rc = -1;
        }
    }
    if (rc == 0) {
        const unsigned char *data = buf + 8 + hl;
        for (size_t i = 0; i < ps.n; i++) {
            out->tensors[i] = ps.t[i].t;
            out->tensors[i].data = data + ps.t[i].begin;
        }
        out->ntensors = (int)ps.n;
        out->meta_keys = ps.keys;
        out->meta_values = ps.values;
        out->nmeta = (int)ps.nmeta;
        out->header_len = (size_t)hl;
        free(ps.t);
        return 0;
    }
    for (size_t i = 0; i < ps.n; i++) free(ps.t[i].t.name);
    for (size_t i = 0; i < ps.nmeta; i++) {
        free(ps.keys[i]);
        free(ps.values[i]);
    }
    free(ps.t);
    free(ps.keys);
    free(ps.values);
    memset(out, 0, sizeof *out);
    return -1;
}

void st_free(st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->ntensors; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; f && name && i < f->ntensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    for (int i = 0; f && key && i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

/* ------------------------------------------------------------- conversion */
static float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1F, mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in float */
        const float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) bits = sign | 0x7F800000u | mant << 13; /* inf, nan (payload kept) */
    else bits = sign | (exp - 15 + 127) << 23 | mant << 13;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

int st_to_f32(const st_tensor *t, float *out)
{
    if (!t || (t->numel && (!t->data || !out))) return -1;
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case ST_F32:
        if (t->numel) memcpy(out, p, t->numel * sizeof(float));
        return 0;
    case ST_F64:
        for (size_t i = 0; i < t->numel; i++) {
            double d;
            memcpy(&d, p + 8 * i, sizeof d);
            /* past FLT_MAX and half its ulp: inf, as IEEE rounding gives (and C leaves
             * undefined) */
            out[i] = d >= 0x1.ffffffp127 ? INFINITY : d <= -0x1.ffffffp127 ? -INFINITY : (float)d;
        }
        return 0;
    case ST_F16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            out[i] = f16_to_f32(h);
        }
        return 0;
    case ST_BF16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            const uint32_t bits = (uint32_t)h << 16;
            memcpy(&out[i], &bits, sizeof bits);
        }
        return 0;
    default:
        return -1;
    }
}

/* ----------------------------------------------------------------- writing */
size_t st_entry_bytes(const st_entry *e)
{
    size_t numel;
    if (!e || (unsigned)e->dtype >= ST_NDTYPES || e->ndim < 0 || e->ndim > ST_MAX_DIMS) return 0;
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] < 0) return 0;
    if (count_elements(e->shape, e->ndim, st_dtype_size(e->dtype), &numel) != 0) return 0;
    return numel * st_dtype_size(e->dtype);
}

typedef struct {
    unsigned char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const void *s, size_t n)
{
    if (b->oom) return;
    if (n > b->cap - b->len) {
        size_t c = b->cap ? b->cap : 256;
        while (c - b->len < n && c <= SIZE_MAX / 2) c *= 2;
        unsigned char *q = c - b->len >= n ? realloc(b->p, c) : NULL;
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* s as a JSON string: '"' and '\' escaped, control characters as \u00XX. */
static void put_json_string(sbuf *b, const char *s)
{
    put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        const unsigned char c = (unsigned char)*p;
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            put(b, e, 2);
        } else if (c < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", c);
            put(b, e, 6);
        } else {
            put(b, p, 1);
        }
    }
    put(b, "\"", 1);
}

/* 0, or -1 where s is not valid UTF-8. */
static int check_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        const int k = *p < 0x80 ? 1 : utf8_len(p, end);
        if (!k) return -1;
        p += k;
    }
    return 0;
}

unsigned char *st_header(const st_entry *e, int n, const char *const *meta_keys,
                         const char *const *meta_values, int nmeta, size_t *len, char *err,
                         size_t errlen)
{
    char q[QLEN], num[64];
    if (len) *len = 0;
    if (err && errlen) err[0] = 0;
    if (n < 0 || nmeta < 0 || (n && !e) || (nmeta && (!meta_keys || !meta_values)) || !len) {
        set_err(err, errlen, "st_header: invalid arguments (n %d, nmeta %d)", n, nmeta);
        return NULL;
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta_keys[i] || !meta_values[i]) {
            set_err(err, errlen, "metadata entry %d: a NULL %s", i, meta_keys[i] ? "value" : "key");
            return NULL;
        }
        if (check_utf8(meta_keys[i]) != 0 || check_utf8(meta_values[i]) != 0) {
            set_err(err, errlen, "metadata %s: the key or the value is not valid UTF-8",
                    quoted(meta_keys[i], q));
            return NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        const st_entry *t = &e[i];
        if (!t->name || !t->name[0]) {
            set_err(err, errlen, "tensor %d: %s name", i, t->name ? "an empty" : "no");
            return NULL;
        }
        quoted(t->name, q);
        if (strcmp(t->name, "__metadata__") == 0) {
            set_err(err, errlen, "tensor %s: the name is reserved for the metadata", q);
            return NULL;
        }
        if (check_utf8(t->name) != 0) {
            set_err(err, errlen, "tensor %s: the name is not valid UTF-8", q);
            return NULL;
        }
        if ((unsigned)t->dtype >= ST_NDTYPES) {
            set_err(err, errlen, "tensor %s: invalid dtype %d", q, (int)t->dtype);
            return NULL;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            set_err(err, errlen, "tensor %s: %d dimensions (0 to %d)", q, t->ndim, ST_MAX_DIMS);
            return NULL;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                set_err(err, errlen, "tensor %s: negative dimension %lld", q,
                        (long long)t->shape[d]);
                return NULL;
            }
        size_t numel;
        if (count_elements(t->shape, t->ndim, st_dtype_size(t->dtype), &numel) != 0) {
            set_err(err, errlen, "tensor %s: too many elements to address", q);
            return NULL;
        }
        if (numel && !t->data) {
            set_err(err, errlen, "tensor %s: no data", q);
            return NULL;
        }
    }
    const char **names = malloc(((size_t)n + (size_t)nmeta + 1) * sizeof *names);
    if (!names) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) names[i] = e[i].name;
    const char *dup = first_duplicate(names, (size_t)n);
    if (dup) set_err(err, errlen, "tensor %s: the name is given twice", quoted(dup, q));
    for (int i = 0; !dup && i < nmeta; i++) names[i] = meta_keys[i];
    const char *mdup = dup ? NULL : first_duplicate(names, (size_t)nmeta);
    if (mdup) set_err(err, errlen, "metadata key %s given twice", quoted(mdup, q));
    free(names);
    if (dup || mdup) return NULL;

    sbuf b = {0};
    put(&b, "\0\0\0\0\0\0\0\0{", 9); /* the length, filled in at the end */
    if (nmeta) {
        puts_(&b, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) puts_(&b, ",");
            put_json_string(&b, meta_keys[i]);
            puts_(&b, ":");
            put_json_string(&b, meta_values[i]);
        }
        puts_(&b, "}");
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t bytes = st_entry_bytes(&e[i]);
        if (off > SIZE_MAX - bytes) {
            set_err(err, errlen, "tensor %s: the data section would pass SIZE_MAX bytes",
                    quoted(e[i].name, q));
            free(b.p);
            return NULL;
        }
        if (i || nmeta) puts_(&b, ",");
        put_json_string(&b, e[i].name);
        puts_(&b, ":{\"dtype\":\"");
        puts_(&b, st_dtype_name(e[i].dtype));
        puts_(&b, "\",\"shape\":[");
        for (int d = 0; d < e[i].ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
            puts_(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        puts_(&b, num);
        off += bytes;
    }
    puts_(&b, "}");
    while (!b.oom && b.len % 8) put(&b, " ", 1);
    if (b.oom) {
        free(b.p);
        set_err(err, errlen, "out of memory (a header for %d tensors)", n);
        return NULL;
    }
    const uint64_t hl = b.len - 8;
    if (hl > MAX_HEADER) {
        free(b.p);
        set_err(err, errlen, "the header would take %llu bytes, more than a reader accepts (%u)",
                (unsigned long long)hl, MAX_HEADER);
        return NULL;
    }
    for (int i = 0; i < 8; i++) b.p[i] = (unsigned char)(hl >> 8 * i);
    *len = b.len;
    return b.p;
}
