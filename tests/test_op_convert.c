/* test_op_convert.c: bfloat16 rounding (ops/convert_ref.c, convert_cpu.c).
 * (1) the reference against its definition, checked in double precision on
 * random floats of every magnitude: the result has its low 16 bits zero, is
 * one of the two bf16 neighbours of x, the nearer one, and on a tie the one
 * with an even last bit; (2) special values: ±0, ±inf, NaNs (stay NaN, with
 * or without payload bits in the low half), the largest finite float (rounds
 * to inf), the smallest subnormal (rounds to 0), exact ties; (3) the CPU paths
 * (in place, copying, and serial) bitwise equal to the reference on 1, 17
 * and 1000003 values (the vector loop, its tail, its OpenMP split); (4) the
 * element-wise kernels on bf16 storage bitwise the float32 ones on the
 * widened buffers, rounded; (5) batch norm on bf16 storage (plain and
 * blocked layouts, fused ReLU, accumulation) bitwise the same; (6) pooling
 * (max, average, global average; forward, backward with and without
 * accumulation; plain and blocked) on bf16 storage bitwise the same. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A random float of any exponent and sign (NaN and inf excluded). */
static float random_float(uint64_t *seed)
{
    for (;;) {
        const uint32_t u = (uint32_t)tu_next(seed);
        if ((u & 0x7f800000u) != 0x7f800000u) return from_bits(u);
    }
}

/* r == bf16 rounding of x, by the definition: 0 when it holds. */
static int check_definition(float x, float r)
{
    const uint32_t u = bits(x), ur = bits(r);
    if (ur & 0xffffu) return 1;                       /* not a bf16 value */
    const uint32_t lo = u & 0xffff0000u;              /* truncation toward zero */
    const uint32_t hi = lo + 0x10000u;                /* next bf16 away from zero */
    if (ur != lo && ur != hi) return 2;               /* not a neighbour */
    const double dx = x, dlo = from_bits(lo), dhi = (hi & 0x7f800000u) == 0x7f800000u &&
                                                    (hi & 0x007fffffu) == 0
                                                        ? (x > 0 ? HUGE_VAL : -HUGE_VAL)
                                                        : (double)from_bits(hi);
    const double elo = fabs(dx - dlo), ehi = isinf(dhi) ? HUGE_VAL : fabs(dx - dhi);
    if (elo < ehi) return ur != lo ? 3 : 0;
    if (ehi < elo) return ur != hi ? 4 : 0;
    /* a tie: the even one (last kept bit 0) */
    return ((ur >> 16) & 1u) ? 5 : 0;
}

static void test_definition(uint64_t *seed)
{
    int bad = 0, n = 200000;
    for (int i = 0; i < n && bad < 5; i++) {
        const float x = random_float(seed), r = hyfi_bf16_round1(x);
        const int why = check_definition(x, r);
        if (why && !(isinf(r) && fabsf(x) > 3.38953139e38f)) {
            printf("  x = %a (0x%08x): got %a (0x%08x), rule %d broken\n", (double)x, bits(x),
                   (double)r, bits(r), why);
            bad++;
        }
    }
    printf("reference: %d random floats against the definition: %s\n", n, bad ? "FAIL" : "ok");
    tu_check(bad, "bf16 rounding: the definition");
}

