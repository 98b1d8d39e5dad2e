/* convert_ref.c: reference (specification) of bfloat16 rounding. bf16 keeps
 * float32's sign and 8 exponent bits and the top 7 of its 23 fraction bits:
 * a float32 rounded to bf16 is the float32 whose low 16 bits are zero.
 *
 * Rounding is to nearest, ties to even (IEEE's default; what PyTorch's
 * .to(torch.bfloat16), oneDNN's and cuDNN's conversions do): add 0x7fff plus
 * the lowest kept bit, then clear the low 16 bits. Values past bf16's largest
 * finite (about 3.39e38) round to infinity; infinities stay; a NaN stays a
 * NaN (its quiet bit, which bf16 keeps, set), never turning into infinity as
 * the addition would make some of them. */
#include "kernels.h"

#include <string.h>

float hyfi_bf16_round1(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = (u | 0x00400000u) & 0xffff0000u; /* NaN */
    else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* x (count): each value replaced by its bf16 rounding */
int hyfi_bf16_round_ref(float *x, size_t count)
{
    for (size_t i = 0; i < count; i++) x[i] = hyfi_bf16_round1(x[i]);
    return 0;
}

/* out (count) = the float32 of each bf16 in (count): exact */
int hyfi_bf16_to_f32_ref(float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const uint32_t u = (uint32_t)in[i] << 16;
        memcpy(&out[i], &u, sizeof u);
    }
    return 0;
}

/* out (count) = the bf16 of each float32 in (count), rounded as above */
int hyfi_f32_to_bf16_ref(uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const float r = hyfi_bf16_round1(in[i]);
        uint32_t u;
        memcpy(&u, &r, sizeof u);
        out[i] = (uint16_t)(u >> 16);
    }
    return 0;
}
