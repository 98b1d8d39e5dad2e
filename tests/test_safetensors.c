/* test_safetensors.c: the safetensors codec (engine/safetensors*.c), no StarPU.
 * (1) round trips through st_header and st_parse: every dtype, a 0-d I64
 *     scalar, zero-size tensors, names and metadata with quotes, backslashes,
 *     control characters and non-ASCII text; the exact bytes of a small header;
 * (2) a hand-written header as Python's json.dumps writes it (spaces after
 *     ':' and ',', \uXXXX escapes with surrogate pairs), with extra whitespace;
 * (3) malformed files, each refused (-1, nothing left in the st_file) with a
 *     message saying what is wrong; and what st_header refuses;
 * (4) conversions to float: F16 (normal, subnormal, inf, nan, -0), BF16, F64,
 *     F32, from unaligned data, and the dtypes that do not convert. */
#include "safetensors.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *xmalloc(size_t n)
{
    unsigned char *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", n);
        exit(99);
    }
    return p;
}

/* A whole file: st_header's bytes, then each entry's data. */
static unsigned char *write_file(const st_entry *e, int n, const char *const *mk,
                                 const char *const *mv, int nm, size_t *len)
{
    char err[256];
    size_t hl;
    unsigned char *h = st_header(e, n, mk, mv, nm, &hl, err, sizeof err);
    if (!h) {
        printf("st_header: %s\n", err);
        return NULL;
    }
    size_t total = hl;
    for (int i = 0; i < n; i++) total += st_entry_bytes(&e[i]);
    unsigned char *buf = xmalloc(total);
    memcpy(buf, h, hl);
    free(h);
    size_t off = hl;
    for (int i = 0; i < n; i++) {
        const size_t b = st_entry_bytes(&e[i]);
        if (b) memcpy(buf + off, e[i].data, b);
        off += b;
    }
    *len = total;
    return buf;
}

/* A file of a hand-written header (taken as it is, no padding) and data. */
static unsigned char *raw_file(const char *json, size_t jlen, const void *data, size_t dlen,
                               size_t *len)
{
    unsigned char *buf = xmalloc(8 + jlen + dlen);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)jlen >> 8 * i);
    memcpy(buf + 8, json, jlen);
    if (dlen) memcpy(buf + 8 + jlen, data, dlen);
    *len = 8 + jlen + dlen;
    return buf;
}

