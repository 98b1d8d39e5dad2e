/* hyfi-train: batches of a slides data set fed region by region. Instead of
 * a prefetch thread decoding whole images on every rank, each step computes
 * the batch's rows and labels (the prefetcher's order: the permutation of
 * the step's epoch, data.h) on every rank and writes the input with
 * hyfi_set_input_fn: each rank reads from the files only the regions it owns
 * (its tiles, or the whole images of its micro-batches where the input is not
 * tiled), straight into the engine's buffers. */
#ifndef HYFI_APPS_TRAIN_REGIONS_H
#define HYFI_APPS_TRAIN_REGIONS_H

#include "data.h"
#include "hyfi.h"

typedef struct train_regions train_regions;

/* For batches of B images of ds (shuffled with seed when shuffle). */
int train_regions_new(const hyfi_dataset *ds, int B, uint64_t seed, int shuffle,
                      train_regions **out, char *err, size_t errlen);
void train_regions_free(train_regions *tr); /* NULL is fine */
/* Batch `step` (counted as the prefetcher counts): b->y, start, epoch, step
 * and batch set, b->x NULL. */
int train_regions_next(train_regions *tr, uint64_t step, hyfi_batch *b);
/* Write the input x of the batch of the last train_regions_next (collective:
 * every rank calls it). On a failure, train_regions_error says why on the
 * rank whose read failed. */
hyfi_status train_regions_set_input(train_regions *tr, hyfi_graph *g, hyfi_tensor *x);
const char *train_regions_error(const train_regions *tr);

#endif
