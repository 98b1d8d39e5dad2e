/* test_op_xent.c: softmax cross-entropy.
 * (1) CPU vs reference (loss, probabilities, gradient) with K = 10, 3, 1 and
 * 1000, N = 1, 7 and 64, scale 1/N and another; logits shifted by +1000 give
 * the same probabilities (stability); a bad label returns -2 on both paths and
 * is skipped; (2) reference backward vs finite differences of the reference
 * loss (times dloss); (3) acc = 1 adds, on both paths. */
#include "kernels.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, k;
    float scale_mul; /* scale = scale_mul / n */
} xent_case;

static const xent_case cases[] = {
    {1, 10, 1.0f}, {7, 10, 1.0f}, {1, 3, 1.0f}, {7, 3, 0.5f}, {5, 1, 1.0f}, {64, 1000, 1.0f},
};
#define NCASES (sizeof cases / sizeof cases[0])

typedef struct {
    hyfi_xent_args a;
    float *z, *p;
    int32_t *labels;
    float dloss;
    size_t nz;
} xent_data;

static void xent_data_init(xent_data *d, const xent_case *c, uint64_t *seed)
{
    d->a.n = c->n;
    d->a.k = c->k;
    d->a.scale = c->scale_mul / (float)c->n;
    d->nz = (size_t)c->n * c->k;
    d->z = tu_alloc(d->nz);
    d->p = tu_alloc(d->nz);
    d->labels = calloc((size_t)c->n, sizeof(int32_t));
    if (!d->labels) exit(99);
    tu_fill(d->z, d->nz, seed, -2.0f, 2.0f);
    for (int n = 0; n < c->n; n++) d->labels[n] = tu_randint(seed, 0, c->k - 1);
    d->dloss = 0.7f;
}

static void xent_data_free(xent_data *d)
{
    free(d->z); free(d->p); free(d->labels);
}

static void case_str(const hyfi_xent_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "N=%d K=%d scale=%.4g", a->n, a->k, (double)a->scale);
}

/* ------------------------------------------------------- CPU vs reference */
static void test_cpu_vs_ref(const xent_case *c, uint64_t *seed)
{
    char name[128], s[64];
    xent_data d;
    xent_data_init(&d, c, seed);
    case_str(&d.a, s, sizeof s);
    float loss_ref, loss_cpu, *p_cpu = tu_alloc(d.nz);
    tu_check(hyfi_xent_forward_ref(&loss_ref, d.p, d.z, d.labels, &d.a) != 0, "xent_forward_ref rc");
    tu_check(hyfi_xent_forward_cpu(&loss_cpu, p_cpu, d.z, d.labels, &d.a) != 0,
             "xent_forward_cpu rc");
    snprintf(name, sizeof name, "xent_forward loss cpu/ref %s", s);
    tu_check(tu_compare(name, &loss_cpu, &loss_ref, 1, TU_TOL_CPU_VS_REF), name);
    snprintf(name, sizeof name, "xent_forward prob cpu/ref %s", s);
    tu_check(tu_compare(name, p_cpu, d.p, d.nz, TU_TOL_CPU_VS_REF), name);

    /* Stability: logits + 1000 give the same probabilities and loss. */
    float *zs = tu_alloc(d.nz), *ps = tu_alloc(d.nz), loss_s;
    for (size_t i = 0; i < d.nz; i++) zs[i] = d.z[i] + 1000.0f;
    hyfi_xent_forward_cpu(&loss_s, ps, zs, d.labels, &d.a);
    snprintf(name, sizeof name, "xent_forward prob cpu logits+1000 %s", s);
    /* z + 1000 rounds z to a multiple of 2^-14 (6e-5): loose tolerance */
    tu_check(tu_compare(name, ps, d.p, d.nz, TU_TOL_FD), name);
    hyfi_xent_forward_ref(&loss_s, ps, zs, d.labels, &d.a);
    snprintf(name, sizeof name, "xent_forward prob ref logits+1000 %s", s);
    tu_check(tu_compare(name, ps, d.p, d.nz, TU_TOL_FD), name);

    float *base = tu_alloc(d.nz), *g_ref = tu_alloc(d.nz), *g_cpu = tu_alloc(d.nz);
    tu_fill(base, d.nz, seed, -1.0f, 1.0f);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(g_ref, base, d.nz * sizeof(float));
        memcpy(g_cpu, base, d.nz * sizeof(float));
        hyfi_xent_backward_ref(g_ref, d.p, d.labels, &d.dloss, &d.a, acc);
        tu_check(hyfi_xent_backward_cpu(g_cpu, d.p, d.labels, &d.dloss, &d.a, acc) != 0,
                 "xent_backward_cpu rc");
        snprintf(name, sizeof name, "xent_backward cpu/ref %s acc=%d", s, acc);
        tu_check(tu_compare(name, g_cpu, g_ref, d.nz, TU_TOL_CPU_VS_REF), name);
    }
    free(p_cpu); free(zs); free(ps); free(base); free(g_ref); free(g_cpu);
    xent_data_free(&d);
}

