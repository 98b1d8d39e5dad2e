/* The safetensors codec of engine/safetensors.h: parsing a whole file held in
 * memory and converting its floating-point tensors to float (writing a new
 * file's header: safetensors_write.c). Plain C, no StarPU, no JSON library: the header is
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
#include "safetensors_util.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

/* ------------------------------------------------------------------ UTF-8 */
/* code point cp as UTF-8 at o; the bytes written */
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
    st_set_err(j->err, j->errlen, "%s%s (file offset %zu)", j->where, msg,
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
            const int k = st_utf8_len(j->p, q);
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
                  st_quoted(key, q));
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
                         "BOOL)", st_quoted(name, q));
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
            jfail(j, "the value of %s is %s, not a string", st_quoted(key, q), value_kind(j));
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
            snprintf(j->where, sizeof j->where, "tensor %s: ", st_quoted(key, q));
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
        st_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < ps->n; i++) names[i] = ps->t[i].t.name;
    const char *dup = st_first_duplicate(names, ps->n);
    if (dup) st_set_err(err, errlen, "tensor %s appears twice in the header", st_quoted(dup, q));
    for (size_t i = 0; !dup && i < ps->nmeta; i++) names[i] = ps->keys[i];
    const char *mdup = dup ? NULL : st_first_duplicate(names, ps->nmeta);
    if (mdup) st_set_err(err, errlen, "__metadata__: key %s appears twice", st_quoted(mdup, q));
    free(names);
    if (dup || mdup) return -1;

    for (size_t i = 0; i < ps->n; i++) {
        raw_tensor *r = &ps->t[i];
        st_tensor *t = &r->t;
        const size_t size = st_dtype_size(t->dtype);
        st_quoted(t->name, q);
        if (r->begin > r->end) {
            st_set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] are reversed (begin after "
                                 "end)", q, r->begin, r->end);
            return -1;
        }
        if (r->end > dlen) {
            st_set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] go past the end of the data "
                                 "section (%zu bytes; a truncated file?)", q, r->begin, r->end,
                    dlen);
            return -1;
        }
        shape_str(t->shape, t->ndim, sh);
        if (st_count_elements(t->shape, t->ndim, size, &t->numel) != 0) {
            st_set_err(err, errlen, "tensor %s: %s %s has too many elements to address", q,
                    st_dtype_name(t->dtype), sh);
            return -1;
        }
        t->nbytes = t->numel * size;
        if (r->end - r->begin != t->nbytes) {
            st_set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu] hold %zu bytes, but %s %s "
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
        st_quoted(r->t.name, q);
        if (!prev)
            st_set_err(err, errlen, "tensor %s: data_offsets [%zu, %zu]: the data section's first "
                                 "%zu bytes belong to no tensor (the first must start at 0)", q,
                    r->begin, r->end, r->begin);
        else if (r->begin > pos)
            st_set_err(err, errlen, "a gap of %zu bytes between tensor %s (data_offsets [%zu, %zu]) "
                                 "and tensor %s ([%zu, %zu])", r->begin - pos,
                    st_quoted(prev->t.name, q2), prev->begin, prev->end, q, r->begin, r->end);
        else
            st_set_err(err, errlen, "tensor %s (data_offsets [%zu, %zu]) overlaps tensor %s ([%zu, "
                                 "%zu])", q, r->begin, r->end, st_quoted(prev->t.name, q2),
                    prev->begin, prev->end);
        return -1;
    }
    if (pos != dlen) {
        if (ps->n)
            st_set_err(err, errlen, "%zu bytes after the last tensor (%s ends at byte %zu of the "
                                 "%zu-byte data section)", dlen - pos,
                    st_quoted(ps->t[ps->n - 1].t.name, q), pos, dlen);
        else
            st_set_err(err, errlen, "%zu bytes of data but no tensor in the header", dlen);
        return -1;
    }
    return 0;
}

int st_parse(const unsigned char *buf, size_t len, st_file *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (err && errlen) err[0] = 0;
    if (!buf || len < 8) {
        st_set_err(err, errlen, "a file of %zu bytes is too short for the 8-byte header length "
                             "(truncated?)", buf ? len : 0);
        return -1;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | buf[i];
    if (hl > MAX_HEADER) {
        st_set_err(err, errlen, "the header length %llu is absurd (more than %u bytes); not a "
                             "safetensors file?", (unsigned long long)hl, MAX_HEADER);
        return -1;
    }
    if (hl > len - 8) {
        st_set_err(err, errlen, "the header length %llu goes past the end of the file (%zu bytes "
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
            st_set_err(err, errlen, "out of memory");
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
