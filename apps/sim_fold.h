/* Simulation build only (docs/simulation.md): included ahead of the data
 * module's files in hyfi-train's simulation build (-include), nothing in
 * them changes. A simulation reads no pixel, but the data module's buffers
 * (the prefetched batches: the global batch, twice, on every simulated rank)
 * would be really allocated once per rank: malloc (or calloc) of HYFI_SIM_FOLD_MIN bytes
 * or more from a simulated rank is folded instead (one file mapped over the
 * buffer, StarPU's STARPU_MALLOC_SIMULATION_FOLDED: no real memory, garbage
 * values), and free releases it. Smaller buffers (labels, file lists,
 * permutations) and any allocation from a real thread of the process (the
 * prefetch thread) stay plain malloc. */
#ifndef HYFI_APPS_SIM_FOLD_H
#define HYFI_APPS_SIM_FOLD_H

#include <stdlib.h>

#define HYFI_SIM_FOLD_MIN ((size_t)4 << 20)

void *hyfi_sim_malloc(size_t n);
void *hyfi_sim_calloc(size_t n, size_t size); /* folded alike: not zeroed */
void hyfi_sim_free(void *p);

#define malloc(n) hyfi_sim_malloc(n)
#define calloc(n, size) hyfi_sim_calloc(n, size)
#define free(p) hyfi_sim_free(p)

#endif