/* Bad labels: -2 from the forward, the row skipped in loss and gradient. */
static void test_bad_label(uint64_t *seed)
{
    char name[128];
    xent_case c = {7, 10, 1.0f};
    xent_data d;
    xent_data_init(&d, &c, seed);
    d.labels[2] = 10;
    d.labels[5] = -1;
    float loss_ref, loss_cpu, *p_cpu = tu_alloc(d.nz);
    int rc_ref = hyfi_xent_forward_ref(&loss_ref, d.p, d.z, d.labels, &d.a);
    int rc_cpu = hyfi_xent_forward_cpu(&loss_cpu, p_cpu, d.z, d.labels, &d.a);
    printf("%-4s xent_forward bad label rc ref %d cpu %d (want -2)\n",
           rc_ref == -2 && rc_cpu == -2 ? "ok" : "FAIL", rc_ref, rc_cpu);
    tu_check(rc_ref != -2 || rc_cpu != -2, "xent_forward bad label rc");
    /* Loss over the good rows only. */
    double want = 0;
    for (int n = 0; n < c.n; n++) {
        int32_t l = d.labels[n];
        if (l < 0 || l >= c.k) continue;
        want -= log((double)d.p[(size_t)n * c.k + l]);
    }
    float wantf = (float)(want * d.a.scale);
    tu_check(tu_compare("xent_forward bad label loss ref", &loss_ref, &wantf, 1, TU_TOL_CPU_VS_REF),
             "xent_forward bad label loss ref");
    tu_check(tu_compare("xent_forward bad label loss cpu", &loss_cpu, &wantf, 1, TU_TOL_CPU_VS_REF),
             "xent_forward bad label loss cpu");
    tu_check(tu_compare("xent_forward bad label prob cpu/ref", p_cpu, d.p, d.nz,
                        TU_TOL_CPU_VS_REF),
             "xent_forward bad label prob");
    float *g_ref = tu_alloc(d.nz), *g_cpu = tu_alloc(d.nz);
    tu_fill(g_ref, d.nz, seed, -1.0f, 1.0f);
    tu_fill(g_cpu, d.nz, seed, -1.0f, 1.0f);
    hyfi_xent_backward_ref(g_ref, d.p, d.labels, &d.dloss, &d.a, 0);
    hyfi_xent_backward_cpu(g_cpu, d.p, d.labels, &d.dloss, &d.a, 0);
    snprintf(name, sizeof name, "xent_backward bad label cpu/ref");
    tu_check(tu_compare(name, g_cpu, g_ref, d.nz, TU_TOL_CPU_VS_REF), name);
    int nonzero = 0;
    for (int kk = 0; kk < c.k; kk++)
        nonzero += g_cpu[2 * c.k + kk] != 0.0f || g_cpu[5 * c.k + kk] != 0.0f ||
                   g_ref[2 * c.k + kk] != 0.0f || g_ref[5 * c.k + kk] != 0.0f;
    printf("%-4s xent_backward bad-label rows are zero\n", nonzero ? "FAIL" : "ok");
    tu_check(nonzero, "xent_backward bad-label rows are zero");
    free(p_cpu); free(g_ref); free(g_cpu);
    xent_data_free(&d);
}

/* ------------------------------------------------------ finite differences */
static double fd_loss(void *p)
{
    xent_data *d = p;
    float loss;
    hyfi_xent_forward_ref(&loss, d->p, d->z, d->labels, &d->a);
    return (double)loss * (double)d->dloss;
}

static void test_fd(const xent_case *c, uint64_t *seed)
{
    char name[128], s[64];
    xent_data d;
    xent_data_init(&d, c, seed);
    case_str(&d.a, s, sizeof s);
    float loss, *g = tu_alloc(d.nz);
    hyfi_xent_forward_ref(&loss, d.p, d.z, d.labels, &d.a);
    hyfi_xent_backward_ref(g, d.p, d.labels, &d.dloss, &d.a, 0);
    snprintf(name, sizeof name, "xent_backward_ref vs fd %s", s);
    tu_check(tu_grad_check(name, d.z, d.nz, g, fd_loss, &d, 200, 1e-2f, TU_TOL_FD, seed), name);
    free(g);
    xent_data_free(&d);
}

/* ------------------------------------------ acc = 1 adds, on both paths */
static void test_acc(const xent_case *c, uint64_t *seed)
{
    char name[128], s[64];
    xent_data d;
    xent_data_init(&d, c, seed);
    case_str(&d.a, s, sizeof s);
    float loss;
    hyfi_xent_forward_ref(&loss, d.p, d.z, d.labels, &d.a);
    float *base = tu_alloc(d.nz), *fresh = tu_alloc(d.nz), *acc1 = tu_alloc(d.nz);
    float *want = tu_alloc(d.nz);
    tu_fill(base, d.nz, seed, -1.0f, 1.0f);
    for (int path = 0; path < 2; path++) {
        memcpy(acc1, base, d.nz * sizeof(float));
        if (path) {
            hyfi_xent_backward_cpu(fresh, d.p, d.labels, &d.dloss, &d.a, 0);
            hyfi_xent_backward_cpu(acc1, d.p, d.labels, &d.dloss, &d.a, 1);
        } else {
            hyfi_xent_backward_ref(fresh, d.p, d.labels, &d.dloss, &d.a, 0);
            hyfi_xent_backward_ref(acc1, d.p, d.labels, &d.dloss, &d.a, 1);
        }
        for (size_t i = 0; i < d.nz; i++) want[i] = base[i] + fresh[i];
        snprintf(name, sizeof name, "xent_backward acc=1 adds (%s) %s", path ? "cpu" : "ref", s);
        tu_check(tu_compare(name, acc1, want, d.nz, TU_TOL_CPU_VS_REF), name);
    }
    free(base); free(fresh); free(acc1); free(want);
    xent_data_free(&d);
}

int main(void)
{
    uint64_t seed = 0x0E17E17ull;
    for (size_t i = 0; i < NCASES; i++) test_cpu_vs_ref(&cases[i], &seed);
    test_bad_label(&seed);
    for (size_t i = 0; i < NCASES; i++) test_fd(&cases[i], &seed);
    for (size_t i = 0; i < NCASES; i++) test_acc(&cases[i], &seed);
    return tu_finish();
}
