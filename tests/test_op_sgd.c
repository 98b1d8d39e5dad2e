/* test_op_sgd.c: PyTorch SGD step with momentum and weight decay.
 * (1) CPU vs reference over 3 steps (fresh gradients each step) with momentum
 * 0 and 0.9, weight decay 0 and 5e-4, sizes 1, 17 and 1000003, and momentum 0
 * with v == NULL; (2) the reference against values worked out by hand from
 * PyTorch's formula. SGD has no backward and no acc flag, so there is no
 * finite-difference or accumulation check. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_cpu_vs_ref(size_t n, float mom, float wd, int null_v, uint64_t *seed)
{
    char name[128];
    hyfi_sgd_args a = {n, 0.05f, mom, wd};
    float *w_ref = tu_alloc(n), *w_cpu = tu_alloc(n), *v_ref = tu_alloc(n), *v_cpu = tu_alloc(n);
    float *g = tu_alloc(n);
    tu_fill(w_ref, n, seed, -1.0f, 1.0f);
    memcpy(w_cpu, w_ref, n * sizeof(float)); /* v starts at zero (tu_alloc) */
    for (int step = 1; step <= 3; step++) {
        tu_fill(g, n, seed, -1.0f, 1.0f);
        float nr[2] = {0, 0}, nc[2] = {0, 0};
        hyfi_sgd_update_ref(w_ref, null_v ? NULL : v_ref, nr, g, &a);
        tu_check(hyfi_sgd_update_cpu(w_cpu, null_v ? NULL : v_cpu, nc, g, &a) != 0,
                 "sgd_update_cpu rc");
        snprintf(name, sizeof name, "sgd norms cpu/ref n=%zu mom=%g wd=%g step %d", n,
                 (double)mom, (double)wd, step);
        tu_check(tu_compare(name, nc, nr, 2, TU_TOL_CPU_VS_REF), name);
        snprintf(name, sizeof name, "sgd w cpu/ref n=%zu mom=%g wd=%g%s step %d", n, (double)mom,
                 (double)wd, null_v ? " v=NULL" : "", step);
        tu_check(tu_compare(name, w_cpu, w_ref, n, TU_TOL_CPU_VS_REF), name);
        if (!null_v) {
            snprintf(name, sizeof name, "sgd v cpu/ref n=%zu mom=%g wd=%g step %d", n, (double)mom,
                     (double)wd, step);
            tu_check(tu_compare(name, v_cpu, v_ref, n, TU_TOL_CPU_VS_REF), name);
        }
    }
    free(w_ref); free(w_cpu); free(v_ref); free(v_cpu); free(g);
}

/* w = 1, g = 0.5 each step, lr 0.1, momentum 0.9, wd 0.01 (PyTorch by hand):
 * step 1: g' = 0.51,       v = 0.51,       w = 0.949
 * step 2: g' = 0.50949,    v = 0.96849,    w = 0.852151
 * step 3: g' = 0.50852151, v = 1.38016251, w = 0.714134749
 * momentum 0, same data: v = g', w = 0.949, 0.898051, 0.847152949 */
static void test_by_hand(void)
{
    static const float want_w[3] = {0.949f, 0.852151f, 0.714134749f};
    static const float want_v[3] = {0.51f, 0.96849f, 1.38016251f};
    static const float want_w0[3] = {0.949f, 0.898051f, 0.847152949f};
    hyfi_sgd_args a = {1, 0.1f, 0.9f, 0.01f};
    float g = 0.5f;
    for (int path = 0; path < 2; path++) {
        float w = 1.0f, v = 0.0f, w0 = 1.0f, v0 = 0.0f, gw[3], gv[3], gw0[3];
        for (int s = 0; s < 3; s++) {
            a.momentum = 0.9f;
            if (path) hyfi_sgd_update_cpu(&w, &v, NULL, &g, &a);
            else hyfi_sgd_update_ref(&w, &v, NULL, &g, &a);
            a.momentum = 0.0f;
            if (path) hyfi_sgd_update_cpu(&w0, &v0, NULL, &g, &a);
            else hyfi_sgd_update_ref(&w0, &v0, NULL, &g, &a);
            gw[s] = w;
            gv[s] = v;
            gw0[s] = w0;
        }
        char name[96];
        const char *pn = path ? "cpu" : "ref";
        snprintf(name, sizeof name, "sgd by hand w mom=0.9 (%s)", pn);
        tu_check(tu_compare(name, gw, want_w, 3, TU_TOL_CPU_VS_REF), name);
        snprintf(name, sizeof name, "sgd by hand v mom=0.9 (%s)", pn);
        tu_check(tu_compare(name, gv, want_v, 3, TU_TOL_CPU_VS_REF), name);
        snprintf(name, sizeof name, "sgd by hand w mom=0 (%s)", pn);
        tu_check(tu_compare(name, gw0, want_w0, 3, TU_TOL_CPU_VS_REF), name);
    }
}

/* The health sums: by hand (g = 0.5 x 3, new w = 0.949 x 3: 0.75, 2.701803),
 * and one NaN or infinity in g, or a weight that overflows, makes them
 * non-finite on both paths; a NULL norms leaves the update unchanged. */
static void test_norms(void)
{
    hyfi_sgd_args a = {3, 0.1f, 0.0f, 0.01f};
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "cpu" : "ref";
        char name[96];
        float w[3] = {1, 1, 1}, g[3] = {0.5f, 0.5f, 0.5f}, nrm[2] = {-1, -1};
        if (path) hyfi_sgd_update_cpu(w, NULL, nrm, g, &a);
        else hyfi_sgd_update_ref(w, NULL, nrm, g, &a);
        const float want[2] = {0.75f, 3 * 0.949f * 0.949f};
        snprintf(name, sizeof name, "sgd norms by hand (%s)", pn);
        tu_check(tu_compare(name, nrm, want, 2, TU_TOL_CPU_VS_REF), name);
        const float bad[3] = {NAN, INFINITY, 3e38f};
        for (int b = 0; b < 3; b++) {
            float w2[3] = {1, 1, 1}, g2[3] = {0.5f, 0.5f, 0.5f}, n2[2] = {0, 0};
            g2[1] = bad[b];
            if (path) hyfi_sgd_update_cpu(w2, NULL, n2, g2, &a);
            else hyfi_sgd_update_ref(w2, NULL, n2, g2, &a);
            snprintf(name, sizeof name, "sgd norms flag g=%g (%s)", (double)bad[b], pn);
            tu_check(isfinite(n2[0]) || isfinite(n2[1]), name);
        }
    }
}

int main(void)
{
    uint64_t seed = 0x56D56Dull;
    static const size_t sizes[] = {1, 17, 1000003};
    static const float moms[] = {0.0f, 0.9f}, wds[] = {0.0f, 5e-4f};
    for (size_t s = 0; s < 3; s++)
        for (int m = 0; m < 2; m++)
            for (int d = 0; d < 2; d++) test_cpu_vs_ref(sizes[s], moms[m], wds[d], 0, &seed);
    test_cpu_vs_ref(17, 0.0f, 5e-4f, 1, &seed);
    test_by_hand();
    test_norms();
    return tu_finish();
}
