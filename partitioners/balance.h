/* Contiguous balancing of a chain of layers into stages (layer parallelism).
 * Plain C, no StarPU: the partitioner that turns per-layer costs into a
 * balance (layers per stage). */
#ifndef HYFI_PARTITIONERS_BALANCE_H
#define HYFI_PARTITIONERS_BALANCE_H

#include <stddef.h>

/* Split `n` layers with costs cost[0..n) into `stages` contiguous, non-empty
 * groups minimising the largest group cost (exact dynamic programme, O(stages n^2)).
 * Writes the number of layers of each stage to counts[0..stages). Returns 0, or
 * -1 when stages < 1 or stages > n, or on allocation failure. */
int hyfi_balance_by_cost(const double *cost, int n, int stages, int *counts);

/* Check a user balance: every count >= 1 and the counts sum to n. Returns 0 or
 * -1 and writes a message naming the fix into err. */
int hyfi_balance_check(const int *counts, int stages, int n, char *err, size_t errlen);

#endif
