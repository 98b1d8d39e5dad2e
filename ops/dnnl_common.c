/* Shared oneDNN plumbing: engine, per-thread stream, descriptors, run helper,
 * per-thread scratch. See dnnl_common.h. */
#include "dnnl_common.h"
#include "kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
#define HYFI_SCRATCH_SLOTS (HYFI_SCRATCH_STAGE + HYFI_SCRATCH_NSTAGE + 1) /* then oneDNN's */
#define SLOT_DNNL (HYFI_SCRATCH_SLOTS - 1)
/* Primitive cache: open addressing over PC_SLOTS, emptied at PC_MAX entries. */
#define PC_SLOTS 1024
#define PC_MAX 768
typedef struct {
    uint64_t hash;
    size_t len;
    unsigned char *key; /* NULL: a free slot */
    hyfi_dnnl_prim p;
} pc_entry;

typedef struct {
    dnnl_stream_t stream;
    float *scratch[HYFI_SCRATCH_SLOTS];
    size_t scratch_count[HYFI_SCRATCH_SLOTS];
    pc_entry *pc; /* PC_SLOTS, allocated on first use */
    int pc_n;
} thread_state;

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

/* Bytes held in scratch slots by all threads, and their high-water mark. */
static atomic_size_t g_scratch_bytes, g_scratch_peak;

static size_t slot_bytes(size_t count) { return ((count * sizeof(float)) + 63) & ~(size_t)63; }

/* A slot's memory: large ones mapped from the kernel and unmapped when freed,
 * so that a trimmed slot (hyfi_cpu_scratch_trim) leaves the process's
 * resident memory at once (the C library keeps freed blocks below its
 * adaptive threshold, up to 32 MB, in its heaps, where they fragment). */
#define SLOT_MAP_MIN ((size_t)1 << 20)

static float *slot_alloc(size_t bytes)
{
    if (bytes < SLOT_MAP_MIN) return aligned_alloc(64, bytes ? bytes : 64);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE); /* fewer faults when it is mapped again */
#endif
    return p;
}

static void slot_free(float *p, size_t count)
{
    if (!p) return;
    const size_t bytes = slot_bytes(count);
    if (bytes < SLOT_MAP_MIN)
        free(p);
    else
        munmap(p, bytes);
}

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

static void prim_destroy(hyfi_dnnl_prim *p)
{
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    if (p->hint) dnnl_primitive_desc_destroy(p->hint);
    p->prim = NULL;
    p->pd = p->hint = NULL;
}

static void pc_clear(thread_state *t)
{
    for (int i = 0; t->pc && i < PC_SLOTS; i++)
        if (t->pc[i].key) {
            prim_destroy(&t->pc[i].p);
            free(t->pc[i].key);
            t->pc[i].key = NULL;
        }
    t->pc_n = 0;
}

