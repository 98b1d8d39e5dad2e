/* The shared test network; see testnet.h. */
#include "testnet.h"
#include "testutil.h"

#include <stdio.h>

/* Every op once: conv (bias, groups, 1x3), batch norm, relu, max and average
 * pooling, add, concat, global average pooling, fc, softmax cross-entropy. */
int testnet_build(hyfi_ctx *ctx, testnet *n, int smooth)
{
    if (hyfi_graph_create(ctx, 7, &n->g) != HYFI_OK) return -1;
    hyfi_graph *g = n->g;
    n->x = hyfi_input(g, "x", TN_BATCH, 3, 9, 8);
    n->y = hyfi_labels(g, "y", TN_BATCH);
    hyfi_tensor *h = hyfi_conv2d(g, "c1", n->x, (hyfi_conv2d_params){
        .out_channels = 6, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1, .bias = true});
    h = hyfi_batchnorm(g, "bn1", h, (hyfi_batchnorm_params){0});
    h = hyfi_relu(g, "r1", h);
    hyfi_tensor *a = hyfi_conv2d(g, "c2", h, (hyfi_conv2d_params){
        .out_channels = 6, .kernel_h = 1, .kernel_w = 3, .pad_w = 1, .groups = 3});
    hyfi_tensor *s = hyfi_add(g, "add", a, h);
    hyfi_pool_params pp = {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2,
                           .pad_h = 1, .pad_w = 1};
    hyfi_tensor *p1 = smooth ? hyfi_avgpool(g, "p1", s, pp) : hyfi_maxpool(g, "p1", s, pp);
    pp.count_include_pad = false;
    hyfi_tensor *p2 = hyfi_avgpool(g, "p2", h, pp);
    hyfi_tensor *cat[2] = {p1, p2};
    h = hyfi_concat(g, "cat", cat, 2);
    h = hyfi_conv2d(g, "c3", h, (hyfi_conv2d_params){.out_channels = 8, .kernel_h = 3,
                                                       .kernel_w = 3, .stride_h = 2,
                                                       .stride_w = 2, .pad_h = 1, .pad_w = 1});
    h = hyfi_batchnorm(g, "bn3", h, (hyfi_batchnorm_params){0});
    h = hyfi_global_avgpool(g, "gap", h);
    n->logits = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = TN_CLASSES, .bias = true});
    n->loss = hyfi_softmax_cross_entropy(g, "loss", n->logits, n->y);
    if (hyfi_graph_status(g) != HYFI_OK) {
        printf("build failed: %s\n", hyfi_graph_error(g));
        return -1;
    }
    return 0;
}

void testnet_batch(testnet *n, uint64_t seed)
{
    float x[TN_BATCH * 3 * 9 * 8];
    int32_t y[TN_BATCH];
    uint64_t st = seed;
    tu_fill(x, sizeof x / sizeof *x, &st, -1, 1);
    for (int i = 0; i < TN_BATCH; i++) y[i] = tu_randint(&st, 0, TN_CLASSES - 1);
    hyfi_set_input(n->g, n->x, x, sizeof x / sizeof *x);
    hyfi_set_labels(n->g, n->y, y, TN_BATCH);
}
