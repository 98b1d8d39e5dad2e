/* Shared oneDNN plumbing for the CPU kernels (ops/<op>_cpu.c): one CPU engine
 * for the process, one stream per thread, plain-layout memory descriptors and
 * a small primitive-run helper. No StarPU here.
 *
 * Kernels look their primitives up in a per-thread cache keyed by their shape
 * arguments (hyfi_dnnl_cache_find), and create them on a miss.
 */
#ifndef HYFI_OPS_DNNL_COMMON_H
#define HYFI_OPS_DNNL_COMMON_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

/* Process-wide CPU engine (created on first use; NULL if oneDNN fails). */
dnnl_engine_t hyfi_dnnl_engine(void);
/* This thread's stream on that engine (created on first use). */
dnnl_stream_t hyfi_dnnl_stream(void);

/* Plain descriptors: dims given outermost first. */
int hyfi_dnnl_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                 dnnl_format_tag_t tag);
/* Wrap a user pointer (no copy) in a memory object; caller destroys it. */
int hyfi_dnnl_mem(dnnl_memory_t *mem, const dnnl_memory_desc_t *md, void *ptr);

/* The attributes every primitive descriptor is made with: the scratchpad in
 * user mode, so that hyfi_dnnl_run gives it from the thread's scratch (counted
 * by hyfi_cpu_scratch_bytes). NULL if oneDNN fails. */
const_dnnl_primitive_attr_t hyfi_dnnl_attr(void);

/* Create the primitive for `pd`, execute it with the (arg, memory) pairs (at
 * most HYFI_DNNL_MAX_ARGS - 1) and its scratchpad, wait on the stream, destroy
 * the primitive. Returns 0 or a negative dnnl status. */
#define HYFI_DNNL_MAX_ARGS 16
int hyfi_dnnl_run(const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args);

/* Run a reorder between two memories (e.g. plain <-> blocked layouts), its
 * primitive from the thread's cache. */
int hyfi_dnnl_reorder(dnnl_memory_t src, dnnl_memory_t dst);

/* One tensor argument of a primitive: `user` wraps the caller's buffer, `prim`
 * is what the primitive reads or writes (== user, or scratch in the layout it
 * wants). */
typedef struct {
    dnnl_memory_t user, prim;
} hyfi_dnnl_arg;
void hyfi_dnnl_arg_free(hyfi_dnnl_arg *t);
/* Memory of layout `md` on the thread's scratch slot `slot`. */
int hyfi_dnnl_scratch_mem(dnnl_memory_t *mem, const dnnl_memory_desc_t *md, int slot);
/* Input: wrap `ptr` (layout user_md); reorder it into `want` if that differs. */
int hyfi_dnnl_arg_in(hyfi_dnnl_arg *t, const dnnl_memory_desc_t *user_md, const void *ptr,
                     const dnnl_memory_desc_t *want, int slot);
/* Output: the primitive writes straight into `ptr` when the layouts agree and
 * nothing is accumulated, else into scratch (the caller reorders or adds). */
int hyfi_dnnl_arg_out(hyfi_dnnl_arg *t, const dnnl_memory_desc_t *user_md, void *ptr,
                      const dnnl_memory_desc_t *want, int slot, int acc);

/* The calling thread's primitive cache. oneDNN's own cache is global and keyed
 * by the whole descriptor, so a kernel that creates its descriptor and
 * primitive per call pays 15-30 us for them even on a hit; this cache is
 * keyed by the few bytes that determine the primitive (a kernel's shape
 * arguments) plus the thread's OpenMP thread count, which oneDNN's kernels
 * are made for. A kernel calls hyfi_dnnl_cache_trim first, which empties
 * the cache when it is full; the entries it then finds or adds stay valid until
 * its next call. hyfi_kernel_config.dnnl_cache -1 (hyfi-train:
 * HYFI_DNNL_CACHE=0): emptied at every trim (measurements). */
typedef struct {
    dnnl_primitive_desc_t pd, hint; /* hint: a backward one's forward descriptor, or NULL */
    dnnl_primitive_t prim;
} hyfi_dnnl_prim;
void hyfi_dnnl_cache_trim(void);
/* The entry of key (len bytes), or NULL. */
const hyfi_dnnl_prim *hyfi_dnnl_cache_find(const void *key, size_t len);
/* A new entry for key, owning pd and hint (destroyed here on failure too),
 * with its primitive created; NULL when that fails (or when over a thousand
 * entries were added without a trim). */
const hyfi_dnnl_prim *hyfi_dnnl_cache_add(const void *key, size_t len, dnnl_primitive_desc_t pd,
                                          dnnl_primitive_desc_t hint);
/* hyfi_dnnl_run with the entry's primitive. */
int hyfi_dnnl_exec(const hyfi_dnnl_prim *p, int nargs, const dnnl_exec_arg_t *args);

/* Return -(int)status from the enclosing int function when a dnnl call fails. */
#define HYFI_DNNL_CHECK(call)                                                   \
    do {                                                                        \
        dnnl_status_t hyfi_st_ = (call);                                        \
        if (hyfi_st_ != dnnl_success) return -(int)hyfi_st_ - 1;                \
    } while (0)

/* Scratch buffer for the calling thread, grown as needed (64-byte aligned);
 * `slot` picks one of a few independent buffers: 0 to 3 the kernels',
 * HYFI_SCRATCH_BF16 + 0 and + 1 the bf16 weight and bias of a task
 * (hyfi_ops_bf16_view), HYFI_SCRATCH_STAGE + i the float32 copy of a task's
 * bf16-stored buffer i (hyfi_ops_stage_in). NULL when out of memory. */
#define HYFI_SCRATCH_BF16 4
#define HYFI_SCRATCH_STAGE 6
#define HYFI_SCRATCH_NSTAGE 72 /* a task's buffers at most (HYFI_MAX_TASK_BUFFERS) */
float *hyfi_cpu_scratch(int slot, size_t count);
/* After a task: free the calling thread's slots over keep / 4 (16 MB: a
 * large task's, mapped again when needed), then its largest ones until it
 * holds at most `keep` bytes (HYFI_SCRATCH_KEEP, 64 MB). Slots stay allocated
 * from task to task while they are small, so that tasks of usual sizes
 * allocate nothing (ResNet-50 at 128², batch 8: 54 MB in all); at very large
 * images the sum of every slot's largest size (each grown by another op) was
 * held for the whole run, while one task needs only its own: AmoebaNet-D
 * (6, 64) at 2,048², bf16, 800 MB held, 252 MB at most with the trim, 89-97
 * MB with large slots freed too (its peak 1,711 -> 1,645 MB, same time). Slots
 * of 1 MB or more are mapped with huge pages, so mapping one again costs
 * little (the same run's time unchanged). */
#define HYFI_SCRATCH_KEEP ((size_t)64 << 20)
void hyfi_cpu_scratch_trim(size_t keep);
/* Bytes of scratch the process's threads hold now (peak 0) or held at most
 * (peak 1): layout copies and oneDNN's scratchpads, outside StarPU's data. */
size_t hyfi_cpu_scratch_bytes(int peak);



/* Threads a oneDNN call of the calling thread may use (OpenMP runtime). */
void hyfi_cpu_set_threads(int n);

#endif