static void thread_state_free(void *p)
{
    thread_state *t = p;
    pc_clear(t);
    free(t->pc);
    if (t->stream) dnnl_stream_destroy(t->stream);
    for (int i = 0; i < HYFI_SCRATCH_SLOTS; i++) {
        if (t->scratch[i]) scratch_account(slot_bytes(t->scratch_count[i]), 0);
        slot_free(t->scratch[i], t->scratch_count[i]);
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

/* --------------------------------------------------------- primitive cache */
extern int omp_get_max_threads(void);

static int pc_cap(void) { return hyfi_kernel_settings.dnnl_cache < 0 ? 1 : PC_MAX; }

/* FNV-1a of the thread count and the key */
static uint64_t pc_hash(int nthr, const unsigned char *k, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)nthr;
    h *= 1099511628211ull;
    for (size_t i = 0; i < len; i++) h = (h ^ k[i]) * 1099511628211ull;
    return h;
}

/* The slot of key: its entry, or the free slot where it would go. Stored keys
 * begin with the thread count. */
static pc_entry *pc_slot(thread_state *t, const void *key, size_t len, uint64_t h, int nthr)
{
    for (size_t i = h % PC_SLOTS;; i = (i + 1) % PC_SLOTS) {
        pc_entry *e = &t->pc[i];
        if (!e->key) return e;
        if (e->hash == h && e->len == len + sizeof nthr && !memcmp(e->key, &nthr, sizeof nthr) &&
            !memcmp(e->key + sizeof nthr, key, len))
            return e;
    }
}

const hyfi_dnnl_prim *hyfi_dnnl_cache_find(const void *key, size_t len)
{
    thread_state *t = thread_get();
    if (!t || !t->pc) return NULL;
    const int nthr = omp_get_max_threads();
    pc_entry *e = pc_slot(t, key, len, pc_hash(nthr, key, len), nthr);
    return e->key ? &e->p : NULL;
}

const hyfi_dnnl_prim *hyfi_dnnl_cache_add(const void *key, size_t len, dnnl_primitive_desc_t pd,
                                          dnnl_primitive_desc_t hint)
{
    hyfi_dnnl_prim p = {.pd = pd, .hint = hint};
    thread_state *t = thread_get();
    if (t && !t->pc) t->pc = calloc(PC_SLOTS, sizeof *t->pc);
    if (!t || !t->pc || dnnl_primitive_create(&p.prim, pd) != dnnl_success) {
        p.prim = NULL;
        prim_destroy(&p);
        return NULL;
    }
    if (t->pc_n >= PC_SLOTS - 1) { /* a kernel without hyfi_dnnl_cache_trim */
        prim_destroy(&p);
        return NULL;
    }
    const int nthr = omp_get_max_threads();
    const uint64_t h = pc_hash(nthr, key, len);
    pc_entry *e = pc_slot(t, key, len, h, nthr);
    if (e->key) { /* already there (not looked up first): keep the old one */
        prim_destroy(&p);
        return &e->p;
    }
    e->key = malloc(len + sizeof nthr);
    if (!e->key) {
        prim_destroy(&p);
        return NULL;
    }
    memcpy(e->key, &nthr, sizeof nthr);
    memcpy(e->key + sizeof nthr, key, len);
    e->hash = h;
    e->len = len + sizeof nthr;
    e->p = p;
    t->pc_n++;
    return &e->p;
}

void hyfi_dnnl_cache_trim(void)
{
    thread_state *t = thread_get();
    if (t && t->pc_n >= pc_cap()) pc_clear(t);
}

/* Execute primitive p of descriptor pd with args and its scratchpad, and wait. */
static int prim_exec(dnnl_primitive_t p, const_dnnl_primitive_desc_t pd, int nargs,
                     const dnnl_exec_arg_t *args)
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
        float *q = hyfi_cpu_scratch(SLOT_DNNL, (pbytes + sizeof(float) - 1) / sizeof(float));
        if (!q) return -1;
        if (hyfi_dnnl_mem(&pad, pmd, q)) return -1;
        all[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    }
    dnnl_status_t st = dnnl_primitive_execute(p, s, nargs, all);
    if (st == dnnl_success) st = dnnl_stream_wait(s);
    if (pad) dnnl_memory_destroy(pad);
    return st == dnnl_success ? 0 : -(int)st - 1;
}

int hyfi_dnnl_exec(const hyfi_dnnl_prim *p, int nargs, const dnnl_exec_arg_t *args)
{
    return prim_exec(p->prim, p->pd, nargs, args);
}

int hyfi_dnnl_run(const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args)
{
    dnnl_primitive_t p;
    dnnl_status_t st = dnnl_primitive_create(&p, pd);
    if (st != dnnl_success) return -(int)st - 1;
    const int rc = prim_exec(p, pd, nargs, args);
    dnnl_primitive_destroy(p);
    return rc;
}

int hyfi_dnnl_reorder(dnnl_memory_t src, dnnl_memory_t dst)
{
    const dnnl_memory_desc_t *smd, *dmd;
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(src, &smd));
    HYFI_DNNL_CHECK(dnnl_memory_get_memory_desc(dst, &dmd));
    struct {
        char tag[8];
        dnnl_memory_desc_t s, d;
    } key;
    memset(&key, 0, sizeof key);
    memcpy(key.tag, "reorder", 8);
    key.s = *smd;
    key.d = *dmd;
    const hyfi_dnnl_prim *p = hyfi_dnnl_cache_find(&key, sizeof key);
    if (!p) {
        dnnl_engine_t e = hyfi_dnnl_engine();
        dnnl_primitive_desc_t pd;
        HYFI_DNNL_CHECK(
            dnnl_reorder_primitive_desc_create(&pd, smd, e, dmd, e, hyfi_dnnl_attr()));
        if (!(p = hyfi_dnnl_cache_add(&key, sizeof key, pd, NULL))) return -1;
    }
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    return hyfi_dnnl_exec(p, 2, args);
}

