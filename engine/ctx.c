/* Context: StarPU (and StarPU-MPI) initialisation and shutdown, worker choice,
 * per-worker set-up (oneDNN threads on CPU workers, cuDNN/cuBLAS handles on
 * CUDA workers). One context per process. */
#include "internal.h"
#ifndef STARPU_SIMGRID
#include "dnnl_common.h"
#endif

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 while a context exists (claimed atomically: one per process). */
static atomic_int g_ctx_alive;


static void set_worker_threads(void *arg)
{
#ifdef STARPU_SIMGRID
    (void)arg; /* a simulation runs no kernel */
#else
    hyfi_cpu_set_threads(*(int *)arg);
#endif
}

hyfi_ctx_config hyfi_ctx_config_default(void)
{
    return (hyfi_ctx_config){.device = HYFI_DEVICE_AUTO, .ncpus = -1, .ncuda = -1, .mpi = -1};
}

/* StarPU and StarPU-MPI read some settings only from the environment, at
 * their initialisation: ctx_create sets them for it, then puts the
 * environment back as it was (no process-wide change stays behind). */
#define ENV_SAVED 6
typedef struct {
    int n;
    struct {
        const char *name;
        char *old; /* NULL: was unset */
    } v[ENV_SAVED];
} env_saved;

/* Set name=value (keeping a value already there unless overwrite); 0, or -1
 * out of memory. */
static int env_set(env_saved *s, const char *name, const char *value, int overwrite)
{
    const char *old = getenv(name);
    if (old && !overwrite) return 0;
    if (s->n == ENV_SAVED) return -1;
    char *keep = old ? strdup(old) : NULL;
    if (old && !keep) return -1;
    s->v[s->n].name = name, s->v[s->n].old = keep, s->n++;
    return setenv(name, value, 1) ? -1 : 0;
}

static void env_restore(env_saved *s)
{
    while (s->n > 0) {
        s->n--;
        if (s->v[s->n].old) setenv(s->v[s->n].name, s->v[s->n].old, 1);
        else unsetenv(s->v[s->n].name);
        free(s->v[s->n].old);
    }
}

static hyfi_status ctx_create(hyfi_ctx **out, const hyfi_ctx_config *cfg_in);

/* Out-of-core: the swap folder exists (created if missing) and is writable;
 * *mb: the size StarPU may put there (swap_mb, or 90% of the free space). */
static hyfi_status swap_check(const hyfi_ctx_config *cfg, long *mb)
{
    const char *dir = cfg->swap_dir;
    if (!*dir) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: swap_dir is empty; give a folder");
    if (mkdir(dir, 0777) && errno != EEXIST)
        return hyfi_fail(HYFI_ERR_IO, "swap folder %s: cannot create it (%s); give a writable "
                                      "folder", dir, strerror(errno));
    if (access(dir, W_OK | X_OK))
        return hyfi_fail(HYFI_ERR_IO, "swap folder %s: not writable (%s); give a writable folder",
                         dir, strerror(errno));
    struct statvfs fs;
    const double avail = statvfs(dir, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : 0;
    if (cfg->swap_mb < 0 || (cfg->swap_mb > 0 && cfg->swap_mb < 16))
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: swap_mb %d: StarPU's disk swap takes at "
                                       "least 16 MB (0: 90%% of the free space)", cfg->swap_mb);
    *mb = cfg->swap_mb > 0 ? cfg->swap_mb : (long)(0.9 * avail / (1 << 20));
    if (*mb < 16) /* (only 90% of the free space: say so, or "17 MB free" reads as enough) */
        return hyfi_fail(HYFI_ERR_IO, "swap folder %s: %.1f MB free, of which StarPU's disk swap "
                                      "would take 90%% (%.1f MB), less than the 16 MB it needs; "
                                      "free some space or give another folder", dir,
                         avail / (1 << 20), 0.9 * avail / (1 << 20));
    return HYFI_OK;
}

/* A "Vm...:" line of /proc/self/status in MB (1,048,576 bytes), 0 if none. */
static double status_mb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double mb = 0;
    const size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) {
            mb = strtod(line + n, NULL) / 1024.0; /* kB */
            break;
        }
    fclose(f);
    return mb;
}

