/* test_op_fc.c: fully connected layer y = x w^T + b.
 * (1) CPU (oneDNN inner product) vs reference on shapes with in = 1, out = 10,
 * odd batches and a flattened 3x7x5 input, with and without bias;
 * (2) reference backwards (dx, dw, db) vs finite differences of the reference
 * forward (loss = dot(y, r)); (3) acc = 1 adds, on both paths. */
#include "kernels.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hyfi_fc_args shapes[] = {
    {1, 1, 10, 1},        /* in = 1 */
    {7, 1, 10, 0},        /* in = 1, no bias, odd batch */
    {3, 3 * 7 * 5, 10, 1}, /* (3, 3, 7, 5) flattened */
    {7, 17, 3, 1},
    {5, 64, 33, 0},
    {1, 31, 1, 1},        /* out = 1 */
    {33, 128, 20, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

typedef struct {
    hyfi_fc_args a;
    float *x, *w, *b, *dy, *y;
    size_t nx, nw, ny;
} fc_data;

static void fc_data_init(fc_data *d, const hyfi_fc_args *a, uint64_t *seed)
{
    d->a = *a;
    d->nx = (size_t)a->n * a->in;
    d->nw = (size_t)a->out * a->in;
    d->ny = (size_t)a->n * a->out;
    d->x = tu_alloc(d->nx);
    d->w = tu_alloc(d->nw);
    d->b = a->has_bias ? tu_alloc((size_t)a->out) : NULL;
    d->dy = tu_alloc(d->ny);
    d->y = tu_alloc(d->ny);
    tu_fill(d->x, d->nx, seed, -1.0f, 1.0f);
    tu_fill(d->w, d->nw, seed, -1.0f, 1.0f);
    if (d->b) tu_fill(d->b, (size_t)a->out, seed, -1.0f, 1.0f);
    tu_fill(d->dy, d->ny, seed, -1.0f, 1.0f);
}

static void fc_data_free(fc_data *d)
{
    free(d->x); free(d->w); free(d->b); free(d->dy); free(d->y);
}

static const char *shape_str(const hyfi_fc_args *a, char *buf, size_t len)
{
    snprintf(buf, len, "N=%d in=%d out=%d bias=%d", a->n, a->in, a->out, a->has_bias);
    return buf;
}

/* ------------------------------------------------------- CPU vs reference */
static void test_cpu_vs_ref(const hyfi_fc_args *a, uint64_t *seed)
{
    char name[128], s[64];
    fc_data d;
    fc_data_init(&d, a, seed);
    shape_str(a, s, sizeof s);
    size_t nb = (size_t)a->out;

    float *y_cpu = tu_alloc(d.ny);
    hyfi_fc_forward_ref(d.y, d.x, d.w, d.b, a);
    tu_check(hyfi_fc_forward_cpu(y_cpu, d.x, d.w, d.b, a) != 0, "fc_forward_cpu rc");
    snprintf(name, sizeof name, "fc_forward cpu/ref %s", s);
    tu_check(tu_compare(name, y_cpu, d.y, d.ny, TU_TOL_CPU_VS_REF), name);

    float *base_x = tu_alloc(d.nx), *dx_ref = tu_alloc(d.nx), *dx_cpu = tu_alloc(d.nx);
    float *base_w = tu_alloc(d.nw), *dw_ref = tu_alloc(d.nw), *dw_cpu = tu_alloc(d.nw);
    float *base_b = tu_alloc(nb), *db_ref = tu_alloc(nb), *db_cpu = tu_alloc(nb);
    tu_fill(base_x, d.nx, seed, -1.0f, 1.0f);
    tu_fill(base_w, d.nw, seed, -1.0f, 1.0f);
    tu_fill(base_b, nb, seed, -1.0f, 1.0f);
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(dx_ref, base_x, d.nx * sizeof(float));
        memcpy(dx_cpu, base_x, d.nx * sizeof(float));
        hyfi_fc_backward_data_ref(dx_ref, d.dy, d.w, a, acc);
        tu_check(hyfi_fc_backward_data_cpu(dx_cpu, d.dy, d.w, a, acc) != 0,
                 "fc_backward_data_cpu rc");
        snprintf(name, sizeof name, "fc_backward_data cpu/ref %s acc=%d", s, acc);
        tu_check(tu_compare(name, dx_cpu, dx_ref, d.nx, TU_TOL_CPU_VS_REF), name);

        memcpy(dw_ref, base_w, d.nw * sizeof(float));
        memcpy(dw_cpu, base_w, d.nw * sizeof(float));
        memcpy(db_ref, base_b, nb * sizeof(float));
        memcpy(db_cpu, base_b, nb * sizeof(float));
        hyfi_fc_backward_weight_ref(dw_ref, a->has_bias ? db_ref : NULL, d.dy, d.x, a, acc);
        tu_check(hyfi_fc_backward_weight_cpu(dw_cpu, a->has_bias ? db_cpu : NULL, d.dy, d.x, a,
                                             acc) != 0,
                 "fc_backward_weight_cpu rc");
        snprintf(name, sizeof name, "fc_backward_weight dw cpu/ref %s acc=%d", s, acc);
        tu_check(tu_compare(name, dw_cpu, dw_ref, d.nw, TU_TOL_CPU_VS_REF), name);
        /* without bias db must stay untouched (equal to base) on both paths */
        snprintf(name, sizeof name, "fc_backward_weight db cpu/ref %s acc=%d", s, acc);
        tu_check(tu_compare(name, db_cpu, db_ref, nb, TU_TOL_CPU_VS_REF), name);
    }
    free(y_cpu);
    free(base_x); free(dx_ref); free(dx_cpu);
    free(base_w); free(dw_ref); free(dw_cpu);
    free(base_b); free(db_ref); free(db_cpu);
    fc_data_free(&d);
}