static void test_specials(void)
{
    struct {
        uint32_t in, want;
        const char *what;
    } cases[] = {
        {0x00000000u, 0x00000000u, "+0"},
        {0x80000000u, 0x80000000u, "-0"},
        {0x7f800000u, 0x7f800000u, "+inf"},
        {0xff800000u, 0xff800000u, "-inf"},
        {0x7fc00000u, 0x7fc00000u, "quiet NaN"},
        {0x7f800001u, 0x7fc00000u, "signalling NaN, payload in the low half only"},
        {0xffffffffu, 0xffff0000u, "negative NaN, all payload bits"},
        {0x7f7fffffu, 0x7f800000u, "largest finite float (rounds up to inf)"},
        {0x00000001u, 0x00000000u, "smallest subnormal"},
        {0x3f808000u, 0x3f800000u, "1 + 2^-8: a tie, down to the even 1"},
        {0x3f818000u, 0x3f820000u, "1 + 3 * 2^-8: a tie, up to the even neighbour"},
        {0x3f808001u, 0x3f810000u, "just past a tie: up"},
        {0x3f807fffu, 0x3f800000u, "just below a tie: down"},
        {0x3f800000u, 0x3f800000u, "1 (exact)"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const uint32_t got = bits(hyfi_bf16_round1(from_bits(cases[i].in)));
        float v = from_bits(cases[i].in);
        hyfi_bf16_round_cpu(&v, 1);
        if (got != cases[i].want || bits(v) != cases[i].want) {
            printf("  %s: 0x%08x -> ref 0x%08x, cpu 0x%08x, want 0x%08x\n", cases[i].what,
                   cases[i].in, got, bits(v), cases[i].want);
            bad++;
        }
    }
    printf("special values: %zu cases: %s\n", sizeof cases / sizeof *cases, bad ? "FAIL" : "ok");
    tu_check(bad, "bf16 rounding: special values");
}

static void test_cpu_vs_ref(size_t n, uint64_t *seed)
{
    float *x = tu_alloc(n), *ref = tu_alloc(n), *cpu = tu_alloc(n), *copy = tu_alloc(n);
    float *ser = tu_alloc(n);
    for (size_t i = 0; i < n; i++) x[i] = random_float(seed);
    if (n > 3) x[1] = from_bits(0x7f800001u), x[2] = from_bits(0x3f808000u);
    memcpy(ref, x, n * sizeof *x);
    memcpy(cpu, x, n * sizeof *x);
    memcpy(ser, x, n * sizeof *x);
    hyfi_bf16_round_ref(ref, n);
    tu_check(hyfi_bf16_round_serial(ser, n) != 0, "bf16_round_serial rc");
    tu_check(hyfi_bf16_round_cpu(cpu, n) != 0, "bf16_round_cpu rc");
    tu_check(hyfi_bf16_round_copy_cpu(copy, x, n) != 0, "bf16_round_copy_cpu rc");
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += bits(ref[i]) != bits(cpu[i]) || bits(ref[i]) != bits(copy[i]) ||
                bits(ref[i]) != bits(ser[i]);
    printf("cpu vs ref, n=%zu: %zu values differ (in place, copying, serial)\n", n, diff);
    char name[64];
    snprintf(name, sizeof name, "bf16_round cpu/ref n=%zu", n);
    tu_check(diff != 0, name);
    free(x);
    free(ref);
    free(cpu);
    free(copy);
    free(ser);
}

/* The element-wise kernels on bf16 storage bitwise the float32 kernels on
 * the widened buffers, rounded (what staging gives). */
static void test_eltwise_bf16(size_t n, uint64_t *seed)
{
    float *a = tu_alloc(n), *b = tu_alloc(n), *c = tu_alloc(n), *want = tu_alloc(n);
    float *got = tu_alloc(n);
    uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2), *hc = malloc(n * 2);
    tu_fill(a, n, seed, -1, 1), tu_fill(b, n, seed, -1, 1), tu_fill(c, n, seed, -1, 1);
    hyfi_f32_to_bf16_ref(ha, a, n), hyfi_f32_to_bf16_ref(hb, b, n), hyfi_f32_to_bf16_ref(hc, c, n);
    hyfi_bf16_to_f32_ref(a, ha, n), hyfi_bf16_to_f32_ref(b, hb, n), hyfi_bf16_to_f32_ref(c, hc, n);
    int bad = 0;
#define SAME(what)                                                                               \
    do {                                                                                         \
        hyfi_bf16_round_ref(want, n);                                                            \
        hyfi_bf16_to_f32_ref(got, hc, n);                                                        \
        size_t d = 0;                                                                            \
        for (size_t i = 0; i < n; i++) d += bits(got[i]) != bits(want[i]);                     \
        if (d) printf("  %s: %zu values differ\n", what, d);                                     \
        bad += d != 0;                                                                           \
    } while (0)
    hyfi_relu_forward_cpu(want, a, n);
    hyfi_relu_forward_bf16(hc, ha, n);
    SAME("relu forward");
    hyfi_add_forward_cpu(want, a, b, n);
    hyfi_add_forward_bf16(hc, ha, hb, n);
    SAME("add");
    for (int acc = 0; acc < 2; acc++) {
        hyfi_f32_to_bf16_ref(hc, c, n);
        memcpy(want, c, n * sizeof *c);
        hyfi_relu_backward_cpu(want, a, b, n, acc);
        hyfi_relu_backward_bf16(hc, ha, hb, n, acc);
        SAME(acc ? "relu backward (acc)" : "relu backward");
        hyfi_f32_to_bf16_ref(hc, c, n);
        memcpy(want, c, n * sizeof *c);
        hyfi_accumulate_cpu(want, a, n, acc);
        hyfi_accumulate_bf16(hc, ha, n, acc);
        SAME(acc ? "accumulate (acc)" : "accumulate");
        /* accumulate_n over three sources: the staged chain */
        hyfi_f32_to_bf16_ref(hc, c, n);
        memcpy(want, c, n * sizeof *c);
        hyfi_accumulate_cpu(want, a, n, acc);
        hyfi_accumulate_cpu(want, b, n, 1);
        hyfi_accumulate_cpu(want, a, n, 1);
        const uint16_t *srcs[3] = {ha, hb, ha};
        hyfi_accumulate_n_bf16(hc, srcs, 3, n, acc);
        SAME(acc ? "accumulate_n (acc)" : "accumulate_n");
    }
    hyfi_fill_cpu(want, 0.3f, n);
    hyfi_fill_bf16(hc, 0.3f, n);
    SAME("fill");
#undef SAME
    printf("element-wise kernels on bf16 storage, n=%zu: %s\n", n, bad ? "FAIL" : "bitwise");
    char name[64];
    snprintf(name, sizeof name, "eltwise bf16 n=%zu", n);
    tu_check(bad, name);
    free(a), free(b), free(c), free(want), free(got), free(ha), free(hb), free(hc);
}