#ifndef STARPU_SIMGRID
/* The buffers StarPU allocates for data handles (activations, gradients,
 * transfers) in CPU-only runs (with CUDA workers StarPU pins them with
 * cudaHostAlloc, page-aligned). Each starts on 64 bytes, a cache line: oneDNN's
 * Winograd kernels load and store aligned vectors (ops/conv2d_cpu.c,
 * "algorithm choice"), and malloc gives 16. Those of HOST_MMAP_MIN bytes or more
 * are their own mappings, returned to the system when freed: glibc's
 * posix_memalign keeps freed large blocks in its heap (its mmap threshold
 * rises with every large block freed), which measured 80-200 MB more resident
 * memory with layer re-materialisation (tests/recompute_memory.sh). A header of
 * HOST_HDR bytes before each buffer says which it is and its size, so that a
 * free without the size (dim 0) is right too. */
#define HOST_HDR ((size_t)64)
#define HOST_MMAP_MIN ((size_t)256 << 10)
#define HOST_MAGIC_MAP 0x68796669u /* "hyfi" */
#define HOST_MAGIC_HEAP 0x68656170u

static int host_alloc(unsigned node, void **A, size_t dim, int flags)
{
    (void)node, (void)flags;
    const size_t total = dim + HOST_HDR;
    char *p;
    if (total >= HOST_MMAP_MIN) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return -ENOMEM;
        p = m;
        ((uint32_t *)p)[0] = HOST_MAGIC_MAP;
    } else {
        void *m = NULL;
        if (posix_memalign(&m, HOST_HDR, total)) return -ENOMEM;
        p = m;
        ((uint32_t *)p)[0] = HOST_MAGIC_HEAP;
    }
    memcpy(p + 8, &total, sizeof total);
    *A = p + HOST_HDR;
    return 0;
}

static int host_free(unsigned node, void *A, size_t dim, int flags)
{
    (void)node, (void)dim, (void)flags;
    if (!A) return 0;
    char *p = (char *)A - HOST_HDR;
    size_t total;
    memcpy(&total, p + 8, sizeof total);
    if (((uint32_t *)p)[0] == HOST_MAGIC_MAP) return munmap(p, total) ? -errno : 0;
    free(p);
    return 0;
}
#endif

hyfi_status hyfi_ctx_create(const hyfi_ctx_config *cfg, hyfi_ctx **out)
{
    if (!out) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: ctx pointer is NULL");
    *out = NULL;
    if (atomic_exchange(&g_ctx_alive, 1))
        return hyfi_fail(HYFI_ERR_STATE, "hyfi_ctx_create: a context already exists in this "
                                         "process; destroy it first (one per process)");
    /* Under mpiexec, the child that names this rank if it dies (sentinel.c):
     * forked before MPI and StarPU start (no threads, no registered memory). */
#ifdef STARPU_SIMGRID
    const int mpi = 0; /* a simulation: no sentinel (its child would watch the simulator) */
#else
    const int mpi = cfg && cfg->mpi >= 0 ? cfg->mpi : hyfi_launched_by_mpiexec();
#endif
    int inited = 0;
    if (mpi) MPI_Initialized(&inited);
    if (mpi && !inited && cfg && cfg->death_notice) hyfi_sentinel_start();
    const hyfi_status s = ctx_create(out, cfg);
    if (s != HYFI_OK) {
        hyfi_sentinel_stop();
        atomic_store(&g_ctx_alive, 0);
    } else if ((*out)->nranks > 1 && !(*out)->fake_ranks) {
        hyfi_sentinel_arm((*out)->rank, (*out)->nranks);
        if (!hyfi_launch_peers_done() && !HYFI_SIMULATION) {
            /* the children's addresses (hyfi_launch_begin gathers them where it runs);
             * collective: every rank, whether its notice runs or not */
            const int R = (*out)->nranks;
            size_t *rows = calloc((size_t)R * HYFI_SENTINEL_ENTRY, sizeof *rows);
            uint64_t *table = calloc((size_t)R * HYFI_SENTINEL_ENTRY, sizeof *table);
            if (rows && table) {
                uint64_t mine[HYFI_SENTINEL_ENTRY];
                hyfi_sentinel_local(mine);
                for (int k = 0; k < HYFI_SENTINEL_ENTRY; k++)
                    rows[(size_t)(*out)->rank * HYFI_SENTINEL_ENTRY + (size_t)k] = (size_t)mine[k];
            }
            /* collective: every rank takes part, with zeros when out of memory */
            if (rows) hyfi_ctx_share_rows(*out, rows, HYFI_SENTINEL_ENTRY);
            if (rows && table) {
                for (size_t k = 0; k < (size_t)R * HYFI_SENTINEL_ENTRY; k++) table[k] = rows[k];
                if (table[0]) hyfi_sentinel_peers(table, R);
            }
            free(rows);
            free(table);
        }
    } else {
        hyfi_sentinel_stop();
    }
    return s;
}

