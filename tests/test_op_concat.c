/* test_op_concat.c: channel concatenation done part by part.
 * (1) CPU vs reference: 3 parts with odd channel counts, batch 1 and 3, 7x5
 * and 1x1 images; a single part leaves the other channels untouched;
 * (2) reference backward vs finite differences of the reference forward
 * (loss = dot(y, r)); (3) acc = 1 adds, on both paths. */
#include "kernels.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int n, hw;
    int parts[3];
} concat_case;

static const concat_case cases[] = {
    {1, 35, {3, 5, 1}},
    {3, 35, {1, 7, 3}},
    {3, 1, {5, 3, 9}},
    {2, 9, {2, 1, 4}},
};
#define NCASES (sizeof cases / sizeof cases[0])

static hyfi_concat_args part_args(const concat_case *k, int i)
{
    hyfi_concat_args a = {k->n, k->hw, k->parts[i], 0, 0};
    for (int j = 0; j < 3; j++) {
        if (j < i) a.c_offset += k->parts[j];
        a.c_total += k->parts[j];
    }
    return a;
}

static size_t part_count(const hyfi_concat_args *a) { return (size_t)a->n * a->c_part * a->hw; }

/* ------------------------------------------------------- CPU vs reference */
static void test_cpu_vs_ref(const concat_case *k, uint64_t *seed)
{
    char name[128];
    hyfi_concat_args a0 = part_args(k, 0);
    size_t ny = (size_t)k->n * a0.c_total * k->hw;
    float *y_ref = tu_alloc(ny), *y_cpu = tu_alloc(ny), *dy = tu_alloc(ny);
    float *x[3];
    /* Start from the same random y: a part must not touch other channels. */
    tu_fill(y_ref, ny, seed, -1.0f, 1.0f);
    memcpy(y_cpu, y_ref, ny * sizeof(float));
    tu_fill(dy, ny, seed, -1.0f, 1.0f);
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(k, i);
        x[i] = tu_alloc(part_count(&a));
        tu_fill(x[i], part_count(&a), seed, -1.0f, 1.0f);
        hyfi_concat_forward_ref(y_ref, x[i], &a);
        tu_check(hyfi_concat_forward_cpu(y_cpu, x[i], &a) != 0, "concat_forward_cpu rc");
        snprintf(name, sizeof name, "concat_forward cpu/ref N=%d hw=%d part %d/%d (c %d@%d of %d)",
                 k->n, k->hw, i + 1, 3, a.c_part, a.c_offset, a.c_total);
        tu_check(tu_compare(name, y_cpu, y_ref, ny, TU_TOL_CPU_VS_REF), name);
    }
    /* After the three parts y is exactly the concatenation. */
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(k, i);
        for (int n = 0; n < k->n; n++)
            for (int c = 0; c < a.c_part; c++)
                for (int p = 0; p < k->hw; p++)
                    bad += y_cpu[((size_t)n * a.c_total + a.c_offset + c) * k->hw + p] !=
                           x[i][((size_t)n * a.c_part + c) * k->hw + p];
    }
    snprintf(name, sizeof name, "concat_forward full tensor N=%d hw=%d", k->n, k->hw);
    printf("%-4s %s\n", bad ? "FAIL" : "ok", name);
    tu_check(bad != 0, name);

    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(k, i);
        size_t nx = part_count(&a);
        float *base = tu_alloc(nx), *dx_ref = tu_alloc(nx), *dx_cpu = tu_alloc(nx);
        tu_fill(base, nx, seed, -1.0f, 1.0f);
        for (int acc = 0; acc <= 1; acc++) {
            memcpy(dx_ref, base, nx * sizeof(float));
            memcpy(dx_cpu, base, nx * sizeof(float));
            hyfi_concat_backward_ref(dx_ref, dy, &a, acc);
            tu_check(hyfi_concat_backward_cpu(dx_cpu, dy, &a, acc) != 0, "concat_backward_cpu rc");
            snprintf(name, sizeof name, "concat_backward cpu/ref N=%d hw=%d part %d acc=%d",
                     k->n, k->hw, i + 1, acc);
            tu_check(tu_compare(name, dx_cpu, dx_ref, nx, TU_TOL_CPU_VS_REF), name);
        }
        free(base); free(dx_ref); free(dx_cpu);
    }
    for (int i = 0; i < 3; i++) free(x[i]);
    free(y_ref); free(y_cpu); free(dy);
}