/* ------------------------------------------------------------ round trips */
static void test_round_trip(void)
{
    static const float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
    static const double f64[3] = {0.1, -1e300, 3.0};
    static const uint16_t f16[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001};
    static const uint16_t bf16[2] = {0x3F80, 0x4049};
    static const int64_t i64 = -1234567890123ll;
    static const int32_t i32[3] = {-2147483647 - 1, 0, 2147483647};
    static const int16_t i16[2] = {-32768, 32767};
    static const int8_t i8[4] = {-128, 127, 0, -1};
    static const uint8_t u8[3] = {0, 128, 255};
    static const uint8_t bools[2] = {1, 0};
    const st_entry e[] = {
        {"conv1.weight", ST_F32, 2, {2, 3}, f32},
        {"f64", ST_F64, 1, {3}, f64},
        {"empty (0, 3)", ST_F32, 2, {0, 3}, NULL},
        {"half", ST_F16, 2, {2, 2}, f16},
        {"schicht.ü/重み", ST_BF16, 1, {2}, bf16},
        {"step", ST_I64, 0, {0}, &i64},
        {"i32", ST_I32, 3, {1, 1, 3}, i32},
        {"quo\"te\\back\tslash", ST_I16, 1, {2}, i16},
        {"i8 🙂", ST_I8, 1, {4}, i8},
        {"u8", ST_U8, 1, {3}, u8},
        {"mask", ST_BOOL, 8, {1, 1, 1, 1, 1, 1, 1, 2}, bools},
        {"empty at the end", ST_U8, 1, {0}, NULL},
    };
    const int n = (int)(sizeof e / sizeof e[0]);
    const char *mk[] = {"format", "quote\"key", "ctl", "unicode ü", "empty", "\x7f"};
    const char *mv[] = {"pt", "back\\slash\\", "a\x01" "b\nc\td\x1f\"", "ñ 中 🙂", "", "del"};
    const int nm = (int)(sizeof mk / sizeof mk[0]);
    size_t len;
    unsigned char *buf = write_file(e, n, mk, mv, nm, &len);
    tu_check(!buf, "round trip: st_header");
    if (!buf) return;
    st_file f;
    char err[512];
    const int rc = st_parse(buf, len, &f, err, sizeof err);
    if (rc) printf("round trip: st_parse: %s\n", err);
    tu_check(rc != 0, "round trip: st_parse");
    if (rc) {
        free(buf);
        return;
    }
    tu_check(f.ntensors != n || f.nmeta != nm, "round trip: counts");
    tu_check((8 + f.header_len) % 8 != 0, "round trip: data at a multiple of 8");
    for (int i = 0; i < n && i < f.ntensors; i++) {
        const st_tensor *t = &f.tensors[i];
        char name[160];
        snprintf(name, sizeof name, "round trip: tensor %d (%s)", i, e[i].name);
        int bad = strcmp(t->name, e[i].name) != 0 || t->dtype != e[i].dtype ||
                  t->ndim != e[i].ndim || t->nbytes != st_entry_bytes(&e[i]) ||
                  t->numel * st_dtype_size(t->dtype) != t->nbytes ||
                  (t->nbytes && memcmp(t->data, e[i].data, t->nbytes) != 0) ||
                  st_find(&f, e[i].name) != t;
        for (int d = 0; d < t->ndim && d < ST_MAX_DIMS; d++) bad |= t->shape[d] != e[i].shape[d];
        tu_check(bad, name);
    }
    tu_check(f.tensors[5].ndim != 0 || f.tensors[5].numel != 1 || f.tensors[5].nbytes != 8,
             "round trip: the 0-d I64 scalar has one element");
    tu_check(f.tensors[2].numel != 0 || f.tensors[2].nbytes != 0, "round trip: zero-size");
    for (int i = 0; i < nm && i < f.nmeta; i++) {
        char name[96];
        snprintf(name, sizeof name, "round trip: metadata %d", i);
        tu_check(strcmp(f.meta_keys[i], mk[i]) != 0 || strcmp(f.meta_values[i], mv[i]) != 0 ||
                     strcmp(st_meta(&f, mk[i]), mv[i]) != 0,
                 name);
    }
    tu_check(st_find(&f, "nothing") != NULL || st_meta(&f, "nothing") != NULL,
             "round trip: st_find / st_meta of a missing name");
    st_free(&f);
    tu_check(f.tensors || f.ntensors || f.meta_keys || f.nmeta, "st_free clears the st_file");
    free(buf);

    /* no tensor and no metadata: "{}" and spaces */
    buf = write_file(NULL, 0, NULL, NULL, 0, &len);
    tu_check(!buf || len != 16 || memcmp(buf + 8, "{}      ", 8) != 0 ||
                 st_parse(buf, len, &f, err, sizeof err) != 0 || f.ntensors || f.nmeta,
             "round trip: an empty file");
    st_free(&f);
    free(buf);
}

/* The exact bytes: the length, compact JSON, spaces to a multiple of 8. */
static void test_exact_header(void)
{
    static const float x[6] = {0};
    const st_entry e[] = {{"x", ST_F32, 2, {2, 3}, x}, {"s", ST_BF16, 0, {0}, x}};
    const char *mk[] = {"a", "q\"\\\x01\n"};
    const char *mv[] = {"b", "é"};
    const char *want[2] = {
        "{\"__metadata__\":{\"a\":\"b\",\"q\\\"\\\\\\u0001\\u000a\":\"é\"},"
        "\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]}}",
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"s\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[24,26]}}"};
    for (int m = 0; m < 2; m++) {
        char err[256], name[64];
        size_t len;
        unsigned char *h = st_header(e, 2, m ? NULL : mk, m ? NULL : mv, m ? 0 : 2, &len, err,
                                     sizeof err);
        const size_t wl = strlen(want[m]), pad = (8 - wl % 8) % 8;
        uint64_t hl = 0;
        for (int i = 7; h && i >= 0; i--) hl = hl << 8 | h[i];
        int bad = !h || len != 8 + wl + pad || hl != wl + pad || memcmp(h + 8, want[m], wl) != 0;
        for (size_t i = 0; !bad && i < pad; i++) bad |= h[8 + wl + i] != ' ';
        snprintf(name, sizeof name, "exact header bytes (%s metadata)", m ? "without" : "with");
        if (bad && h) printf("got: %.*s\n", (int)(len - 8), (const char *)h + 8);
        tu_check(bad, name);
        free(h);
    }
}