/* The checks of hyfi_ctx_config_check; *swap_mb: the swap size it allows. */
static hyfi_status config_check(const hyfi_ctx_config *cfg, long *swap_mb)
{
    *swap_mb = 0;
    if (cfg->watchdog_s < 0)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: watchdog_s %d must be >= 0 (0: off)",
                         cfg->watchdog_s);
    if (cfg->device != HYFI_DEVICE_AUTO && cfg->device != HYFI_DEVICE_CPU &&
        cfg->device != HYFI_DEVICE_CUDA)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: unknown device %d; use "
                                       "HYFI_DEVICE_AUTO, _CPU or _CUDA", (int)cfg->device);
    if (cfg->device == HYFI_DEVICE_CUDA && !HYFI_HAVE_CUDA && !HYFI_SIMULATION)
        return hyfi_fail(HYFI_ERR_UNSUPPORTED, "CUDA requested but this hyfi was built without "
                                               "CUDA codelets; rebuild with nvcc and cuDNN, or "
                                               "use the CPU device");
    if (cfg->device == HYFI_DEVICE_CUDA && cfg->ncuda != 0 && hyfi_ops_cuda_devices() <= 0)
        return hyfi_fail(HYFI_ERR_UNSUPPORTED,
                         "device cuda: no CUDA GPU is visible to this process (no GPU, no "
                         "driver, or CUDA_VISIBLE_DEVICES empty); use device cpu or auto");
    if (cfg->mem_limit_mb < 0)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: mem_limit_mb %d must be >= 0 (0: none)",
                         cfg->mem_limit_mb);
    if (cfg->submit_window < 0 || cfg->submit_window == 1)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: submit_window %d must be 0 (a whole "
                                       "program at once) or at least 2 tasks",
                         cfg->submit_window);
    if (cfg->swap_dir) {
        hyfi_status ss = swap_check(cfg, swap_mb);
        if (ss != HYFI_OK) return ss;
    } else if (cfg->swap_mb) {
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_create: swap_mb %d needs swap_dir (where to "
                                       "swap)", cfg->swap_mb);
    }
    if (cfg->trace_dir) {
#ifndef STARPU_USE_FXT
        return hyfi_fail(HYFI_ERR_UNSUPPORTED, "tracing asked for (%s) but this StarPU was built "
                                               "without FxT; rebuild it with --with-fxt "
                                               "(scripts/setup.sh does)", cfg->trace_dir);
#else
        char raw[4096];
        snprintf(raw, sizeof raw, "%s/raw", cfg->trace_dir);
        if ((mkdir(cfg->trace_dir, 0777) && errno != EEXIST) ||
            (mkdir(raw, 0777) && errno != EEXIST) || access(raw, W_OK | X_OK))
            return hyfi_fail(HYFI_ERR_IO, "trace folder %s: cannot create it or write in it "
                                          "(%s); give a writable path", raw, strerror(errno));
#endif
    }
#ifdef STARPU_SIMGRID
    {
        char why[512];
        if (hyfi_ops_sim_models(cfg->sim_analytic, cfg->sim_task_us, why, sizeof why))
            return hyfi_fail(HYFI_ERR_ARG, "%s", why);
    }
#endif
    return HYFI_OK;
}

hyfi_status hyfi_ctx_config_check(const hyfi_ctx_config *cfg_in)
{
    const hyfi_ctx_config cfg = cfg_in ? *cfg_in : hyfi_ctx_config_default();
    long mb;
    return config_check(&cfg, &mb);
}