/* Concatenation on bf16 storage against the float32 kernels on widened
 * copies: the forward into its channels of y (the others untouched), the
 * backward overwriting and accumulating; bitwise. */
static void test_concat_bf16(uint64_t *seed)
{
    const hyfi_concat_args a = {.n = 3, .hw = 37, .c_part = 5, .c_offset = 4, .c_total = 12};
    const size_t ny = (size_t)a.n * a.c_total * a.hw, nx = (size_t)a.n * a.c_part * a.hw;
    float *y = tu_alloc(ny), *x = tu_alloc(nx), *w = tu_alloc(ny), *g = tu_alloc(ny);
    uint16_t *hy = malloc(ny * 2), *hx = malloc(nx * 2);
    int bad = 0;
    tu_fill(y, ny, seed, -1, 1), tu_fill(x, nx, seed, -1, 1);
    hyfi_f32_to_bf16_ref(hy, y, ny), hyfi_f32_to_bf16_ref(hx, x, nx);
    hyfi_bf16_to_f32_ref(y, hy, ny), hyfi_bf16_to_f32_ref(x, hx, nx);
    hyfi_concat_forward_cpu(y, x, &a);
    hyfi_concat_forward_bf16(hy, hx, &a);
    hyfi_bf16_to_f32_ref(g, hy, ny);
    for (size_t i = 0; i < ny; i++) bad += bits(g[i]) != bits(y[i]);
    for (int acc = 0; acc < 2; acc++) {
        tu_fill(w, nx, seed, -1, 1);
        hyfi_f32_to_bf16_ref(hx, w, nx);
        hyfi_bf16_to_f32_ref(w, hx, nx);
        hyfi_concat_backward_cpu(w, y, &a, acc);
        hyfi_bf16_round_ref(w, nx);
        hyfi_concat_backward_bf16(hx, hy, &a, acc);
        hyfi_bf16_to_f32_ref(g, hx, nx);
        for (size_t i = 0; i < nx; i++) bad += bits(g[i]) != bits(w[i]);
    }
    printf("concatenation on bf16 storage: %s\n", bad ? "FAIL" : "bitwise");
    tu_check(bad, "concat bf16");
    free(y), free(x), free(w), free(g), free(hy), free(hx);
}

#if HYFI_TEST_ISA
/* The element-wise bf16 files' two builds (ops/isa.h), called by name: the
 * same bits on random values with NaNs, infinities, subnormals and ties. */
int hyfi_f32_to_bf16_cpu_base(uint16_t *out, const float *in, size_t count);
int hyfi_f32_to_bf16_cpu_v4(uint16_t *out, const float *in, size_t count);
int hyfi_bf16_round_copy_cpu_base(float *out, const float *x, size_t count);
int hyfi_bf16_round_copy_cpu_v4(float *out, const float *x, size_t count);
int hyfi_relu_backward_bf16_base(uint16_t *dx, const uint16_t *dy, const uint16_t *y,
                                 size_t count, int acc);
int hyfi_relu_backward_bf16_v4(uint16_t *dx, const uint16_t *dy, const uint16_t *y,
                               size_t count, int acc);
int hyfi_accumulate_f32_bf16_base(uint16_t *dst, const float *src, size_t count);
int hyfi_accumulate_f32_bf16_v4(uint16_t *dst, const float *src, size_t count);

