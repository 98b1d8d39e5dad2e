/* replica_ref.c: reference of the replica kernels (see kernels.h): slice copies
 * for the chunked gradient all-reduce and the combine of running statistics,
 * element by element, the combine in double. */
#include "kernels.h"

#include <string.h>

/* dst (dst_off + count), src (src_off + count) */
int hyfi_copy_slice_ref(float *dst, const float *src, const hyfi_slice_args *a)
{
    for (size_t i = 0; i < a->count; i++) dst[a->dst_off + i] = src[a->src_off + i];
    return 0;
}

/* x (count) in/out: replica 0's statistic; r0 (count): the step's start;
 * r[0 .. nrep-2] (count): replicas 1 .. nrep-1 */
int hyfi_running_combine_ref(float *x, const float *r0, const float *const *r,
                             const hyfi_rcomb_args *a)
{
    if (a->nrep < 1) return -1;
    for (size_t i = 0; i < a->count; i++) {
        double v = x[i];
        for (int k = 1; k < a->nrep; k++)
            v = a->decay * v + ((double)r[k - 1][i] - a->decay * (double)r0[i]);
        x[i] = (float)v;
    }
    return 0;
}