static hyfi_status ctx_create(hyfi_ctx **out, const hyfi_ctx_config *cfg_in)
{
    const hyfi_ctx_config cfg = cfg_in ? *cfg_in : hyfi_ctx_config_default();
    long swap_mb = 0;
    {
        const hyfi_status cs = config_check(&cfg, &swap_mb);
        if (cs != HYFI_OK) return cs;
    }
    hyfi_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_ctx_create: out of memory");
    ctx->swap_node = -1;
#ifdef STARPU_SIMGRID
    /* Simulation: every rank is an SMPI process (starpu_smpirun), with no
     * launcher environment to look at. */
    ctx->mpi = cfg.mpi < 0 ? 1 : cfg.mpi;
#else
    ctx->mpi = cfg.mpi < 0 ? hyfi_launched_by_mpiexec() : cfg.mpi;
#endif
    ctx->verbose = cfg.verbose;
    /* the kernels' choices, process-wide, before any kernel runs */
    hyfi_kernel_configure(&(hyfi_kernel_config){.conv_algo = cfg.conv_algo,
                                                .conv_plain = cfg.conv_plain,
                                                .bf16_conv = cfg.bf16_conv,
                                                .dnnl_cache = cfg.no_dnnl_cache ? -1 : 0,
                                                .cudnn_find = cfg.no_cudnn_find ? -1 : 0});
    ctx->log = cfg.log;
    ctx->phys_mem_mb = cfg.phys_mem_mb;
    ctx->submit_window = cfg.submit_window;
    ctx->log_user = cfg.log_user;
    if (ctx->mpi) {
        /* A previous MPI context's hyfi_ctx_destroy (or the program) finalised
         * MPI, which cannot be initialised again: MPI_Init_thread would abort
         * the process. */
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) {
            free(ctx);
            return hyfi_fail(HYFI_ERR_STATE,
                             "hyfi_ctx_create: MPI has been finalised in this process (by the "
                             "previous context's hyfi_ctx_destroy) and cannot be initialised "
                             "again; create one MPI context per process (mpi = 0 still works)");
        }
    }

    /* Measured on 2 cores: unbound workers train 1.5x faster than bound ones,
     * because the submitting and data-loading threads then do not queue
     * behind a pinned worker. */
    env_saved envs = {0};
    int env_rc = !cfg.bind_workers ? env_set(&envs, "STARPU_WORKERS_NOBIND", "1", 0) : 0;
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    /* Default scheduler: with CUDA workers dmdas, the perf-model based dmda
     * (a task goes where it finishes first) with each worker's queue ordered
     * by priority: the places' tasks are pinned to their GPUs (plan.c), and
     * the priorities order each GPU's critical path (simulated 8 H100 running
     * 4 GEMS units: 83 images/s against dmda's 64, steady from step to step;
     * docs/results.md, "GEMS places pinned"); with identical CPU workers only, a
     * central queue (the worker that frees a layer's successor usually runs
     * it, with every core it can borrow) measured faster than dmda
     * (docs/bench-cpu.md). "prio" is that queue ordered by task priority, so
     * that pipeline schedules (engine/compile.c) run their earlier events
     * first; StarPU's "eager" would ignore the priorities. */
    const int want_cuda = cfg.device != HYFI_DEVICE_CPU && cfg.ncuda != 0 &&
                          hyfi_ops_cuda_devices() > 0;
    conf.sched_policy_name = cfg.scheduler ? cfg.scheduler : want_cuda ? "dmdas" : "prio";
    if (cfg.ncpus > 0) conf.ncpus = cfg.ncpus;
    if (cfg.device == HYFI_DEVICE_CPU) conf.ncuda = 0;
    else if (cfg.ncuda >= 0) conf.ncuda = cfg.ncuda;
    if (cfg.device == HYFI_DEVICE_CUDA && cfg.ncpus <= 0) conf.ncpus = 0;
    conf.nopencl = 0;

    /* FxT: StarPU reads these at initialisation (TOOLCHAIN: 1.4 records only
     * with STARPU_FXT_TRACE=1). Each rank writes raw/prof_file_<user>_<rank>. */
    if (cfg.trace_dir) {
#ifdef STARPU_USE_FXT
        char raw[4096];
        snprintf(raw, sizeof raw, "%s/raw/", cfg.trace_dir); /* made by config_check */
        ctx->trace_dir = strdup(cfg.trace_dir);
        env_rc |= env_set(&envs, "STARPU_FXT_TRACE", "1", 1);
        env_rc |= env_set(&envs, "STARPU_FXT_PREFIX", raw, 1);
        /* StarPU applies STARPU_FXT_EVENTS from the start only when told so
         * before its initialisation */
        if (cfg.trace_events) {
            env_rc |= env_set(&envs, "STARPU_FXT_EVENTS", cfg.trace_events, 1);
            if (!env_rc) starpu_fxt_autostart_profiling(1);
        }
#endif
    }
    int rc;
    /* With a trace, the context initialises MPI itself, so that after
     * StarPU's shutdown (which writes the trace files) the ranks can meet in a
     * barrier before rank 0 merges them. */
    if (ctx->mpi && ctx->trace_dir) {
        int inited = 0, prov = 0;
        MPI_Initialized(&inited);
        if (!inited) {
            MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov);
            ctx->own_mpi = 1;
        }
    }
    /* StarPU reads its memory limit at initialisation (a later context
     * without a limit has none: the environment is put back below) */
    if (cfg.mem_limit_mb > 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", cfg.mem_limit_mb);
        env_rc |= env_set(&envs, "STARPU_LIMIT_CPU_MEM", v, 1);
    }
    if (ctx->mpi && cfg.comm_stats) env_rc |= env_set(&envs, "STARPU_MPI_STATS", "1", 1);
    if (env_rc) {
        env_restore(&envs);
        if (ctx->own_mpi) MPI_Finalize();
        free(ctx->trace_dir);
        free(ctx);
        return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_ctx_create: out of memory");
    }

    {
        const char *lim = getenv("STARPU_LIMIT_CPU_MEM");
        ctx->mem_limit_mb = lim && atol(lim) > 0 ? atol(lim) : 0;
    }
