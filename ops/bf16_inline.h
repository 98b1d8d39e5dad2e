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

/* 16 (and 8) float32s rounded to bf16, as hyfi_bf16_narrow each: with
 * AVX-512 (BW, VL) one 32 -> 16-bit narrowing (vpmovdw) instead of the
 * compiler's permutes of two half vectors (a blocked batch norm's lanes: 2.5x
 * the float32 loop's time, measured). */
#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
static inline void hyfi_bf16_narrow16(uint16_t *out, const float *in)
{
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(in));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    _mm256_storeu_si256((__m256i *)out, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}
static inline void hyfi_bf16_widen16(float *out, const uint16_t *in)
{
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)in));
    _mm512_storeu_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
}
static inline void hyfi_bf16_widen8(float *out, const uint16_t *in)
{
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)in));
    _mm256_storeu_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
}
static inline void hyfi_bf16_narrow8(uint16_t *out, const float *in)
{
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in));
    const __mmask8 nan = _mm256_cmpgt_epu32_mask(
        _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    r = _mm256_mask_or_epi32(r, nan, u, _mm256_set1_epi32(0x00400000));
    _mm_storeu_si128((__m128i *)out, _mm256_cvtepi32_epi16(_mm256_srli_epi32(r, 16)));
}
#else
static inline void hyfi_bf16_widen16(float *out, const uint16_t *in)
{
    for (int j = 0; j < 16; j++) out[j] = hyfi_bf16_widen(in[j]);
}
static inline void hyfi_bf16_widen8(float *out, const uint16_t *in)
{
    for (int j = 0; j < 8; j++) out[j] = hyfi_bf16_widen(in[j]);
}
static inline void hyfi_bf16_narrow16(uint16_t *out, const float *in)
{
    for (int j = 0; j < 16; j++) out[j] = hyfi_bf16_narrow(in[j]);
}
static inline void hyfi_bf16_narrow8(uint16_t *out, const float *in)
{
    for (int j = 0; j < 8; j++) out[j] = hyfi_bf16_narrow(in[j]);
}
#endif

#endif
