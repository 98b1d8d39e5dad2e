/* batchnorm_cpu_bf16.c: the CPU batch normalisation on bf16 storage (kernels.h
 * "bfloat16"): x, y, dx, dy bf16, statistics, gamma, beta and their gradients
 * float32. The loops of batchnorm_cpu_body.h, each value widened exactly as it
 * is read and rounded to nearest even as it is written: bitwise what staging
 * the buffers in float32 around batchnorm_cpu.c gives, without the two extra
 * passes and the float32 copies (the largest part of bf16's kernel scratch
 * before: docs/results.md). The per-channel sums of plain NCHW widen one row
 * block at a time into a float buffer on the stack and run the float loop. */
#include "kernels.h"

#include <stdint.h>
#include <string.h>

static inline float bn_wide(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t bn_narrow(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t r = nan ? (u | 0x00400000u) : (u + 0x7fffu + ((u >> 16) & 1u));
    return (uint16_t)(r >> 16);
}

static const float *bn_view(float *buf, const uint16_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = bn_wide(p[i]);
    return buf;
}

#define BN_T uint16_t
#define BN_LD(v) bn_wide(v)
#define BN_ST(f) bn_narrow(f)
#define BN_VIEW_DECL(b) float b[HYFI_BN_BLOCK]
#define BN_VIEW(b, p, n) bn_view(b, p, n)
#define BN_NAME(op) hyfi_batchnorm_##op##_bf16
#include "batchnorm_cpu_body.h"