#ifndef STARPU_SIMGRID
    /* CPU-only runs: StarPU's buffers from hyfi's allocator (host_alloc);
     * with CUDA StarPU's own (pinned) */
    starpu_malloc_set_hooks(want_cuda ? NULL : host_alloc, want_cuda ? NULL : host_free);
#endif
    if (ctx->mpi) {
        /* StarPU-MPI counts bytes per destination only when told so before
         * its initialisation, STARPU_MPI_STATS above (and prints the counts
         * at shutdown). */
        /* MPI may run already: started here (a trace), by hyfi_launch_begin,
         * or by the application; StarPU-MPI starts it only where none did */
        int inited = 0;
        MPI_Initialized(&inited);
        rc = starpu_mpi_init_conf(NULL, NULL, !inited, MPI_COMM_WORLD, &conf);
    } else {
        rc = starpu_init(&conf);
    }
    env_restore(&envs);
    if (rc != 0) {
        int mpi = ctx->mpi;
        if (ctx->own_mpi) MPI_Finalize();
        free(ctx->trace_dir);
        free(ctx);
        if (rc == -ENODEV && cfg.device == HYFI_DEVICE_CUDA)
            return hyfi_fail(HYFI_ERR_UNSUPPORTED,
                             "device cuda: StarPU found no CUDA worker (no GPU visible, or "
                             "STARPU_NCUDA=0); use device cpu or auto");
        if (rc == -ENODEV)
            return hyfi_fail(HYFI_ERR_UNSUPPORTED,
                             "StarPU found no worker for this configuration (device %s, ncpus "
                             "%d); allow CPU workers or check STARPU_NCPU/STARPU_NCUDA",
                             cfg.device == HYFI_DEVICE_CUDA ? "cuda" : "cpu/auto", cfg.ncpus);
        return hyfi_fail(HYFI_ERR_RUNTIME, "StarPU%s initialisation failed (%d: %s)",
                         mpi ? "-MPI" : "", rc, strerror(-rc));
    }
    if (cfg.swap_dir) {
        /* a disk memory node: StarPU evicts data there when main memory is at the limit
         * (it measures the disk's bandwidth first: a few 16 MB writes) */
        ctx->swap_mb = swap_mb;
        ctx->swap_node = starpu_disk_register(&starpu_disk_unistd_ops, (void *)cfg.swap_dir,
                                              (starpu_ssize_t)swap_mb << 20);
        if (ctx->swap_node < 0) {
            const int code = ctx->swap_node;
            if (ctx->mpi) starpu_mpi_shutdown();
            else starpu_shutdown();
            if (ctx->own_mpi) MPI_Finalize();
            free(ctx->trace_dir);
            free(ctx);
            return hyfi_fail(HYFI_ERR_IO, "swap folder %s: StarPU could not register it as a disk "
                                          "memory node (%d); give another folder",
                             cfg.swap_dir, code);
        }
    }
    ctx->start_rss_mb = status_mb("VmRSS:");
    ctx->ncpu = (int)starpu_cpu_worker_get_count();
    ctx->ncuda = (int)starpu_cuda_worker_get_count();
    /* the CUDA workers and their memory, for the plan (which calls no StarPU) */
    ctx->cuda_worker = calloc((size_t)(ctx->ncuda > 0 ? ctx->ncuda : 1), sizeof *ctx->cuda_worker);
    ctx->cuda_mem = calloc((size_t)(ctx->ncuda > 0 ? ctx->ncuda : 1), sizeof *ctx->cuda_mem);
    if (!ctx->cuda_worker || !ctx->cuda_mem) {
        free(ctx->cuda_worker);
        free(ctx->cuda_mem);
        ctx->cuda_worker = NULL;
        ctx->cuda_mem = NULL;
        ctx->ncuda = 0;
    }
    for (int k = 0; k < ctx->ncuda; k++) {
        const int w = starpu_worker_get_by_type(STARPU_CUDA_WORKER, k);
        ctx->cuda_worker[k] = w;
        const starpu_ssize_t total =
            w >= 0 ? starpu_memory_get_total(starpu_worker_get_memory_node(w)) : -1;
        ctx->cuda_mem[k] = total > 0 ? (double)total : 0.0;
    }
    ctx->comm_stats = cfg.comm_stats && ctx->mpi;
    if (ctx->mpi) {
        starpu_mpi_comm_rank(MPI_COMM_WORLD, &ctx->rank);
        starpu_mpi_comm_size(MPI_COMM_WORLD, &ctx->nranks);
        /* StarPU-MPI's STARPU_MPI_FAKE_SIZE / _RANK: one process stands for
         * one rank of a larger run; StarPU-MPI makes no transfer, hyfi no
         * collective, and what the rank would receive is zeros (keyed.c,
         * hyfi_fake_fill): its steps run its own share, on values that mean
         * nothing. Not in a simulation, whose ranks are SimGrid's actors. */
#ifndef STARPU_SIMGRID
        int inited = 0, real = 0;
        if (MPI_Initialized(&inited) == MPI_SUCCESS && inited &&
            MPI_Comm_size(MPI_COMM_WORLD, &real) == MPI_SUCCESS)
            ctx->fake_ranks = ctx->nranks > 1 && real == 1;
#endif
    } else {
        ctx->rank = 0;
        ctx->nranks = 1;
    }
    if (cfg.device == HYFI_DEVICE_CUDA && ctx->ncuda == 0) {
        if (ctx->mpi) starpu_mpi_shutdown();
        else starpu_shutdown();
        if (ctx->own_mpi) MPI_Finalize();
        free(ctx->trace_dir);
        free(ctx->cuda_worker);
        free(ctx->cuda_mem);
        free(ctx);
        return hyfi_fail(HYFI_ERR_UNSUPPORTED,
                         "device cuda: StarPU found no CUDA worker (no GPU visible, or "
                         "STARPU_NCUDA=0); use device cpu or auto");
    }
    /* The cores of this process: the machine's, shared by the ranks that
     * mpiexec started on it (MPICH's MPI_LOCALNRANKS). Oversubscribed OpenMP
     * teams spin against each other: 2 ranks with 2 threads each on 2 cores
     * trained 20x slower than with 1 each. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *lr = getenv("MPI_LOCALNRANKS");
    ctx->local_ranks = ctx->mpi && lr && atoi(lr) > 0 ? atoi(lr) : 0;
    cores = cores > 0 ? cores / (ctx->local_ranks ? ctx->local_ranks : 1) : 1;
    ctx->cores = cores > 0 ? (int)cores : 1;
    ctx->cpu_threads_set = cfg.cpu_threads > 0;
    ctx->cpu_threads = cfg.cpu_threads > 0 ? cfg.cpu_threads
                                           : (int)((cores > 0 ? cores : 1) /
                                                   (ctx->ncpu > 0 ? ctx->ncpu : 1));
    if (ctx->cpu_threads < 1) ctx->cpu_threads = 1;
    if (ctx->ncpu > 0)
        starpu_execute_on_each_worker(set_worker_threads, &ctx->cpu_threads, STARPU_CPU);
    {
        ctx->lend_min_bytes = cfg.lend_min_bytes < 0    ? 0
                              : cfg.lend_min_bytes == 0 ? 1
                                                        : (size_t)cfg.lend_min_bytes;
        hyfi_ops_cores_init(ctx->ncpu, ctx->cpu_threads, ctx->lend_min_bytes);
        /* The thread that submits a program needs a core: where the CPU
         * workers' kernel threads fill every core, kernels starting meanwhile
         * run one thread fewer (docs/architecture.md, "The submitting thread's
         * core"). Only where the thread counts are hyfi's to vary (several CPU
         * workers lending cores or one of them holding all); fixed ones (one
         * CPU worker, cpu_threads set, no lending) keep runs bitwise
         * reproducible. hyfi_ctx_config.no_submit_cap: off. */
        ctx->submit_cap = ctx->ncpu > 1 && ctx->ncpu * ctx->cpu_threads >= ctx->cores &&
                          !ctx->cpu_threads_set && ctx->lend_min_bytes > 0 && !cfg.no_submit_cap;
    }
    rc = hyfi_ops_init();
    if (rc != 0) {
        hyfi_ops_fini();
        if (ctx->mpi) starpu_mpi_shutdown();
        else starpu_shutdown();
        if (ctx->own_mpi) MPI_Finalize();
        free(ctx->trace_dir);
        free(ctx->cuda_worker);
        free(ctx->cuda_mem);
        free(ctx);
        return hyfi_fail(HYFI_ERR_RUNTIME, "creating cuDNN/cuBLAS handles on the CUDA workers "
                                           "failed (code %d)", rc);
    }
    /* A peer that stops or dies leaves the other ranks waiting forever in
     * StarPU-MPI: a watchdog thread ends the job instead (watchdog.c). */
    hyfi_status ws = HYFI_OK;
    /* Not in a simulation: simulated ranks cannot hang on a peer, and its
     * thread would call MPI outside SMPI's ranks. */
    ctx->finalize_limit_s = HYFI_SIMULATION ? 0 : cfg.watchdog_s;
    if (ctx->mpi && ctx->nranks > 1 && cfg.watchdog_s > 0 && !HYFI_SIMULATION &&
        (ws = hyfi_watchdog_start(ctx, cfg.watchdog_s)) != HYFI_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", hyfi_last_error());
        hyfi_ops_fini();
        starpu_mpi_shutdown();
        if (ctx->own_mpi) MPI_Finalize();
        free(ctx->trace_dir);
        free(ctx->cuda_worker);
        free(ctx->cuda_mem);
        free(ctx);
        return hyfi_fail(ws, "%s", why);
    }
    if (ctx->verbose)
        hyfi_ctx_log(ctx, HYFI_LOG_INFO, "rank %d/%d, %d CPU workers x %d threads, %d CUDA "
                     "workers, scheduler %s", ctx->rank, ctx->nranks, ctx->ncpu,
                ctx->cpu_threads, ctx->ncuda,
                getenv("STARPU_SCHED") ? getenv("STARPU_SCHED") : conf.sched_policy_name);
    /* MPI started by hyfi_launch_begin is this context's to finalise */
    if (ctx->mpi && hyfi_launch_take()) ctx->own_mpi = 1;
    *out = ctx;
    return HYFI_OK;
}

