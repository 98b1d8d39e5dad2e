/* bf16_inline.h: one bfloat16 value's conversions, inline for the kernels that
 * read and write bf16 storage (the specification: convert_ref.c). A bf16 is
 * the high half of its float32 (kernels.h "bfloat16"). */
#ifndef HYFI_BF16_INLINE_H
#define HYFI_BF16_INLINE_H

#include <stdint.h>
#include <string.h>

/* The rounding of one float32's bits: the high half kept, rounded to nearest
 * even; a NaN made quiet (its quiet bit is in the high half), never
 * infinity. Branch-free, so loops over it vectorise. */
static inline uint32_t hyfi_bf16_round_bits(uint32_t u)
{
    const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t r = nan ? (u | 0x00400000u) : (u + 0x7fffu + ((u >> 16) & 1u));
    return r & 0xffff0000u;
}

/* a bf16 as the float32 it stands for (exact) */
static inline float hyfi_bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* a float32 rounded to bf16 */
static inline uint16_t hyfi_bf16_narrow(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(hyfi_bf16_round_bits(u) >> 16);
}

#endif
