/* replica_cpu.c: CPU path of the replica kernels (see replica_ref.c): memcpy
 * for slices; the combine in double as the reference (R - 1 terms per value,
 * small tensors: batch-norm channels). */
#include "kernels.h"

#include <string.h>

/* dst (dst_off + count), src (src_off + count) */
int hyfi_copy_slice_cpu(float *dst, const float *src, const hyfi_slice_args *a)
{
    if (a->count) memmove(dst + a->dst_off, src + a->src_off, a->count * sizeof(float));
    return 0;
}

/* x (count) in/out, r0 (count), r[0 .. nrep-2] (count) */
int hyfi_running_combine_cpu(float *x, const float *r0, const float *const *r,
                             const hyfi_rcomb_args *a)
{
    return hyfi_running_combine_ref(x, r0, r, a);
}