/* ------------------------------------------------- hand-written header */
static void test_python_header(void)
{
    /* json.dumps(header) with ensure_ascii (Python's default), reindented */
    static const char json[] =
        "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" "
        "\\\\ \\/ \\b\\f\\n\\r\\t \\u00C9\"},\n"
        "  \"w\\u00fc\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},\n"
        "\t\"b\" :\r\n{ \"shape\" : [ ] , \"dtype\" : \"BF16\" , \"data_offsets\" : [ 8 , 10 ] } ,"
        "\"z\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [10, 10]}}   ";
    unsigned char data[10];
    const float w[2] = {0.5f, -3.0f};
    const uint16_t b = 0x4049;
    memcpy(data, w, 8);
    memcpy(data + 8, &b, 2);
    size_t len;
    unsigned char *buf = raw_file(json, strlen(json), data, sizeof data, &len);
    st_file f;
    char err[512];
    const int rc = st_parse(buf, len, &f, err, sizeof err);
    if (rc) printf("python header: %s\n", err);
    tu_check(rc != 0, "python header: st_parse");
    if (rc == 0) {
        const char *note = st_meta(&f, "note");
        tu_check(!note || strcmp(note, "café 😀 \"q\" \\ / \b\f\n\r\t É") != 0,
                 "python header: escapes in a metadata value");
        tu_check(!st_meta(&f, "format") || strcmp(st_meta(&f, "format"), "pt") != 0,
                 "python header: metadata");
        const st_tensor *tw = st_find(&f, "wü"), *tb = st_find(&f, "b"), *tz = st_find(&f, "z");
        float got[2] = {0, 0}, gb = 0;
        tu_check(!tw || tw->numel != 2 || st_to_f32(tw, got) != 0 || got[0] != 0.5f ||
                     got[1] != -3.0f,
                 "python header: F32 tensor with an escaped name");
        tu_check(!tb || tb->ndim != 0 || tb->numel != 1 || st_to_f32(tb, &gb) != 0 ||
                     gb != 3.140625f,
                 "python header: BF16 scalar (fields in another order, whitespace)");
        tu_check(!tz || tz->ndim != 2 || tz->numel != 0 || tz->nbytes != 0,
                 "python header: zero-size tensor at the end");
        tu_check(f.ntensors != 3 || f.tensors[0].name[0] != 'w' || f.tensors[1].name[0] != 'b',
                 "python header: tensors in the order of their offsets");
        st_free(&f);
    }
    free(buf);
}

/* --------------------------------------------------------- malformed files */
static void expect_fail(const char *what, const unsigned char *buf, size_t len, const char *want)
{
    st_file f;
    char err[512], name[160];
    memset(err, 0, sizeof err);
    const int rc = st_parse(buf, len, &f, err, sizeof err);
    printf("  %-34s -> %s\n", what, rc ? err : "(accepted)");
    snprintf(name, sizeof name, "malformed: %s (message with \"%s\")", what, want);
    tu_check(rc != -1 || !strstr(err, want) || f.tensors || f.ntensors || f.meta_keys || f.nmeta,
             name);
    if (rc == 0) st_free(&f);
}

static void expect_fail_json(const char *what, const char *json, size_t dlen, const char *want)
{
    unsigned char zeros[64] = {0};
    size_t len;
    unsigned char *buf = raw_file(json, strlen(json), zeros, dlen, &len);
    expect_fail(what, buf, len, want);
    free(buf);
}

