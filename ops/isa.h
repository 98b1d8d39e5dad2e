/* isa.h: the element-wise and batch-norm CPU files (convert_cpu.c,
 * eltwise_cpu.c, eltwise_cpu_bf16.c, pool_cpu_bf16.c, batchnorm_cpu.c,
 * batchnorm_cpu_bf16.c) are compiled twice on x86-64 (ops/meson.build): for
 * the baseline instruction set and for x86-64-v4 (AVX-512), their public
 * functions named name_base and name_v4 (HYFI_ISA), and isa_dispatch.c
 * defines each public name, calling the AVX-512 build where the CPU and the
 * OS have it (once per process). Why: narrowing float32 words to bf16 halves
 * has no vector form before AVX-512 (no 32 -> 16-bit truncation), so the
 * baseline build's bf16 loops stay scalar: a bf16 ReLU took 5x the float32
 * one's time; with AVX-512 the same source runs at the float32 speed
 * (512K values, 2-core EPYC: 118 -> 20 us; float32 21 us). ResNet-50 at
 * 128², batch 8, bf16: batch norm 318 -> 193 ms and ReLU 99 -> 32 ms per 12
 * steps, 52.7 -> 67 images/s.
 *
 * All are compiled without contraction (-ffp-contract=off). The element-wise
 * files have no floating-point reductions, so both builds give the same bits
 * (tests/test_op_convert.c compares them). Batch norm's per-lane sums
 * (omp simd reductions) follow the vector width, so its sums' order, like
 * oneDNN's kernels', depends on the CPU: every process on one kind of CPU
 * runs the same build, and the float32 and bf16 batch norms the same one
 * (their bitwise agreement, test_op_convert, holds on each). Other builds
 * compile the files once, under their public names. */
#ifndef HYFI_OPS_ISA_H
#define HYFI_OPS_ISA_H

#if defined(HYFI_ISA_V4)
#define HYFI_ISA(name) name##_v4
#elif defined(HYFI_ISA_BASE)
#define HYFI_ISA(name) name##_base
#else
#define HYFI_ISA(name) name
#endif

#endif
