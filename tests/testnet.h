/* A small network that uses every op once, shared by the engine tests. */
#ifndef HYFI_TESTS_TESTNET_H
#define HYFI_TESTS_TESTNET_H

#include "hyfi.h"

#define TN_BATCH 4
#define TN_CLASSES 5

typedef struct {
    hyfi_graph *g;
    hyfi_tensor *x, *y, *loss, *logits;
} testnet;

/* conv (bias, groups, 1x3), batch norm, relu, max (smooth = 0) or average
 * pooling, add, concat, global average pooling, fc, softmax cross-entropy.
 * Returns 0, or -1 after printing the builder error. */
int testnet_build(hyfi_ctx *ctx, testnet *n, int smooth);
/* A seeded random batch of images and labels. */
void testnet_batch(testnet *n, uint64_t seed);

#endif
