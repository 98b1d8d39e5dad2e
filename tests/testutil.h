/* Small test harness shared by the op and engine tests: seeded random data,
 * comparisons that print the first values and the worst error, finite
 * differences, and the tolerance table every op test uses. */
#ifndef HYFI_TESTS_TESTUTIL_H
#define HYFI_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Tolerance table: |got - want| <= atol + rtol * |want| elementwise.
 * CPU vs reference: float32 with different summation orders (oneDNN blocks and
 * vectorises reductions). Finite differences: central differences in float32
 * on a loss computed in double, eps chosen per op. */
typedef struct {
    const char *what;
    double rtol, atol;
} tu_tol;

#define TU_TOL_CPU_VS_REF   ((tu_tol){"cpu-vs-ref", 1e-4, 1e-5})
/* oneDNN's Winograd F(4x4, 3x3) convolutions: their transforms add and subtract
 * before the products, so the round-off is about 10x the direct algorithm's
 * (measured: 1.3e-5 to 4.8e-5 absolute on outputs of size ~3 from 288-780
 * products, tests/test_op_conv2d.c) */
#define TU_TOL_WINOGRAD     ((tu_tol){"winograd-vs-ref", 1e-4, 1e-4})
#define TU_TOL_CUDA_VS_CPU  ((tu_tol){"cuda-vs-cpu", 1e-3, 1e-4}) /* TF32 off, but other algorithms */
#define TU_TOL_FD           ((tu_tol){"finite-diff", 2e-2, 2e-3})

/* Deterministic generator (splitmix64); uniform floats in [lo, hi). */
uint64_t tu_next(uint64_t *state);
float tu_uniform(uint64_t *state, float lo, float hi);
void tu_fill(float *x, size_t n, uint64_t *state, float lo, float hi);
int tu_randint(uint64_t *state, int lo, int hi); /* inclusive bounds */

/* Compare arrays; print a one-line verdict with max abs/rel error and, on
 * failure, the first mismatching values. Returns 0 on pass, 1 on failure. */
int tu_compare(const char *name, const float *got, const float *want, size_t n, tu_tol tol);

/* Entries of got outside atol + rtol |want| (the first 3 printed as
 * "  what[i]: got, want want"); *worst is raised to the worst |got - want|.
 * For tests that add up mismatches over many arrays (plans vs one place). */
int tu_count_outside(const char *what, const float *got, const float *want, size_t n,
                     double atol, double rtol, double *worst);

/* Finite-difference gradient check of a scalar function f(ctx) of `param`:
 * perturbs `nsamples` entries (all when nsamples >= n or < 0) by ±eps, compares
 * (f+ - f-)/(2 eps) with analytic[i]. Returns 0 on pass, 1 on failure. */
typedef double (*tu_scalar_fn)(void *ctx);
int tu_grad_check(const char *name, float *param, size_t n, const float *analytic,
                  tu_scalar_fn f, void *ctx, int nsamples, float eps, tu_tol tol,
                  uint64_t *state);

/* Dot product in double, handy for "loss = sum(y * r)" projections. */
double tu_dot(const float *a, const float *b, size_t n);

/* Counters and the closing line "N passed, N failed". */
void tu_check(int failed, const char *name);
int tu_finish(void); /* prints the summary; returns the process exit status */

/* Allocation that aborts the *test* (not the library) when memory runs out. */
float *tu_alloc(size_t n);

#endif
