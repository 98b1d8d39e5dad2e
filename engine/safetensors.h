/* The safetensors format, in plain C (no StarPU): a file is
 *   u64 N (little-endian) | N bytes of JSON header | data section
 * where the header is one JSON object: "__metadata__" (optional) maps
 * strings to strings, every other key is a tensor name mapping to
 * {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, byte
 * offsets into the data section. The header is padded with spaces so that the
 * data starts at a multiple of 8. engine/checkpoint.c builds checkpoints and
 * exported models on it; tests/test_safetensors.c checks it (round trips, malformed
 * files). */
#ifndef HYFI_SAFETENSORS_H
#define HYFI_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

typedef enum st_dtype {
    ST_F32 = 0,
    ST_F64,
    ST_F16,
    ST_BF16,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
    ST_NDTYPES
} st_dtype;

/* "F32", "BF16", ...; and back (-1: unknown). Bytes per element. */
const char *st_dtype_name(st_dtype d);
int st_dtype_from_name(const char *s);
size_t st_dtype_size(st_dtype d);

/* A tensor of a parsed file. */
typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;                  /* 0: a scalar (one element) */
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    const unsigned char *data; /* into the parsed buffer; numel * size bytes */
    size_t nbytes;
} st_tensor;

typedef struct st_file {
    st_tensor *tensors;        /* in the order of their data offsets */
    int ntensors;
    char **meta_keys, **meta_values; /* "__metadata__", in file order */
    int nmeta;
    size_t header_len;         /* N: the JSON header's bytes (after the 8-byte length) */
} st_file;

/* Parse a whole file held in buf (len bytes; it must outlive *out). Strict:
 * a header length within the file, valid JSON (UTF-8 strings with escapes,
 * nesting of the format above only, no duplicate keys), known dtypes, shapes
 * of non-negative integers whose product times the dtype's size equals the
 * offsets' span, offsets that tile the data section exactly (no gaps, no
 * overlaps, nothing after the last). Returns 0, or -1 with a message in err
 * (what is wrong and where: "tensor \"x\": data_offsets [0, 12] hold 12 bytes,
 * but F32 (2, 3) needs 24"). */
int st_parse(const unsigned char *buf, size_t len, st_file *out, char *err, size_t errlen);
void st_free(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);

/* Convert t's elements (F32, F64, F16 or BF16) to float. Returns 0, or -1 for
 * another dtype. */
int st_to_f32(const st_tensor *t, float *out);

/* Writing. The tensors' data are laid out in the order given, contiguously. */
typedef struct st_entry {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;          /* numel * size bytes (little-endian) */
} st_entry;

/* The header: the 8-byte length followed by the JSON (metadata first, then
 * the tensors in the order given; no whitespace but the padding), padded with
 * spaces to a multiple of 8 bytes. Names and metadata are JSON-escaped.
 * Returns a malloc'd buffer (*len bytes) or NULL with a message in err (a
 * duplicate or empty name, a bad dtype, out of memory). */
unsigned char *st_header(const st_entry *e, int n, const char *const *meta_keys,
                         const char *const *meta_values, int nmeta, size_t *len, char *err,
                         size_t errlen);
/* Bytes of an entry's data. */
size_t st_entry_bytes(const st_entry *e);

#endif
