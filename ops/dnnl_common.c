/* Shared oneDNN plumbing: engine, per-thread stream, descriptors, run helper,
 * per-thread scratch. See dnnl_common.h. */
#include "dnnl_common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static dnnl_engine_t g_engine;
static pthread_once_t g_engine_once = PTHREAD_ONCE_INIT;

static void engine_create(void)
{
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
}

dnnl_engine_t hyfi_dnnl_engine(void)
{
    pthread_once(&g_engine_once, engine_create);
    return g_engine;
}

/* Every primitive's scratchpad is hyfi's (user mode): in a scratch slot of the
 * calling thread, so that it is counted (hyfi_cpu_scratch_bytes) and not held
 * by oneDNN's cached primitives. */
static dnnl_primitive_attr_t g_attr;
static pthread_once_t g_attr_once = PTHREAD_ONCE_INIT;

static void attr_create(void)
{
    if (dnnl_primitive_attr_create(&g_attr) != dnnl_success) {
        g_attr = NULL;
        return;
    }
    if (dnnl_primitive_attr_set_scratchpad_mode(g_attr, dnnl_scratchpad_mode_user) !=
        dnnl_success) {
        dnnl_primitive_attr_destroy(g_attr);
        g_attr = NULL;
    }
}

const_dnnl_primitive_attr_t hyfi_dnnl_attr(void)
{
    pthread_once(&g_attr_once, attr_create);
    return g_attr;
}

/* Per-thread state (stream and scratch buffers), freed when the thread ends.
 * The last slot holds oneDNN's scratchpad (hyfi_dnnl_run). */
#define HYFI_SCRATCH_SLOTS 5
#define SLOT_DNNL (HYFI_SCRATCH_SLOTS - 1)
typedef struct {
    dnnl_stream_t stream;
    float *scratch[HYFI_SCRATCH_SLOTS];
    size_t scratch_count[HYFI_SCRATCH_SLOTS];
} thread_state;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

/* Bytes held in scratch slots by all threads, and their high-water mark. */
static atomic_size_t g_scratch_bytes, g_scratch_peak;

static size_t slot_bytes(size_t count) { return ((count * sizeof(float)) + 63) & ~(size_t)63; }

static void scratch_account(size_t freed, size_t added)
{
    size_t now = atomic_fetch_add(&g_scratch_bytes, added) + added;
    if (freed) now = atomic_fetch_sub(&g_scratch_bytes, freed) - freed;
    size_t peak = atomic_load(&g_scratch_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_scratch_peak, &peak, now)) {
    }
}

size_t hyfi_cpu_scratch_bytes(int peak)
{
    return peak ? atomic_load(&g_scratch_peak) : atomic_load(&g_scratch_bytes);
}

static void thread_state_free(void *p)
{
    thread_state *t = p;
    if (t->stream) dnnl_stream_destroy(t->stream);
    for (int i = 0; i < HYFI_SCRATCH_SLOTS; i++) {
        if (t->scratch[i]) scratch_account(slot_bytes(t->scratch_count[i]), 0);
        free(t->scratch[i]);
    }
    free(t);
}

static void key_create(void) { pthread_key_create(&g_key, thread_state_free); }

static thread_state *thread_get(void)
{
    pthread_once(&g_key_once, key_create);
    thread_state *t = pthread_getspecific(g_key);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (t && pthread_setspecific(g_key, t) != 0) {
            free(t);
            t = NULL;
        }
    }
    return t;
}

dnnl_stream_t hyfi_dnnl_stream(void)
{
    thread_state *t = thread_get();
    if (!t) return NULL;
    if (!t->stream) {
        dnnl_engine_t e = hyfi_dnnl_engine();
        if (!e || dnnl_stream_create(&t->stream, e, dnnl_stream_default_flags) != dnnl_success)
            t->stream = NULL;
    }
    return t->stream;
}

int hyfi_dnnl_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                 dnnl_format_tag_t tag)
{
    HYFI_DNNL_CHECK(dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tag));
    return 0;
}

int hyfi_dnnl_mem(dnnl_memory_t *mem, const dnnl_memory_desc_t *md, void *ptr)
{
    dnnl_engine_t e = hyfi_dnnl_engine();
    if (!e) return -1;
    HYFI_DNNL_CHECK(dnnl_memory_create(mem, md, e, ptr));
    return 0;
}

int hyfi_dnnl_run(const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args)
{
    dnnl_stream_t s = hyfi_dnnl_stream();
    if (!s || nargs < 0 || nargs >= HYFI_DNNL_MAX_ARGS) return -1;
    /* the scratchpad the primitive asks for (user mode, hyfi_dnnl_attr) */
    dnnl_exec_arg_t all[HYFI_DNNL_MAX_ARGS];
    memcpy(all, args, (size_t)nargs * sizeof *args);
    dnnl_memory_t pad = NULL;
    const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    const size_t pbytes = pmd ? dnnl_memory_desc_get_size(pmd) : 0;
    if (pbytes > 0) {
        float *p = hyfi_cpu_scratch(SLOT_DNNL, (pbytes + sizeof(float) - 1) / sizeof(float));
        if (!p) return -1;
        if (hyfi_dnnl_mem(&pad, pmd, p)) return -1;
        all[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    }
    dnnl_primitive_t p;
    dnnl_status_t st = dnnl_primitive_create(&p, pd);
    if (st == dnnl_success) {
        st = dnnl_primitive_execute(p, s, nargs, all);
        if (st == dnnl_success) st = dnnl_stream_wait(s);
        dnnl_primitive_destroy(p);
    }
    if (pad) dnnl_memory_destroy(pad);
    return st == dnnl_success ? 0 : -(int)st - 1;
}

int hyfi_dnnl_reorder(dnnl_memory_t src, dnnl_memory_t dst)
{
    const dnnl_memory_desc_t *smd, *dmd;
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(src, &smd));
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_engine_t e = hyfi_dnnl_engine();
    dnnl_primitive_desc_t pd;
    HYFI_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, smd, e, dmd, e, hyfi_dnnl_attr()));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    int rc = hyfi_dnnl_run(pd, 2, args);
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

float *hyfi_cpu_scratch(int slot, size_t count)
{
    thread_state *t = thread_get();
    if (!t || slot < 0 || slot >= HYFI_SCRATCH_SLOTS) return NULL;
    if (t->scratch_count[slot] < count) {
        const size_t old = t->scratch[slot] ? slot_bytes(t->scratch_count[slot]) : 0;
        free(t->scratch[slot]);
        size_t bytes = slot_bytes(count);
        t->scratch[slot] = aligned_alloc(64, bytes ? bytes : 64);
        t->scratch_count[slot] = t->scratch[slot] ? count : 0;
        scratch_account(old, t->scratch[slot] ? slot_bytes(count) : 0);
    }
    return t->scratch[slot];
}

/* oneDNN in Debian is built on the OpenMP runtime: the number of threads of
 * the calling thread's parallel regions is an OpenMP per-thread setting. */
extern void omp_set_num_threads(int n);

void hyfi_cpu_set_threads(int n)
{
    if (n > 0) omp_set_num_threads(n);
}