void hyfi_ctx_destroy(hyfi_ctx *ctx)
{
    if (!ctx) return;
    /* the last transfers may wait for peers: under the watchdog, which stops
     * before MPI is finalised */
    hyfi_wait_begin(ctx, "the shutdown (hyfi_ctx_destroy)");
    if (ctx->mpi) starpu_mpi_wait_for_all(MPI_COMM_WORLD);
    else starpu_task_wait_for_all();
    hyfi_wait_end(ctx);
    hyfi_watchdog_stop(ctx);
    hyfi_ops_fini();
    hyfi_trace_finish(ctx);
    if (ctx->mpi) starpu_mpi_shutdown();
    else starpu_shutdown();
    /* every rank has written its trace file: rank 0 may merge after this */
    if (ctx->own_mpi) {
        MPI_Barrier(MPI_COMM_WORLD);
        hyfi_mpi_finalize_timed(ctx->finalize_limit_s, ctx->rank, ctx->nranks, ctx->log,
                                ctx->log_user);
    }
    hyfi_records_free(ctx);
    free(ctx->trace_dir);
    free(ctx->cuda_worker);
    free(ctx->cuda_mem);
    free(ctx);
    hyfi_sentinel_stop();
    atomic_store(&g_ctx_alive, 0);
}

int hyfi_ctx_rank(const hyfi_ctx *ctx) { return ctx ? ctx->rank : 0; }