/* ------------------------------------------------------ finite differences */
typedef struct {
    const concat_case *k;
    float *x[3], *y, *r;
    size_t ny;
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(c->k, i);
        hyfi_concat_forward_ref(c->y, c->x[i], &a);
    }
    return tu_dot(c->y, c->r, c->ny);
}

static void test_fd(const concat_case *k, uint64_t *seed)
{
    char name[128];
    hyfi_concat_args a0 = part_args(k, 0);
    fd_ctx c = {k, {0}, NULL, NULL, (size_t)k->n * a0.c_total * k->hw};
    c.y = tu_alloc(c.ny);
    c.r = tu_alloc(c.ny);
    tu_fill(c.r, c.ny, seed, -1.0f, 1.0f);
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(k, i);
        c.x[i] = tu_alloc(part_count(&a));
        tu_fill(c.x[i], part_count(&a), seed, -1.0f, 1.0f);
    }
    for (int i = 0; i < 3; i++) {
        hyfi_concat_args a = part_args(k, i);
        size_t nx = part_count(&a);
        float *dx = tu_alloc(nx);
        hyfi_concat_backward_ref(dx, c.r, &a, 0);
        snprintf(name, sizeof name, "concat_backward_ref vs fd N=%d hw=%d part %d", k->n, k->hw,
                 i + 1);
        tu_check(tu_grad_check(name, c.x[i], nx, dx, fd_loss, &c, 200, 1e-2f, TU_TOL_FD, seed),
                 name);
        free(dx);
    }
    for (int i = 0; i < 3; i++) free(c.x[i]);
    free(c.y); free(c.r);
}

/* ------------------------------------------ acc = 1 adds, on both paths */
static void test_acc(const concat_case *k, uint64_t *seed)
{
    char name[128];
    hyfi_concat_args a = part_args(k, 1);
    size_t ny = (size_t)k->n * a.c_total * k->hw, nx = part_count(&a);
    float *dy = tu_alloc(ny), *base = tu_alloc(nx), *fresh = tu_alloc(nx);
    float *acc1 = tu_alloc(nx), *want = tu_alloc(nx);
    tu_fill(dy, ny, seed, -1.0f, 1.0f);
    tu_fill(base, nx, seed, -1.0f, 1.0f);
    for (int path = 0; path < 2; path++) {
        memcpy(acc1, base, nx * sizeof(float));
        if (path) {
            hyfi_concat_backward_cpu(fresh, dy, &a, 0);
            hyfi_concat_backward_cpu(acc1, dy, &a, 1);
        } else {
            hyfi_concat_backward_ref(fresh, dy, &a, 0);
            hyfi_concat_backward_ref(acc1, dy, &a, 1);
        }
        for (size_t i = 0; i < nx; i++) want[i] = base[i] + fresh[i];
        snprintf(name, sizeof name, "concat_backward acc=1 adds (%s) N=%d hw=%d",
                 path ? "cpu" : "ref", k->n, k->hw);
        tu_check(tu_compare(name, acc1, want, nx, TU_TOL_CPU_VS_REF), name);
    }
    free(dy); free(base); free(fresh); free(acc1); free(want);
}

int main(void)
{
    uint64_t seed = 0xC0C0A7ull;
    for (size_t i = 0; i < NCASES; i++) test_cpu_vs_ref(&cases[i], &seed);
    for (size_t i = 0; i < NCASES; i++) test_fd(&cases[i], &seed);
    for (size_t i = 0; i < NCASES; i++) test_acc(&cases[i], &seed);
    return tu_finish();
}
