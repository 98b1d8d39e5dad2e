/* batchnorm_cpu_bf16.c: the CPU batch normalisation on bf16 storage (kernels.h
 * "bfloat16"): x, y, dx, dy bf16, statistics, gamma, beta and their gradients
 * float32. The loops of batchnorm_cpu_body.h, each value widened exactly as it
 * is read and rounded to nearest even as it is written: bitwise what staging
 * the buffers in float32 around batchnorm_cpu.c gives, without the two extra
 * passes and the float32 copies (the largest part of bf16's kernel scratch
 * before: docs/results.md). The per-channel sums of plain NCHW widen one row
 * block at a time into a float buffer on the stack and run the float loop. */
#include "kernels.h"
#include "isa.h"
#include "bf16_inline.h"

#include <stdint.h>
#include <string.h>


static const float *bn_view(float *buf, const uint16_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = hyfi_bf16_widen(p[i]);
    return buf;
}

#define BN_T uint16_t
#define BN_LD(v) hyfi_bf16_widen(v)
#define BN_ST(f) hyfi_bf16_narrow(f)
#define BN_LDN(v, p, B)                                                                            \
    do {                                                                                           \
        if ((B) == 16) hyfi_bf16_widen16((v), (p));                                                \
        else if ((B) == 8) hyfi_bf16_widen8((v), (p));                                             \
        else for (int j_ = 0; j_ < (B); j_++) (v)[j_] = hyfi_bf16_widen((p)[j_]);                  \
    } while (0)
#define BN_STN(p, v, B)                                                                            \
    do {                                                                                           \
        if ((B) == 16) hyfi_bf16_narrow16((p), (v));                                               \
        else if ((B) == 8) hyfi_bf16_narrow8((p), (v));                                            \
        else for (int j_ = 0; j_ < (B); j_++) (p)[j_] = hyfi_bf16_narrow((v)[j_]);                 \
    } while (0)
#define BN_VIEW_DECL(b) float b[HYFI_BN_BLOCK]
#define BN_VIEW(b, p, n) bn_view(b, p, n)
#define BN_NAME(op) HYFI_ISA(hyfi_batchnorm_##op##_bf16)
#include "batchnorm_cpu_body.h"