static void test_isa_builds(uint64_t *seed)
{
    if (!hyfi_isa_avx512()) {
        printf("AVX-512 builds: this CPU does not run them (baseline only)\n");
        return;
    }
    const size_t n = 300007;
    float *a = tu_alloc(n), *b = tu_alloc(n), *fa = tu_alloc(n), *fb = tu_alloc(n);
    uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2), *hc = malloc(n * 2), *hd = malloc(n * 2);
    for (size_t i = 0; i < n; i++) a[i] = random_float(seed);
    tu_fill(b, n, seed, -1, 1);
    size_t d = 0;
    hyfi_f32_to_bf16_cpu_base(ha, a, n), hyfi_f32_to_bf16_cpu_v4(hb, a, n);
    for (size_t i = 0; i < n; i++) d += ha[i] != hb[i];
    hyfi_bf16_round_copy_cpu_base(fa, a, n), hyfi_bf16_round_copy_cpu_v4(fb, a, n);
    for (size_t i = 0; i < n; i++) d += bits(fa[i]) != bits(fb[i]);
    hyfi_f32_to_bf16_cpu_base(hc, b, n);
    memcpy(hd, hc, n * 2);
    hyfi_relu_backward_bf16_base(hc, ha, hb, n, 1), hyfi_relu_backward_bf16_v4(hd, ha, hb, n, 1);
    for (size_t i = 0; i < n; i++) d += hc[i] != hd[i];
    hyfi_accumulate_f32_bf16_base(hc, a, n), hyfi_accumulate_f32_bf16_v4(hd, a, n);
    for (size_t i = 0; i < n; i++) d += hc[i] != hd[i];
    printf("AVX-512 and baseline builds: %zu values differ\n", d);
    tu_check(d != 0, "bf16 element-wise kernels: AVX-512 build = baseline build");
    free(a), free(b), free(fa), free(fb), free(ha), free(hb), free(hc), free(hd);
}
#endif

/* (5) y/dx of the bf16 kernels against the float32 kernels on widened
 * copies with y/dx rounded; statistics and parameter gradients bitwise. */
static size_t bn_diff(const float *want, const float *got, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += bits(want[i]) != bits(got[i]);
    return d;
}