/* ------------------------------------------------------ finite differences */
static double fd_loss(void *p)
{
    fc_data *d = p;
    hyfi_fc_forward_ref(d->y, d->x, d->w, d->b, &d->a);
    return tu_dot(d->y, d->dy, d->ny); /* r = dy */
}

static void test_fd(const hyfi_fc_args *a, uint64_t *seed)
{
    char name[128], s[64];
    fc_data d;
    fc_data_init(&d, a, seed);
    shape_str(a, s, sizeof s);
    float *dx = tu_alloc(d.nx), *dw = tu_alloc(d.nw), *db = tu_alloc((size_t)a->out);
    hyfi_fc_backward_data_ref(dx, d.dy, d.w, a, 0);
    hyfi_fc_backward_weight_ref(dw, a->has_bias ? db : NULL, d.dy, d.x, a, 0);
    snprintf(name, sizeof name, "fc_backward_data_ref vs fd %s", s);
    tu_check(tu_grad_check(name, d.x, d.nx, dx, fd_loss, &d, 100, 1e-2f, TU_TOL_FD, seed), name);
    snprintf(name, sizeof name, "fc_backward_weight_ref dw vs fd %s", s);
    tu_check(tu_grad_check(name, d.w, d.nw, dw, fd_loss, &d, 100, 1e-2f, TU_TOL_FD, seed), name);
    if (a->has_bias) {
        snprintf(name, sizeof name, "fc_backward_weight_ref db vs fd %s", s);
        tu_check(tu_grad_check(name, d.b, (size_t)a->out, db, fd_loss, &d, 100, 1e-2f, TU_TOL_FD,
                               seed),
                 name);
    }
    free(dx); free(dw); free(db);
    fc_data_free(&d);
}

/* ------------------------------------------ acc = 1 adds, on both paths */
static void add_into(float *want, const float *base, const float *fresh, size_t n)
{
    for (size_t i = 0; i < n; i++) want[i] = base[i] + fresh[i];
}

static void test_acc(const hyfi_fc_args *a, uint64_t *seed)
{
    char name[128], s[64];
    fc_data d;
    fc_data_init(&d, a, seed);
    shape_str(a, s, sizeof s);
    size_t nb = (size_t)a->out, nmax = d.nx > d.nw ? d.nx : d.nw;
    float *base = tu_alloc(nmax), *fresh = tu_alloc(nmax), *acc1 = tu_alloc(nmax);
    float *want = tu_alloc(nmax);
    float *bbase = tu_alloc(nb), *bfresh = tu_alloc(nb), *bacc1 = tu_alloc(nb), *bwant = tu_alloc(nb);
    tu_fill(base, nmax, seed, -1.0f, 1.0f);
    tu_fill(bbase, nb, seed, -1.0f, 1.0f);
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "cpu" : "ref";
        int (*bwd_data)(float *, const float *, const float *, const hyfi_fc_args *, int) =
            path ? hyfi_fc_backward_data_cpu : hyfi_fc_backward_data_ref;
        int (*bwd_weight)(float *, float *, const float *, const float *, const hyfi_fc_args *,
                          int) = path ? hyfi_fc_backward_weight_cpu : hyfi_fc_backward_weight_ref;

        memcpy(acc1, base, d.nx * sizeof(float));
        bwd_data(fresh, d.dy, d.w, a, 0);
        bwd_data(acc1, d.dy, d.w, a, 1);
        add_into(want, base, fresh, d.nx);
        snprintf(name, sizeof name, "fc_backward_data acc=1 adds (%s) %s", pn, s);
        tu_check(tu_compare(name, acc1, want, d.nx, TU_TOL_CPU_VS_REF), name);

        memcpy(acc1, base, d.nw * sizeof(float));
        memcpy(bacc1, bbase, nb * sizeof(float));
        bwd_weight(fresh, bfresh, d.dy, d.x, a, 0);
        bwd_weight(acc1, bacc1, d.dy, d.x, a, 1);
        add_into(want, base, fresh, d.nw);
        add_into(bwant, bbase, bfresh, nb);
        snprintf(name, sizeof name, "fc_backward_weight dw acc=1 adds (%s) %s", pn, s);
        tu_check(tu_compare(name, acc1, want, d.nw, TU_TOL_CPU_VS_REF), name);
        snprintf(name, sizeof name, "fc_backward_weight db acc=1 adds (%s) %s", pn, s);
        tu_check(tu_compare(name, bacc1, bwant, nb, TU_TOL_CPU_VS_REF), name);
    }
    free(base); free(fresh); free(acc1); free(want);
    free(bbase); free(bfresh); free(bacc1); free(bwant);
    fc_data_free(&d);
}

int main(void)
{
    uint64_t seed = 0xFC0FC0ull;
    for (size_t i = 0; i < NSHAPES; i++) test_cpu_vs_ref(&shapes[i], &seed);
    for (size_t i = 0; i < NSHAPES; i++) test_fd(&shapes[i], &seed);
    for (size_t i = 0; i < NSHAPES; i++) test_acc(&shapes[i], &seed);
    return tu_finish();
}
