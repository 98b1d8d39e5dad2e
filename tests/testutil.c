/* Test harness implementation; see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

uint64_t tu_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float tu_uniform(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((tu_next(s) >> 40) * (1.0 / 16777216.0));
}

void tu_fill(float *x, size_t n, uint64_t *s, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = tu_uniform(s, lo, hi);
}

int tu_randint(uint64_t *s, int lo, int hi)
{
    return lo + (int)(tu_next(s) % (uint64_t)(hi - lo + 1));
}

int tu_compare(const char *name, const float *got, const float *want, size_t n, tu_tol tol)
{
    double max_abs = 0, max_rel = 0;
    size_t bad = 0, first_bad = n;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double r = d / (fabs((double)want[i]) + 1e-12);
        if (d > max_abs) max_abs = d;
        if (r > max_rel && fabs((double)want[i]) > tol.atol) max_rel = r;
        if (!(d <= tol.atol + tol.rtol * fabs((double)want[i]))) {
            if (first_bad == n) first_bad = i;
            bad++;
        }
    }
    printf("%-4s %-48s n=%-8zu max_abs=%.3g max_rel=%.3g (%s rtol=%g atol=%g)\n",
           bad ? "FAIL" : "ok", name, n, max_abs, max_rel, tol.what, tol.rtol, tol.atol);
    if (bad) {
        printf("     %zu mismatches; first at %zu:", bad, first_bad);
        for (size_t i = first_bad; i < n && i < first_bad + 5; i++)
            printf(" [%zu] got %.7g want %.7g;", i, got[i], want[i]);
        printf("\n");
    }
    return bad ? 1 : 0;
}

int tu_count_outside(const char *what, const float *got, const float *want, size_t n,
                     double atol, double rtol, double *worst)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        if (d > *worst) *worst = d;
        if (!(d <= atol + rtol * fabs((double)want[i]))) {
            if (bad < 3) printf("  %s[%zu]: %.9g, want %.9g\n", what, i, got[i], want[i]);
            bad++;
        }
    }
    return bad;
}

int tu_grad_check(const char *name, float *param, size_t n, const float *analytic,
                  tu_scalar_fn f, void *ctx, int nsamples, float eps, tu_tol tol,
                  uint64_t *state)
{
    size_t m = (nsamples < 0 || (size_t)nsamples >= n) ? n : (size_t)nsamples;
    float *num = tu_alloc(m), *ana = tu_alloc(m);
    for (size_t j = 0; j < m; j++) {
        size_t i = (m == n) ? j : (size_t)(tu_next(state) % n);
        float keep = param[i];
        param[i] = keep + eps;
        double fp = f(ctx);
        param[i] = keep - eps;
        double fm = f(ctx);
        param[i] = keep;
        num[j] = (float)((fp - fm) / (2.0 * (double)eps));
        ana[j] = analytic[i];
    }
    int rc = tu_compare(name, ana, num, m, tol);
    free(num);
    free(ana);
    return rc;
}

double tu_dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

static int g_passed, g_failed;

void tu_check(int failed, const char *name)
{
    if (failed) {
        g_failed++;
        printf("FAILED: %s\n", name);
    } else {
        g_passed++;
    }
}

int tu_finish(void)
{
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}

float *tu_alloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu floats)\n", n);
        exit(99);
    }
    return p;
}
