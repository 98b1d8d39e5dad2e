/* test_op_replica.c: the replica kernels (ops/replica_*).
 * (1) copy_slice: CPU vs reference for chunks out of and into a vector,
 *     including empty and whole-vector slices;
 * (2) running_combine: R replicas that each ran r <- (1 - m) r + m s over B
 *     statistics from the same r0, combined, equal the recurrence run over all
 *     R x B statistics in order (in double, to float round-off), for R = 2, 3,
 *     4 and B = 1, 2, 3; CPU vs reference; and R = 1 leaves x unchanged. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_slices(uint64_t *seed)
{
    const size_t n = 1003;
    float *src = tu_alloc(n), *a = tu_alloc(n), *b = tu_alloc(n);
    tu_fill(src, n, seed, -1.f, 1.f);
    const size_t cuts[][3] = {{0, 0, 1003}, {0, 500, 503}, {17, 0, 0}, {250, 3, 700}};
    for (size_t k = 0; k < sizeof cuts / sizeof *cuts; k++) {
        hyfi_slice_args s = {.count = cuts[k][2], .src_off = cuts[k][0], .dst_off = cuts[k][1]};
        tu_fill(a, n, seed, -1.f, 1.f);
        memcpy(b, a, n * sizeof(float));
        hyfi_copy_slice_ref(a, src, &s);
        tu_check(hyfi_copy_slice_cpu(b, src, &s) != 0, "copy_slice_cpu rc");
        char name[96];
        snprintf(name, sizeof name, "copy_slice cpu/ref src+%zu -> dst+%zu, %zu", s.src_off,
                 s.dst_off, s.count);
        tu_check(tu_compare(name, b, a, n, TU_TOL_CPU_VS_REF), name);
        int bad = 0;
        for (size_t i = 0; i < s.count; i++) bad += a[s.dst_off + i] != src[s.src_off + i];
        snprintf(name, sizeof name, "copy_slice ref moves the slice (%zu)", k);
        tu_check(bad, name);
    }
    free(src), free(a), free(b);
}

static void test_combine(int R, int B, uint64_t *seed)
{
    const size_t n = 37;
    const double m = 0.1, a1 = 1 - m;
    float *r0 = tu_alloc(n), *stats = tu_alloc(n * (size_t)R * B);
    float *reps = tu_alloc(n * (size_t)R), *want = tu_alloc(n), *cpu = tu_alloc(n);
    tu_fill(r0, n, seed, 0.f, 2.f);
    tu_fill(stats, n * (size_t)R * B, seed, 0.f, 2.f);
    for (size_t i = 0; i < n; i++) {
        double w = r0[i];
        for (int j = 0; j < R * B; j++) w = a1 * w + m * stats[(size_t)j * n + i];
        want[i] = (float)w;
        for (int k = 0; k < R; k++) {
            double v = r0[i];
            for (int j = 0; j < B; j++) v = a1 * v + m * stats[((size_t)k * B + j) * n + i];
            reps[(size_t)k * n + i] = (float)v;
        }
    }
    const float *others[HYFI_RCOMB_MAX];
    for (int k = 1; k < R; k++) others[k - 1] = reps + (size_t)k * n;
    hyfi_rcomb_args a = {.count = n, .nrep = R, .decay = pow(a1, B)};
    memcpy(cpu, reps, n * sizeof(float));
    hyfi_running_combine_ref(reps, r0, others, &a);
    tu_check(hyfi_running_combine_cpu(cpu, r0, others, &a) != 0, "running_combine_cpu rc");
    char name[96];
    snprintf(name, sizeof name, "running_combine ref vs sequential, R=%d B=%d", R, B);
    tu_check(tu_compare(name, reps, want, n, TU_TOL_CPU_VS_REF), name);
    snprintf(name, sizeof name, "running_combine cpu/ref, R=%d B=%d", R, B);
    tu_check(tu_compare(name, cpu, reps, n, TU_TOL_CPU_VS_REF), name);
    free(r0), free(stats), free(reps), free(want), free(cpu);
}

int main(void)
{
    uint64_t seed = 42;
    test_slices(&seed);
    for (int R = 1; R <= 4; R++)
        for (int B = 1; B <= 3; B++) test_combine(R, B, &seed);
    return tu_finish();
}