static void test_batchnorm_bf16(int N, int C, int H, int W, int blk, uint64_t *seed)
{
    const size_t n = (size_t)N * C * H * W, c = (size_t)C;
    float *x = malloc(n * sizeof *x), *dy = malloc(n * sizeof *dy), *y = malloc(n * sizeof *y);
    float *dx = malloc(n * sizeof *dx), *got = malloc(n * sizeof *got), *g2 = malloc(n * sizeof *g2);
    uint16_t *hx = malloc(n * 2), *hdy = malloc(n * 2), *hy = malloc(n * 2), *hdx = malloc(n * 2);
    float *p = calloc(16 * c, sizeof *p); /* gamma beta mean var rm rv dg db, twice */
    float *gamma = p, *beta = p + c, *mean = p + 2 * c, *var = p + 3 * c, *rm = p + 4 * c,
          *rv = p + 5 * c, *dg = p + 6 * c, *db = p + 7 * c;
    float *q = p + 8 * c; /* the bf16 kernels' copies of mean .. db at q + 2c .. q + 7c */
    for (size_t i = 0; i < n; i++) {
        x[i] = tu_uniform(seed, 1.0f, 5.0f); /* a mean far from 0 */
        dy[i] = tu_uniform(seed, -1.0f, 1.0f);
        dx[i] = tu_uniform(seed, -1.0f, 1.0f);
    }
    hyfi_f32_to_bf16_ref(hx, x, n), hyfi_f32_to_bf16_ref(hdy, dy, n);
    hyfi_bf16_to_f32_ref(x, hx, n), hyfi_bf16_to_f32_ref(dy, hdy, n);
    for (size_t i = 0; i < c; i++) gamma[i] = tu_uniform(seed, 0.5f, 1.5f), beta[i] = tu_uniform(seed, -1.0f, 1.0f);
    int bad = 0;
    for (int relu = 0; relu < 2; relu++) {
        hyfi_batchnorm_args a = {N, C, H, W, 1e-5f, 0.1f, relu};
        for (size_t i = 0; i < c; i++) rm[i] = q[4 * c + i] = 0.1f, rv[i] = q[5 * c + i] = 1.0f;
        hyfi_batchnorm_forward_train_cpu(y, mean, var, rm, rv, x, gamma, beta, &a, blk);
        hyfi_bf16_round_ref(y, n);
        hyfi_batchnorm_forward_train_bf16(hy, q + 2 * c, q + 3 * c, q + 4 * c, q + 5 * c, hx,
                                          gamma, beta, &a, blk);
        hyfi_bf16_to_f32_ref(got, hy, n);
        size_t d = bn_diff(y, got, n) + bn_diff(mean, q + 2 * c, 4 * c);
        hyfi_batchnorm_forward_eval_cpu(y, x, gamma, beta, rm, rv, &a, blk);
        hyfi_bf16_round_ref(y, n);
        hyfi_batchnorm_forward_eval_bf16(hy, hx, gamma, beta, rm, rv, &a, blk);
        hyfi_bf16_to_f32_ref(got, hy, n);
        d += bn_diff(y, got, n);
        /* the training forward's output again: the fused backward reads it */
        hyfi_batchnorm_forward_train_bf16(hy, q + 2 * c, q + 3 * c, q + 4 * c, q + 5 * c, hx,
                                          gamma, beta, &a, blk);
        hyfi_bf16_to_f32_ref(y, hy, n);
        for (int acc = 0; acc < 4; acc += 3) {
            hyfi_f32_to_bf16_ref(hdx, dx, n);
            hyfi_bf16_to_f32_ref(got, hdx, n); /* staged dx: the widened bf16 */
            for (size_t i = 0; i < c; i++) dg[i] = q[6 * c + i] = 0.25f, db[i] = q[7 * c + i] = -1;
            hyfi_batchnorm_backward_cpu(got, dg, db, dy, x, gamma, relu ? y : NULL, mean, var, &a,
                                        acc, blk);
            hyfi_bf16_round_ref(got, n);
            hyfi_batchnorm_backward_bf16(hdx, q + 6 * c, q + 7 * c, hdy, hx, gamma,
                                         relu ? hy : NULL, mean, var, &a, acc, blk);
            hyfi_bf16_to_f32_ref(g2, hdx, n);
            d += bn_diff(got, g2, n) + bn_diff(dg, q + 6 * c, 2 * c);
        }
        if (d) printf("  N=%d C=%d %dx%d blk %d relu %d: %zu values differ\n", N, C, H, W, blk,
                      relu, d);
        bad += d != 0;
    }
    printf("batch norm on bf16 storage, N=%d C=%d %dx%d blk %d: %s\n", N, C, H, W, blk,
           bad ? "FAIL" : "bitwise");
    char name[80];
    snprintf(name, sizeof name, "batchnorm bf16 N=%d C=%d %dx%d blk %d", N, C, H, W, blk);
    tu_check(bad, name);
    free(x), free(dy), free(y), free(dx), free(got), free(g2), free(hx), free(hdy), free(hy), free(hdx);
    free(p);
}

