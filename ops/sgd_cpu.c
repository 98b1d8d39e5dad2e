/* sgd_cpu.c: CPU path of the PyTorch SGD step (see sgd_ref.c), a plain
 * vectorised loop in float:
 *   g' = g + wd * w;  v = momentum * v + g' (v = g' when momentum == 0,
 *   v may then be NULL);  w -= lr * v.
 * With the health sums (norms) the update and the sums are one pass over
 * vectors of LANES floats: lane sums in float, added up in double per block. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize")
#endif

#include "kernels.h"

#include <string.h>

#define LANES 16
#define BLOCK 4096 /* elements per double-precision partial sum */

static void update(float *w, float *v, const float *g, size_t n, float lr, float mom, float wd)
{
    if (mom != 0.0f) {
        for (size_t i = 0; i < n; i++) {
            float vel = mom * v[i] + (g[i] + wd * w[i]);
            v[i] = vel;
            w[i] -= lr * vel;
        }
    } else if (v) {
        for (size_t i = 0; i < n; i++) {
            float vel = g[i] + wd * w[i];
            v[i] = vel;
            w[i] -= lr * vel;
        }
    } else {
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
    }
}

/* Four floats as one value (GCC/Clang vector extensions: one SSE register on
 * any x86-64); LANES / 4 of them hold the LANES lane sums. */
#define V 4
typedef float f4 __attribute__((vector_size(V * sizeof(float))));

static inline f4 load(const float *p)
{
    f4 x;
    memcpy(&x, p, sizeof x);
    return x;
}

static inline void store(float *p, f4 x) { memcpy(p, &x, sizeof x); }

/* The update of n elements in groups of LANES and, in the same pass, the lane
 * sums of g^2 and of the new w^2 (sg, sw: LANES floats each; element i goes to
 * lane i % LANES). Returns the elements done (n rounded down to LANES). Every
 * element gets the same operations, in the same order, as update(). */
static size_t update_lanes(float *restrict w, float *restrict v, const float *restrict g,
                           size_t n, float lr, float mom, float wd, float *sg, float *sw)
{
    f4 s_g[LANES / V] = {{0}}, s_w[LANES / V] = {{0}};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES / V; j++) {
            const size_t e = i + (size_t)j * V;
            const f4 gi = load(g + e);
            f4 wi = load(w + e), vel = gi + wd * wi;
            if (mom != 0.0f) vel = mom * load(v + e) + vel;
            if (v) store(v + e, vel);
            wi -= lr * vel;
            store(w + e, wi);
            s_g[j] += gi * gi;
            s_w[j] += wi * wi;
        }
    for (int j = 0; j < LANES / V; j++)
        for (int k = 0; k < V; k++) sg[j * V + k] = s_g[j][k], sw[j * V + k] = s_w[j][k];
    return i;
}

/* Blocks per parallel region: their lane sums live on the stack (16 KB). */
#define CHUNK 128
/* Fewer blocks than this in a chunk: one thread (a region costs microseconds). */
#define PAR_MIN 16

/* w (count) and v (count) updated in place, norms (2) or NULL, g (count).
 * Blocks of BLOCK elements are shared among the calling thread's OpenMP
 * threads (the cores its task holds); their lane sums are added up in block
 * order, so the sums do not depend on the thread count. */
int hyfi_sgd_update_cpu(float *w, float *v, float *norms, const float *g, const hyfi_sgd_args *a)
{
    const size_t n = a->count;
    const float lr = a->lr, mom = a->momentum, wd = a->weight_decay;
    const size_t nb = (n + BLOCK - 1) / BLOCK;
    double gg = 0, ww = 0;
    for (size_t c0 = 0; c0 < nb; c0 += CHUNK) {
        const size_t cn = nb - c0 < CHUNK ? nb - c0 : CHUNK;
        float part[CHUNK][2][LANES];
#pragma omp parallel for schedule(static) if (cn >= PAR_MIN)
        for (size_t k = 0; k < cn; k++) {
            const size_t b = (c0 + k) * BLOCK;
            const size_t m = n - b < BLOCK ? n - b : BLOCK;
            float *wb = w + b, *vb = v ? v + b : NULL;
            const float *gb = g + b;
            if (!norms) {
                update(wb, vb, gb, m, lr, mom, wd);
                continue;
            }
            float *sg = part[k][0], *sw = part[k][1];
            size_t i = update_lanes(wb, vb, gb, m, lr, mom, wd, sg, sw);
            if (i < m) update(wb + i, vb ? vb + i : NULL, gb + i, m - i, lr, mom, wd);
            for (; i < m; i++) { /* the tail: lane 0 */
                sg[0] += gb[i] * gb[i];
                sw[0] += wb[i] * wb[i];
            }
        }
        if (norms)
            for (size_t k = 0; k < cn; k++)
                for (int l = 0; l < LANES; l++) gg += part[k][0][l], ww += part[k][1][l];
    }
    if (norms) {
        norms[0] = (float)gg;
        norms[1] = (float)ww;
    }
    return 0;
}
