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
 * widened buffers, rounded. */
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
    return tu_finish();
}
