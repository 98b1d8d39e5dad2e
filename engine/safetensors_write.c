/* safetensors_write.c: the writing half of the safetensors codec of
 * engine/safetensors.h: a new file's header from its entries (names, dtypes,
 * shapes, data), checked as the reader checks a file (safetensors.c), and the
 * data section's size. Plain C, no StarPU. */
#include "safetensors.h"
#include "safetensors_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- writing */
size_t st_entry_bytes(const st_entry *e)
{
    size_t numel;
    if (!e || (unsigned)e->dtype >= ST_NDTYPES || e->ndim < 0 || e->ndim > ST_MAX_DIMS) return 0;
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] < 0) return 0;
    if (st_count_elements(e->shape, e->ndim, st_dtype_size(e->dtype), &numel) != 0) return 0;
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
        const int k = *p < 0x80 ? 1 : st_utf8_len(p, end);
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
        st_set_err(err, errlen, "st_header: invalid arguments (n %d, nmeta %d)", n, nmeta);
        return NULL;
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta_keys[i] || !meta_values[i]) {
            st_set_err(err, errlen, "metadata entry %d: a NULL %s", i, meta_keys[i] ? "value" : "key");
            return NULL;
        }
        if (check_utf8(meta_keys[i]) != 0 || check_utf8(meta_values[i]) != 0) {
            st_set_err(err, errlen, "metadata %s: the key or the value is not valid UTF-8",
                    st_quoted(meta_keys[i], q));
            return NULL;
        }
    }
    for (int i = 0; i < n; i++) {
        const st_entry *t = &e[i];
        if (!t->name || !t->name[0]) {
            st_set_err(err, errlen, "tensor %d: %s name", i, t->name ? "an empty" : "no");
            return NULL;
        }
        st_quoted(t->name, q);
        if (strcmp(t->name, "__metadata__") == 0) {
            st_set_err(err, errlen, "tensor %s: the name is reserved for the metadata", q);
            return NULL;
        }
        if (check_utf8(t->name) != 0) {
            st_set_err(err, errlen, "tensor %s: the name is not valid UTF-8", q);
            return NULL;
        }
        if ((unsigned)t->dtype >= ST_NDTYPES) {
            st_set_err(err, errlen, "tensor %s: invalid dtype %d", q, (int)t->dtype);
            return NULL;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            st_set_err(err, errlen, "tensor %s: %d dimensions (0 to %d)", q, t->ndim, ST_MAX_DIMS);
            return NULL;
        }
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0) {
                st_set_err(err, errlen, "tensor %s: negative dimension %lld", q,
                        (long long)t->shape[d]);
                return NULL;
            }
        size_t numel;
        if (st_count_elements(t->shape, t->ndim, st_dtype_size(t->dtype), &numel) != 0) {
            st_set_err(err, errlen, "tensor %s: too many elements to address", q);
            return NULL;
        }
        if (numel && !t->data) {
            st_set_err(err, errlen, "tensor %s: no data", q);
            return NULL;
        }
    }
    const char **names = malloc(((size_t)n + (size_t)nmeta + 1) * sizeof *names);
    if (!names) {
        st_set_err(err, errlen, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) names[i] = e[i].name;
    const char *dup = st_first_duplicate(names, (size_t)n);
    if (dup) st_set_err(err, errlen, "tensor %s: the name is given twice", st_quoted(dup, q));
    for (int i = 0; !dup && i < nmeta; i++) names[i] = meta_keys[i];
    const char *mdup = dup ? NULL : st_first_duplicate(names, (size_t)nmeta);
    if (mdup) st_set_err(err, errlen, "metadata key %s given twice", st_quoted(mdup, q));
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
            st_set_err(err, errlen, "tensor %s: the data section would pass SIZE_MAX bytes",
                    st_quoted(e[i].name, q));
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
        st_set_err(err, errlen, "out of memory (a header for %d tensors)", n);
        return NULL;
    }
    const uint64_t hl = b.len - 8;
    if (hl > MAX_HEADER) {
        free(b.p);
        st_set_err(err, errlen, "the header would take %llu bytes, more than a reader accepts (%u)",
                (unsigned long long)hl, MAX_HEADER);
        return NULL;
    }
    for (int i = 0; i < 8; i++) b.p[i] = (unsigned char)(hl >> 8 * i);
    *len = b.len;
    return b.p;
}
