/* test_op_eltwise.c: element-wise ops (relu, add, accumulate, fill).
 * (1) CPU vs reference on sizes 1, 17 and 1000003 (the large one takes the
 * oneDNN relu path); (2) reference backwards vs finite differences of the
 * reference forwards (relu inputs kept away from the kink at 0); (3) acc = 1
 * adds to what is there, on both paths. */
#include "kernels.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t sizes[] = {1, 17, 1000003};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Values in [-1, -0.1] U [0.1, 1]: no relu kink within a finite-difference step. */
static void fill_away_from_zero(float *x, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        float m = tu_uniform(seed, 0.1f, 1.0f);
        x[i] = (tu_next(seed) & 1) ? m : -m;
    }
}

/* ------------------------------------------------------- CPU vs reference */
static void test_cpu_vs_ref(size_t n, uint64_t *seed)
{
    char name[96];
    float *x = tu_alloc(n), *y_ref = tu_alloc(n), *y_cpu = tu_alloc(n);
    float *b = tu_alloc(n), *base = tu_alloc(n);
    tu_fill(x, n, seed, -1.0f, 1.0f);
    tu_fill(b, n, seed, -1.0f, 1.0f);
    tu_fill(base, n, seed, -1.0f, 1.0f);

    /* relu forward (and in place) */
    hyfi_relu_forward_ref(y_ref, x, n);
    tu_check(hyfi_relu_forward_cpu(y_cpu, x, n) != 0, "relu_forward_cpu rc");
    snprintf(name, sizeof name, "relu_forward cpu/ref n=%zu", n);
    tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);
    memcpy(y_cpu, x, n * sizeof(float));
    tu_check(hyfi_relu_forward_cpu(y_cpu, y_cpu, n) != 0, "relu_forward_cpu in place rc");
    snprintf(name, sizeof name, "relu_forward in place cpu/ref n=%zu", n);
    tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);

    /* relu backward, acc 0 and 1; y is the relu output (has exact zeros) */
    float *y = tu_alloc(n);
    memcpy(y, y_ref, n * sizeof(float));
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(y_ref, base, n * sizeof(float));
        memcpy(y_cpu, base, n * sizeof(float));
        hyfi_relu_backward_ref(y_ref, b, y, n, acc);
        tu_check(hyfi_relu_backward_cpu(y_cpu, b, y, n, acc) != 0, "relu_backward_cpu rc");
        snprintf(name, sizeof name, "relu_backward cpu/ref n=%zu acc=%d", n, acc);
        tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);
    }

    /* add */
    hyfi_add_forward_ref(y_ref, x, b, n);
    tu_check(hyfi_add_forward_cpu(y_cpu, x, b, n) != 0, "add_forward_cpu rc");
    snprintf(name, sizeof name, "add_forward cpu/ref n=%zu", n);
    tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);

    /* accumulate, acc 0 and 1 */
    for (int acc = 0; acc <= 1; acc++) {
        memcpy(y_ref, base, n * sizeof(float));
        memcpy(y_cpu, base, n * sizeof(float));
        hyfi_accumulate_ref(y_ref, x, n, acc);
        tu_check(hyfi_accumulate_cpu(y_cpu, x, n, acc) != 0, "accumulate_cpu rc");
        snprintf(name, sizeof name, "accumulate cpu/ref n=%zu acc=%d", n, acc);
        tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);
    }

    /* fill */
    hyfi_fill_ref(y_ref, -0.375f, n);
    tu_check(hyfi_fill_cpu(y_cpu, -0.375f, n) != 0, "fill_cpu rc");
    snprintf(name, sizeof name, "fill cpu/ref n=%zu", n);
    tu_check(tu_compare(name, y_cpu, y_ref, n, TU_TOL_CPU_VS_REF), name);

    free(x); free(y); free(y_ref); free(y_cpu); free(b); free(base);
}

/* ------------------------------------------------------ finite differences */
typedef struct {
    const float *a, *b, *r; /* b: second addend (add only); r: projection */
    float *y;
    size_t n;
    int op; /* 0 relu, 1 add (gradient with respect to a) */
} fd_ctx;