float *hyfi_cpu_scratch(int slot, size_t count)
{
    thread_state *t = thread_get();
    if (!t || slot < 0 || slot >= HYFI_SCRATCH_SLOTS) return NULL;
    if (t->scratch_count[slot] < count) {
        const size_t old = t->scratch[slot] ? slot_bytes(t->scratch_count[slot]) : 0;
        slot_free(t->scratch[slot], t->scratch_count[slot]);
        t->scratch[slot] = slot_alloc(slot_bytes(count));
        t->scratch_count[slot] = t->scratch[slot] ? count : 0;
        scratch_account(old, t->scratch[slot] ? slot_bytes(count) : 0);
    }
    return t->scratch[slot];
}

void hyfi_dnnl_arg_free(hyfi_dnnl_arg *t)
{
    if (t->prim && t->prim != t->user) dnnl_memory_destroy(t->prim);
    if (t->user) dnnl_memory_destroy(t->user);
    t->prim = t->user = NULL;
}

int hyfi_dnnl_scratch_mem(dnnl_memory_t *mem, const dnnl_memory_desc_t *md, int slot)
{
    size_t bytes = dnnl_memory_desc_get_size(md);
    float *p = hyfi_cpu_scratch(slot, (bytes + sizeof(float) - 1) / sizeof(float));
    if (!p) return -1;
    return hyfi_dnnl_mem(mem, md, p);
}

int hyfi_dnnl_arg_in(hyfi_dnnl_arg *t, const dnnl_memory_desc_t *user_md, const void *ptr,
                     const dnnl_memory_desc_t *want, int slot)
{
    int rc = hyfi_dnnl_mem(&t->user, user_md, (void *)ptr);
    if (rc) return rc;
    if (dnnl_memory_desc_equal(user_md, want)) {
        t->prim = t->user;
        return 0;
    }
    if ((rc = hyfi_dnnl_scratch_mem(&t->prim, want, slot))) return rc;
    return hyfi_dnnl_reorder(t->user, t->prim);
}

int hyfi_dnnl_arg_out(hyfi_dnnl_arg *t, const dnnl_memory_desc_t *user_md, void *ptr,
                      const dnnl_memory_desc_t *want, int slot, int acc)
{
    int rc = hyfi_dnnl_mem(&t->user, user_md, ptr);
    if (rc) return rc;
    if (!acc && dnnl_memory_desc_equal(user_md, want)) {
        t->prim = t->user;
        return 0;
    }
    return hyfi_dnnl_scratch_mem(&t->prim, want, slot);
}

void hyfi_cpu_scratch_trim(size_t keep)
{
    pthread_once(&g_key_once, key_create);
    thread_state *t = pthread_getspecific(g_key);
    if (!t) return;
    size_t held = 0;
    for (int i = 0; i < HYFI_SCRATCH_SLOTS; i++) {
        if (!t->scratch[i]) continue;
        const size_t bytes = slot_bytes(t->scratch_count[i]);
        if (bytes > keep / 4) { /* one large slot: a large task's, not kept */
            slot_free(t->scratch[i], t->scratch_count[i]);
            t->scratch[i] = NULL;
            t->scratch_count[i] = 0;
            scratch_account(bytes, 0);
        } else {
            held += bytes;
        }
    }
    while (held > keep) {
        int big = -1;
        for (int i = 0; i < HYFI_SCRATCH_SLOTS; i++)
            if (t->scratch[i] &&
                (big < 0 || t->scratch_count[i] > t->scratch_count[big]))
                big = i;
        if (big < 0) break;
        const size_t bytes = slot_bytes(t->scratch_count[big]);
        slot_free(t->scratch[big], t->scratch_count[big]);
        t->scratch[big] = NULL;
        t->scratch_count[big] = 0;
        scratch_account(bytes, 0);
        held -= bytes;
    }
}

/* oneDNN in Debian is built on the OpenMP runtime: the number of threads of
 * the calling thread's parallel regions is an OpenMP per-thread setting. */
extern void omp_set_num_threads(int n);

void hyfi_cpu_set_threads(int n)
{
    if (n > 0) omp_set_num_threads(n);
}