#define T(name, fields) "\"" name "\":{" fields "}"
#define F32_(shape, offs) "\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs

static void test_malformed(void)
{
    static const float x[6] = {1, 2, 3, 4, 5, 6};
    const st_entry e[] = {{"x", ST_F32, 2, {2, 3}, x}};
    size_t len;
    unsigned char *good = write_file(e, 1, NULL, NULL, 0, &len);
    if (!good) {
        tu_check(1, "malformed: a good file to damage");
        return;
    }
    expect_fail("truncated to 5 bytes", good, 5, "too short");
    expect_fail("truncated in the header", good, 20, "past the end of the file");
    expect_fail("truncated in the data", good, len - 4, "tensor \"x\": data_offsets [0, 24] go "
                                                        "past the end of the data section");
    expect_fail("no file", NULL, 0, "too short");
    unsigned char *bad = xmalloc(len);
    memcpy(bad, good, len);
    bad[0] = 0xFF;
    bad[1] = 0x0F; /* 4095 */
    expect_fail("header length past the end", bad, len, "past the end of the file");
    memcpy(bad, "\0\0\0\0\0\x01\0\0", 8);
    expect_fail("absurd header length", bad, len, "absurd");
    free(bad);
    free(good);

    const char *one = "{" T("x", F32_("[2,3]", "[0,24]")) "}";
    {
        st_file f;
        size_t l;
        char err[256];
        unsigned char *b = raw_file(one, strlen(one), x, 24, &l);
        tu_check(st_parse(b, l, &f, err, sizeof err) != 0, "malformed: the control parses");
        st_free(&f);
        free(b);
    }
    expect_fail_json("empty header", "", 0, "not a JSON object");
    expect_fail_json("header not JSON", "hello, world", 0, "not a JSON object");
    expect_fail_json("header a JSON array", "[1, 2]", 0, "not a JSON object");
    expect_fail_json("header cut short", "{\"x\":{\"dtype\":\"F32\",\"sha", 0, "unterminated");
    expect_fail_json("header without its '}'", "{" T("x", F32_("[1]", "[0,4]")), 4,
                     "expected ',' or '}'");
    expect_fail_json("trailing comma", "{" T("x", F32_("[1]", "[0,4]")) ",}", 4,
                     "expected a tensor name");
    expect_fail_json("trailing garbage", "{" T("x", F32_("[1]", "[0,4]")) "}  x", 4,
                     "only spaces may follow");
    expect_fail_json("newline after the object", "{}\n", 0, "only spaces may follow");
    expect_fail_json("two objects", "{} {}", 0, "only spaces may follow");
    expect_fail_json("duplicate tensor name",
                     "{" T("a", F32_("[1]", "[0,4]")) "," T("a", F32_("[1]", "[4,8]")) "}", 8,
                     "tensor \"a\" appears twice");
    expect_fail_json("duplicate metadata key",
                     "{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}", 0,
                     "__metadata__: key \"k\" appears twice");
    expect_fail_json("duplicate __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                     "\"__metadata__\" given twice");
    expect_fail_json("non-string metadata value", "{\"__metadata__\":{\"k\":1}}", 0,
                     "__metadata__: the value of \"k\" is a number, not a string");
    expect_fail_json("nested metadata value", "{\"__metadata__\":{\"k\":{}}}", 0,
                     "is an object, not a string");
    expect_fail_json("metadata not an object", "{\"__metadata__\":[\"k\"]}", 0,
                     "expected an object of strings");
    expect_fail_json("unknown dtype",
                     "{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                     "tensor \"x\": unknown dtype \"F8_E4M3\"");
    expect_fail_json("dtype not a string",
                     "{\"x\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                     "tensor \"x\": \"dtype\" is a number, not a string");
    expect_fail_json("unknown field", "{" T("x", F32_("[1]", "[0,4]") ",\"extra\":1") "}", 4,
                     "tensor \"x\": unknown field \"extra\"");
    expect_fail_json("missing field", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                     "tensor \"x\": no field \"data_offsets\"");
    expect_fail_json("field twice", "{" T("x", F32_("[1]", "[0,4]") ",\"shape\":[1]") "}", 4,
                     "tensor \"x\": field \"shape\" given twice");
    expect_fail_json("tensor not an object", "{\"x\":[1]}", 0, "tensor \"x\": expected an object");
    expect_fail_json("shape/offsets size mismatch", "{" T("x", F32_("[2,3]", "[0,12]")) "}", 12,
                     "tensor \"x\": data_offsets [0, 12] hold 12 bytes, but F32 (2, 3) needs 24");
    expect_fail_json("gap between tensors",
                     "{" T("a", F32_("[1]", "[0,4]")) "," T("b", F32_("[1]", "[8,12]")) "}", 12,
                     "a gap of 4 bytes between tensor \"a\"");
    expect_fail_json("first tensor not at 0", "{" T("a", F32_("[1]", "[4,8]")) "}", 8,
                     "tensor \"a\": data_offsets [4, 8]: the data section's first 4 bytes");
    expect_fail_json("overlapping tensors",
                     "{" T("a", F32_("[2]", "[0,8]")) "," T("b", F32_("[1]", "[4,8]")) "}", 8,
                     "tensor \"b\" (data_offsets [4, 8]) overlaps tensor \"a\"");
    expect_fail_json("same offsets twice",
                     "{" T("a", F32_("[1]", "[0,4]")) "," T("b", F32_("[1]", "[0,4]")) "}", 4,
                     "overlaps");
    expect_fail_json("zero-size inside another",
                     "{" T("a", F32_("[2]", "[0,8]")) "," T("z", F32_("[0]", "[4,4]")) "}", 8,
                     "tensor \"z\" (data_offsets [4, 4]) overlaps tensor \"a\"");
    expect_fail_json("bytes after the last tensor", "{" T("a", F32_("[1]", "[0,4]")) "}", 8,
                     "4 bytes after the last tensor (\"a\"");
    expect_fail_json("data but no tensor", "{}", 3, "3 bytes of data but no tensor");
    expect_fail_json("negative shape", "{" T("x", F32_("[2,-1]", "[0,0]")) "}", 0,
                     "tensor \"x\": a dimension of \"shape\" is negative");
    expect_fail_json("offsets reversed", "{" T("x", F32_("[1]", "[4,0]")) "}", 4,
                     "tensor \"x\": data_offsets [4, 0] are reversed");
    expect_fail_json("negative offset", "{" T("x", F32_("[1]", "[-4,0]")) "}", 4, "negative");
    expect_fail_json("three offsets", "{" T("x", F32_("[1]", "[0,4,8]")) "}", 4,
                     "expected ']' after the 2 integers");
    expect_fail_json("one offset", "{" T("x", F32_("[1]", "[4]")) "}", 4, "expected ','");
    expect_fail_json("fractional dimension", "{" T("x", F32_("[1.0]", "[0,4]")) "}", 4,
                     "must be an integer");
    expect_fail_json("exponent in an offset", "{" T("x", F32_("[1]", "[0,4e0]")) "}", 4,
                     "must be an integer");
    expect_fail_json("leading zero", "{" T("x", F32_("[01]", "[0,4]")) "}", 4, "leading zero");
    expect_fail_json("dimension past INT64_MAX",
                     "{" T("x", F32_("[9223372036854775808]", "[0,4]")) "}", 4, "too large");
    expect_fail_json("9 dimensions", "{" T("x", F32_("[1,1,1,1,1,1,1,1,1]", "[0,4]")) "}", 4,
                     "more than 8 dimensions");
    expect_fail_json("element count overflow",
                     "{" T("x", F32_("[4294967296,4294967296,2]", "[0,0]")) "}", 0,
                     "tensor \"x\": F32 (4294967296, 4294967296, 2) has too many elements");
    expect_fail_json("lone high surrogate", "{\"\\ud83d\":{}}", 0, "high surrogate");
    expect_fail_json("high surrogate + BMP", "{\"\\ud83d\\u0041\":{}}", 0, "high surrogate");
    expect_fail_json("lone low surrogate", "{\"\\ude00\":{}}", 0, "low surrogate");
    expect_fail_json("\\u0000 in a name", "{\"a\\u0000b\":{}}", 0, "NUL");
    expect_fail_json("short \\u escape", "{\"\\u12\":{}}", 0, "4 hexadecimal digits");
    expect_fail_json("invalid escape", "{\"a\\x\":{}}", 0, "invalid escape");
    expect_fail_json("invalid UTF-8", "{\"a\xff\":{}}", 0, "invalid UTF-8");
    expect_fail_json("overlong UTF-8", "{\"\xc0\xaf\":{}}", 0, "invalid UTF-8");
    expect_fail_json("UTF-8 surrogate", "{\"\xed\xa0\x80\":{}}", 0, "invalid UTF-8");
    expect_fail_json("cut UTF-8", "{\"\xe4\xb8\":{}}", 0, "invalid UTF-8");
    expect_fail_json("raw control character", "{\"a\nb\":{}}", 0, "control character 0x0A");
    expect_fail_json("backslash at the end", "{\"a\\", 0, "unterminated");
}