void hyfi_note_compiled_memory(hyfi_ctx *ctx)
{
    const double grown = status_mb("VmRSS:") - ctx->start_rss_mb -
                         (double)starpu_memory_get_used(STARPU_MAIN_RAM) / 1048576.0;
    if (grown > ctx->graph_rss_mb) ctx->graph_rss_mb = grown;
}

hyfi_status hyfi_memory_stats_get(const hyfi_ctx *ctx, const hyfi_graph *g,
                                  hyfi_memory_stats *out)
{
    if (!ctx || !out) return hyfi_fail(HYFI_ERR_ARG, "hyfi_memory_stats_get: ctx or out is NULL");
    memset(out, 0, sizeof *out);
    out->peak_mb = status_mb("VmHWM:");
    out->start_mb = ctx->start_rss_mb;
#ifndef STARPU_SIMGRID
    out->scratch_mb = (double)hyfi_cpu_scratch_bytes(1) / 1048576.0;
#endif
    out->limit_mb = (double)ctx->mem_limit_mb;
    out->data_mb = g ? hyfi_plan_rank_bytes(g, ctx->rank) / 1048576.0 : 0;
    out->graph_mb = ctx->graph_rss_mb;
    const double data = out->limit_mb > 0 ? out->limit_mb : out->data_mb;
    const int places = g ? hyfi_plan_rank_places(g, ctx->rank) : 1;
    /* CUDA workers load cuDNN and cuBLAS at their first task, after the start
     * was measured: on an H100 the small CNN's process peaked 113 MB above the
     * bound without this */
    out->runtime_mb = 64 + 0.03 * data + 32.0 * (places > 0 ? places : 1) + 256.0 * ctx->ncuda;
    out->bound_mb = data + out->start_mb + out->graph_mb + out->scratch_mb + out->runtime_mb;
    return HYFI_OK;
}
int hyfi_ctx_nranks(const hyfi_ctx *ctx) { return ctx ? ctx->nranks : 1; }
int hyfi_ctx_ncpu_workers(const hyfi_ctx *ctx) { return ctx ? ctx->ncpu : 0; }
int hyfi_ctx_ncuda_workers(const hyfi_ctx *ctx) { return ctx ? ctx->ncuda : 0; }

hyfi_status hyfi_ctx_comm_bytes(const hyfi_ctx *ctx, size_t *sent, int nranks)
{
    if (!ctx || !sent) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_comm_bytes: ctx or sent is NULL");
    if (nranks != ctx->nranks)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_comm_bytes: sent[] has %d entries, the run has "
                                       "%d ranks", nranks, ctx->nranks);
    memset(sent, 0, (size_t)nranks * sizeof *sent);
    if (!ctx->mpi) return HYFI_OK;
    if (!ctx->comm_stats)
        return hyfi_fail(HYFI_ERR_STATE, "hyfi_ctx_comm_bytes: create the context with "
                                         "comm_stats = 1 to count the bytes sent");
    starpu_mpi_comm_stats_retrieve(sent);
    return HYFI_OK;
}
