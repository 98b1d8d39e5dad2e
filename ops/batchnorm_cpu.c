/* batchnorm_cpu.c: CPU batch normalisation in plain C with OpenMP.
 *
 * The formulas are those of batchnorm_ref.c. Channels are independent, so the
 * channel loop is split over the calling worker's OpenMP threads
 * (hyfi_cpu_set_threads); each channel plane x[n, c, :, :] is contiguous and
 * its inner loops are SIMD reductions. Sums are kept in float over one plane
 * row block (at most HYFI_BN_BLOCK values) and in double across blocks, and the
 * statistics are taken about a per-channel shift (the channel's first value),
 * so one read of x gives an accurate mean and variance.
 *
 * Why not oneDNN: its batch normalisation on plain NCHW (the layout hyfi's
 * tensors have between tasks) measured 1.5-2x slower than these loops for the
 * backward of ResNet-110 v2's layers on 2 cores (docs/results.md); the loops
 * also add into dx / dgamma / dbeta directly (acc bits) instead of going
 * through a scratch buffer.
 *
 * Training forward: 2 passes over x (statistics, then y). Backward: 2 passes
 * over x and dy (sums, then dx).
 *
 * Fused ReLU (a->relu, engine/layout.c's hyfi_fuse_plan): the forwards
 * write max(0, y) in the same pass (the same y as without fusion, bit for
 * bit), and the backward reads that output and masks dy by it in its two
 * passes: 10 passes over the activations for batch norm + ReLU instead of
 * 13, and one task instead of two each way. Its results are ReLU's backward
 * followed by the plain backward's bit for bit (NCHW: both sum through
 * chan_block_sums).
 *
 * Blocked layouts (blk = B > 0, nChw8c / nChw16c, between oneDNN
 * convolutions: hyfi_layout_plan): the same formulas over one block of B
 * channels at a time, whose values sit side by side, so the inner loops run
 * over the B channels (SIMD lanes) and the sums are per lane, taken per
 * (channel block, image) pair and added over the images in order (the
 * threads take whole blocks, or share the pairs where there are fewer blocks
 * than threads).
 *
 * The loops themselves are in batchnorm_cpu_body.h, shared with the bf16
 * storage kernels (batchnorm_cpu_bf16.c).
 */
#include "kernels.h"

#include <string.h>
#include "isa.h"

/* float32 storage: the kernels of batchnorm_cpu_body.h on float buffers */
#define BN_T float
#define BN_LD(v) (v)
#define BN_ST(f) (f)
#define BN_STN(p, v, B) memcpy((p), (v), (size_t)(B) * sizeof(float))
#define BN_LDN(v, p, B) memcpy((v), (p), (size_t)(B) * sizeof(float))
#define BN_VIEW_DECL(b) (void)0
#define BN_VIEW(b, p, n) (p)
#define BN_NAME(op) HYFI_ISA(hyfi_batchnorm_##op##_cpu)
#include "batchnorm_cpu_body.h"