/* What st_header refuses. */
static void test_header_errors(void)
{
    static const float x[2] = {1, 2};
    struct {
        const char *what;
        st_entry e[2];
        int n;
        const char *want;
    } cases[] = {
        {"duplicate name", {{"a", ST_F32, 1, {1}, x}, {"a", ST_F32, 1, {1}, x}}, 2,
         "tensor \"a\": the name is given twice"},
        {"empty name", {{"", ST_F32, 1, {1}, x}}, 1, "tensor 0: an empty name"},
        {"no name", {{NULL, ST_F32, 1, {1}, x}}, 1, "tensor 0: no name"},
        {"bad dtype", {{"a", (st_dtype)42, 1, {1}, x}}, 1, "tensor \"a\": invalid dtype 42"},
        {"negative dimension", {{"a", ST_F32, 2, {1, -2}, x}}, 1, "negative dimension -2"},
        {"9 dimensions", {{"a", ST_F32, 9, {1}, x}}, 1, "9 dimensions"},
        {"reserved name", {{"__metadata__", ST_F32, 1, {1}, x}}, 1, "reserved"},
        {"invalid UTF-8 name", {{"a\xff", ST_F32, 1, {1}, x}}, 1,
         "tensor \"a\\xFF\": the name is not valid UTF-8"},
        {"no data", {{"a", ST_F32, 1, {2}, NULL}}, 1, "no data"},
        {"overflow", {{"a", ST_F64, 2, {INT64_MAX, 4}, x}}, 1, "too many elements"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char err[256] = "", name[128];
        size_t len = 1;
        unsigned char *h = st_header(cases[c].e, cases[c].n, NULL, NULL, 0, &len, err, sizeof err);
        printf("  st_header: %-20s -> %s\n", cases[c].what, h ? "(accepted)" : err);
        snprintf(name, sizeof name, "st_header refuses: %s", cases[c].what);
        tu_check(h || len != 0 || !strstr(err, cases[c].want), name);
        free(h);
    }
    const st_entry ok = {"a", ST_F32, 1, {2}, x};
    const char *mk[] = {"k", "k"}, *mv[] = {"1", "2"};
    char err[256] = "";
    size_t len;
    unsigned char *h = st_header(&ok, 1, mk, mv, 2, &len, err, sizeof err);
    printf("  st_header: %-20s -> %s\n", "duplicate metadata", h ? "(accepted)" : err);
    tu_check(h || !strstr(err, "metadata key \"k\" given twice"),
             "st_header refuses: duplicate metadata key");
    free(h);
    tu_check(st_entry_bytes(&ok) != 8, "st_entry_bytes");

    /* a long name is cut short in messages */
    char longname[301];
    memset(longname, 'n', 300);
    longname[300] = 0;
    const st_entry lng = {longname, (st_dtype)-1, 1, {2}, x};
    h = st_header(&lng, 1, NULL, NULL, 0, &len, err, sizeof err);
    tu_check(h || !strstr(err, "nnn...\": invalid dtype -1") || strlen(err) > 120,
             "st_header: a long name is cut short in the message");
    free(h);
}

/* ------------------------------------------------------------ conversions */
static int same_float(float got, float want)
{
    if (isnan(want)) return isnan(got);
    return memcmp(&got, &want, sizeof got) == 0;
}

static void check_convert(const char *what, st_dtype d, const void *data, size_t n,
                          const float *want)
{
    /* from an odd address: the data of a tensor in a file need not be aligned */
    unsigned char *buf = xmalloc(n * st_dtype_size(d) + 1);
    memcpy(buf + 1, data, n * st_dtype_size(d));
    st_tensor t = {.name = (char *)what, .dtype = d, .ndim = 1, .shape = {(int64_t)n},
                   .numel = n, .data = buf + 1, .nbytes = n * st_dtype_size(d)};
    float got[16];
    int bad = st_to_f32(&t, got) != 0;
    for (size_t i = 0; !bad && i < n; i++) {
        if (!same_float(got[i], want[i])) {
            printf("%s: element %zu: got %a, want %a\n", what, i, (double)got[i], (double)want[i]);
            bad = 1;
        }
    }
    tu_check(bad, what);
    free(buf);
}

static void test_convert(void)
{
    static const uint16_t f16[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x8001, 0x03FF, 0x0400,
                                   0x7C00, 0xFC00, 0x7E00, 0x8000, 0x0000, 0x3555};
    const float f16_want[] = {1.0f, -2.5f, 65504.0f, 0x1p-24f, -0x1p-24f, 0x3FFp-24f, 0x1p-14f,
                              INFINITY, -INFINITY, NAN, -0.0f, 0.0f, 0x1.554p-2f};
    check_convert("F16 to float: 1, -2.5, 65504, subnormals, inf, nan, -0", ST_F16, f16, 13,
                  f16_want);
    static const uint16_t bf16[] = {0x3F80, 0x4049, 0xFF80, 0x7FC0, 0x0001};
    const float bf16_want[] = {1.0f, 3.140625f, -INFINITY, NAN, 0x1p-133f};
    check_convert("BF16 to float: 1, 3.140625, -inf, nan, subnormal", ST_BF16, bf16, 5, bf16_want);
    static const double f64[] = {0.1, -1e300, 1e300, 3.4028234663852886e38, -0.0, 1e-50};
    const float f64_want[] = {(float)0.1, -INFINITY, INFINITY, 3.4028234663852886e38f, -0.0f,
                              0.0f};
    check_convert("F64 to float: 0.1, +-1e300, FLT_MAX, -0, 1e-50", ST_F64, f64, 6, f64_want);
    static const float f32[] = {1.5f, -0.0f, INFINITY, 0x1p-149f};
    check_convert("F32 to float", ST_F32, f32, 4, f32);

    static const int32_t i32[1] = {1};
    for (int d = ST_I64; d < ST_NDTYPES; d++) {
        st_tensor t = {.name = "i", .dtype = (st_dtype)d, .ndim = 0, .numel = 1, .data =
                       (const unsigned char *)i32, .nbytes = st_dtype_size((st_dtype)d)};
        float out;
        char name[64];
        snprintf(name, sizeof name, "st_to_f32 refuses %s", st_dtype_name((st_dtype)d));
        tu_check(st_to_f32(&t, &out) != -1, name);
    }
    for (int d = 0; d < ST_NDTYPES; d++)
        tu_check(st_dtype_from_name(st_dtype_name((st_dtype)d)) != d || !st_dtype_size((st_dtype)d),
                 "dtype names and sizes");
    tu_check(st_dtype_from_name("f32") != -1 || st_dtype_from_name("U16") != -1,
             "unknown dtype names");
}

int main(void)
{
    test_round_trip();
    test_exact_header();
    test_python_header();
    printf("malformed files:\n");
    test_malformed();
    printf("st_header errors:\n");
    test_header_errors();
    test_convert();
    return tu_finish();
}