/* (6) pooling: the bf16 kernels against the float32 ones on widened copies */
static void test_pool_bf16(int N, int C, int H, int W, int k, int st, int pad, int blk,
                           uint64_t *seed)
{
    hyfi_pool_args a = {N, C, H, W, (H + 2 * pad - k) / st + 1, (W + 2 * pad - k) / st + 1,
                        k, k, st, st, pad, pad, 0, blk};
    const size_t nb = (size_t)N * C * H * W, ns = (size_t)N * C * a.ho * a.wo;
    float *x = malloc(nb * sizeof *x), *dx = malloc(nb * sizeof *dx), *g = malloc(nb * sizeof *g);
    float *h = malloc(nb * sizeof *h); /* the bf16 kernels' dx, widened */
    float *y = malloc(ns * sizeof *y), *dy = malloc(ns * sizeof *dy);
    uint16_t *hx = malloc(nb * 2), *hdx = malloc(nb * 2), *hy = malloc(ns * 2),
             *hdy = malloc(ns * 2);
    for (size_t i = 0; i < nb; i++) x[i] = tu_uniform(seed, -2, 2), dx[i] = tu_uniform(seed, -1, 1);
    for (size_t i = 0; i < ns; i++) dy[i] = tu_uniform(seed, -1, 1);
    /* ties: a few equal values, so the first-maximum rule matters */
    for (size_t i = 1; i < nb; i += 7) x[i] = x[i - 1];
    hyfi_f32_to_bf16_ref(hx, x, nb), hyfi_bf16_to_f32_ref(x, hx, nb);
    hyfi_f32_to_bf16_ref(hdy, dy, ns), hyfi_bf16_to_f32_ref(dy, hdy, ns);
    int bad = 0;
    for (int kind = 0; kind < 3; kind++) {
        const char *what[] = {"max", "average", "global average"};
        hyfi_pool_args b = a;
        if (kind == 2) b.ho = b.wo = 1;
        b.count_include_pad = kind == 1 && pad > 0;
        const size_t nys = kind == 2 ? (size_t)N * C : ns;
        size_t d = 0;
        /* forward */
        if (kind == 0) hyfi_maxpool_forward_cpu(y, x, &b), hyfi_maxpool_forward_bf16(hy, hx, &b);
        if (kind == 1) hyfi_avgpool_forward_cpu(y, x, &b), hyfi_avgpool_forward_bf16(hy, hx, &b);
        if (kind == 2) hyfi_gap_forward_cpu(y, x, &b), hyfi_gap_forward_bf16(hy, hx, &b);
        hyfi_bf16_round_ref(y, nys);
        hyfi_bf16_to_f32_ref(g, hy, nys);
        d += bn_diff(y, g, nys);
        for (int acc = 0; acc < 2; acc++) {
            hyfi_f32_to_bf16_ref(hdx, dx, nb);
            hyfi_bf16_to_f32_ref(g, hdx, nb);
            if (kind == 0)
                hyfi_maxpool_backward_cpu(g, dy, x, &b, acc),
                    hyfi_maxpool_backward_bf16(hdx, hdy, hx, &b, acc);
            if (kind == 1)
                hyfi_avgpool_backward_cpu(g, dy, &b, acc),
                    hyfi_avgpool_backward_bf16(hdx, hdy, &b, acc);
            if (kind == 2)
                hyfi_gap_backward_cpu(g, dy, &b, acc), hyfi_gap_backward_bf16(hdx, hdy, &b, acc);
            hyfi_bf16_round_ref(g, nb);
            hyfi_bf16_to_f32_ref(h, hdx, nb);
            d += bn_diff(g, h, nb);
        }
        if (d) printf("  %s pooling N=%d C=%d %dx%d blk %d: %zu values differ\n", what[kind], N,
                      C, H, W, blk, d);
        bad += d != 0;
    }
    printf("pooling on bf16 storage, N=%d C=%d %dx%d k%d s%d p%d blk %d: %s\n", N, C, H, W, k,
           st, pad, blk, bad ? "FAIL" : "bitwise");
    char name[80];
    snprintf(name, sizeof name, "pool bf16 N=%d C=%d %dx%d blk %d", N, C, H, W, blk);
    tu_check(bad, name);
    free(x), free(dx), free(g), free(h), free(y), free(dy), free(hx), free(hdx), free(hy), free(hdy);
}

int main(void)
{
    uint64_t seed = 0xbf16;
    test_definition(&seed);
    test_specials();
    const size_t sizes[] = {1, 17, 1000003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        test_cpu_vs_ref(sizes[i], &seed);
        test_eltwise_bf16(sizes[i], &seed);
    }
    test_batchnorm_bf16(2, 5, 70, 70, 0, &seed);  /* plain; 4900 > one row block */
    test_batchnorm_bf16(3, 16, 9, 7, 8, &seed);   /* nChw8c, 2 blocks */
    test_batchnorm_bf16(2, 64, 5, 5, 16, &seed);  /* nChw16c, 4 blocks */
    test_batchnorm_bf16(4, 16, 12, 12, 16, &seed); /* 1 block: threads share pairs */
    test_pool_bf16(2, 3, 11, 9, 3, 2, 1, 0, &seed);   /* overlapping windows, padding */
    test_pool_bf16(2, 16, 64, 64, 3, 2, 1, 0, &seed); /* split over threads */
    test_pool_bf16(2, 16, 13, 13, 3, 2, 1, 8, &seed); /* nChw8c */
    test_pool_bf16(2, 32, 64, 33, 2, 2, 0, 16, &seed); /* nChw16c, split */
    /* backward in bands of rows (256 KB of float32 per thread): windows that
     * straddle two bands */
    test_pool_bf16(1, 2, 500, 300, 3, 2, 1, 0, &seed);
    test_pool_bf16(1, 16, 200, 64, 3, 2, 1, 16, &seed);
    test_pool_bf16(1, 8, 300, 40, 3, 1, 1, 8, &seed);
    test_concat_bf16(&seed);
#if HYFI_TEST_ISA
    test_isa_builds(&seed);
#endif
    return tu_finish();
}