static double fd_loss(void *p)
{
    fd_ctx *c = p;
    if (c->op == 0) hyfi_relu_forward_ref(c->y, c->a, c->n);
    else hyfi_add_forward_ref(c->y, c->a, c->b, c->n);
    return tu_dot(c->y, c->r, c->n);
}

static void test_fd(size_t n, uint64_t *seed)
{
    char name[96];
    float *x = tu_alloc(n), *b = tu_alloc(n), *r = tu_alloc(n), *y = tu_alloc(n);
    float *dx = tu_alloc(n);
    fill_away_from_zero(x, n, seed);
    tu_fill(b, n, seed, -1.0f, 1.0f);
    tu_fill(r, n, seed, -1.0f, 1.0f);
    int samples = n > 2000 ? 500 : -1;

    /* relu: dL/dx = relu_backward(dy = r, y = relu(x)) */
    fd_ctx c = {x, b, r, y, n, 0};
    hyfi_relu_forward_ref(y, x, n);
    float *yk = tu_alloc(n);
    memcpy(yk, y, n * sizeof(float));
    hyfi_relu_backward_ref(dx, r, yk, n, 0);
    snprintf(name, sizeof name, "relu_backward_ref vs fd n=%zu", n);
    tu_check(tu_grad_check(name, x, n, dx, fd_loss, &c, samples, 1e-2f, TU_TOL_FD, seed), name);

    /* add: dL/da = accumulate(dst, r, acc = 0) (the backward of add is a copy) */
    c.op = 1;
    hyfi_accumulate_ref(dx, r, n, 0);
    snprintf(name, sizeof name, "add backward (accumulate_ref) vs fd n=%zu", n);
    tu_check(tu_grad_check(name, x, n, dx, fd_loss, &c, samples, 1e-2f, TU_TOL_FD, seed), name);

    free(x); free(b); free(r); free(y); free(yk); free(dx);
}

/* ------------------------------------------ acc = 1 adds, on both paths */
static void test_acc(size_t n, uint64_t *seed)
{
    char name[96];
    float *dy = tu_alloc(n), *y = tu_alloc(n), *base = tu_alloc(n);
    float *fresh = tu_alloc(n), *acc1 = tu_alloc(n), *want = tu_alloc(n);
    tu_fill(dy, n, seed, -1.0f, 1.0f);
    tu_fill(y, n, seed, -1.0f, 1.0f);
    hyfi_relu_forward_ref(y, y, n);
    tu_fill(base, n, seed, -1.0f, 1.0f);
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "cpu" : "ref";
        for (int op = 0; op < 2; op++) {
            memcpy(acc1, base, n * sizeof(float));
            if (op == 0) {
                if (path) {
                    hyfi_relu_backward_cpu(fresh, dy, y, n, 0);
                    hyfi_relu_backward_cpu(acc1, dy, y, n, 1);
                } else {
                    hyfi_relu_backward_ref(fresh, dy, y, n, 0);
                    hyfi_relu_backward_ref(acc1, dy, y, n, 1);
                }
            } else {
                if (path) {
                    hyfi_accumulate_cpu(fresh, dy, n, 0);
                    hyfi_accumulate_cpu(acc1, dy, n, 1);
                } else {
                    hyfi_accumulate_ref(fresh, dy, n, 0);
                    hyfi_accumulate_ref(acc1, dy, n, 1);
                }
            }
            for (size_t i = 0; i < n; i++) want[i] = base[i] + fresh[i];
            snprintf(name, sizeof name, "%s acc=1 adds (%s) n=%zu",
                     op ? "accumulate" : "relu_backward", pn, n);
            tu_check(tu_compare(name, acc1, want, n, TU_TOL_CPU_VS_REF), name);
        }
    }
    free(dy); free(y); free(base); free(fresh); free(acc1); free(want);
}

int main(void)
{
    uint64_t seed = 0x5EED0E17ull;
    for (size_t s = 0; s < NSIZES; s++) test_cpu_vs_ref(sizes[s], &seed);
    test_fd(1, &seed);
    test_fd(17, &seed);
    test_fd(100003, &seed);
    for (size_t s = 0; s < NSIZES; s++) test_acc(sizes[s], &seed);
    return tu_finish();
}
