/* Simulation build only (docs/simulation.md): included ahead of the data
 * module's files in hyfi-train's simulation build (-include); nothing in
 * them changes but data_prefetch.c's batches (HYFI_SIM_LAZY, below). A
 * simulation reads no pixel, but the data module's large buffers (a loaded
 * data set) would be really allocated once per rank: malloc (or calloc) of HYFI_SIM_FOLD_MIN bytes
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
/* The prefetched batches' images (data_prefetch.c): the global batch, on
 * every rank. Not folded: SimGrid maps a folded buffer with all its page-table
 * entries filled, 0.2% of its size, and these grow with the ranks (4 D images
 * on each of D ranks: 13 GB of page tables at D = 256 for ResNet at 1,024^2,
 * and most of the CPU time in the kernel). Mapped instead and never written
 * (a simulation decodes no row: data_prefetch.c), so a page costs nothing until
 * read; a rank reads only its own rows. Freed with hyfi_sim_free. */
void *hyfi_sim_lazy(size_t n);
#define HYFI_SIM_LAZY(n) hyfi_sim_lazy(n)

#define malloc(n) hyfi_sim_malloc(n)
#define calloc(n, size) hyfi_sim_calloc(n, size)
#define free(p) hyfi_sim_free(p)

#endif
