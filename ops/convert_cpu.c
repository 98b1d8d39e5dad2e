/* convert_cpu.c: bfloat16 rounding on the CPU (the specification:
 * convert_ref.c). The same integer arithmetic, branch-free, on the words of
 * the buffer: the compiler vectorises the loop (16 floats an AVX-512
 * instruction), split over the calling worker's OpenMP threads from
 * ROUND_PAR_MIN elements on (eltwise_cpu.c's rule): a memory-bound pass. */
#include "kernels.h"
#include "isa.h"
#include "bf16_inline.h"

#include <string.h>

#define ROUND_PAR_MIN ((long)1 << 16)

#define round_bits hyfi_bf16_round_bits /* bf16_inline.h */

/* x (count): each value replaced by its bf16 rounding, bitwise as _ref */
int HYFI_ISA(hyfi_bf16_round_cpu)(float *x, size_t count)
{
    uint32_t *w = (uint32_t *)(void *)x; /* float32 and uint32 words: the same bytes */
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= ROUND_PAR_MIN)
    for (long i = 0; i < n; i++) w[i] = round_bits(w[i]);
    return 0;
}

/* The same on the calling thread alone: for threads that are no StarPU worker
 * (the engine's host writes), where an OpenMP team would be a new one whose
 * threads then spin on the workers' cores (measured: rounding each step's
 * input images on the main thread cost ResNet-18 20% of its images/s). */
int HYFI_ISA(hyfi_bf16_round_serial)(float *x, size_t count)
{
    uint32_t *w = (uint32_t *)(void *)x;
    for (size_t i = 0; i < count; i++) w[i] = round_bits(w[i]);
    return 0;
}

/* out (count) = bf16 rounding of x (count) */
int HYFI_ISA(hyfi_bf16_round_copy_cpu)(float *out, const float *x, size_t count)
{
    const uint32_t *u = (const uint32_t *)(const void *)x;
    uint32_t *w = (uint32_t *)(void *)out;
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= ROUND_PAR_MIN)
    for (long i = 0; i < n; i++) w[i] = round_bits(u[i]);
    return 0;
}

/* ---------------------------------------------------------- bf16 storage */
/* The conversions of bf16-stored buffers (kernels read float32): _cpu split
 * over the worker's OpenMP threads, _serial on the calling thread alone. */
static inline uint16_t narrow(uint32_t u) { return (uint16_t)(round_bits(u) >> 16); }

int HYFI_ISA(hyfi_bf16_to_f32_cpu)(float *out, const uint16_t *in, size_t count)
{
    uint32_t *w = (uint32_t *)(void *)out;
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= ROUND_PAR_MIN)
    for (long i = 0; i < n; i++) w[i] = (uint32_t)in[i] << 16;
    return 0;
}

int HYFI_ISA(hyfi_f32_to_bf16_cpu)(uint16_t *out, const float *in, size_t count)
{
    const uint32_t *u = (const uint32_t *)(const void *)in;
    const long n = (long)count;
#pragma omp parallel for simd schedule(static) if (n >= ROUND_PAR_MIN)
    for (long i = 0; i < n; i++) out[i] = narrow(u[i]);
    return 0;
}

int HYFI_ISA(hyfi_bf16_to_f32_serial)(float *out, const uint16_t *in, size_t count)
{
    uint32_t *w = (uint32_t *)(void *)out;
    for (size_t i = 0; i < count; i++) w[i] = (uint32_t)in[i] << 16;
    return 0;
}

int HYFI_ISA(hyfi_f32_to_bf16_serial)(uint16_t *out, const float *in, size_t count)
{
    const uint32_t *u = (const uint32_t *)(const void *)in;
    for (size_t i = 0; i < count; i++) out[i] = narrow(u[i]);
    return 0;
}

#if !defined(HYFI_ISA_BASE) && !defined(HYFI_ISA_V4)
/* compiled once (no AVX-512 build: ops/isa.h) */
int hyfi_isa_avx512(void) { return 0; }
#endif
