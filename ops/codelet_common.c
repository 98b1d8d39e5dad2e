/* Codelet support: failure reporting, per-CUDA-worker handles, footprints. */
#include "codelet_common.h"
#ifndef STARPU_SIMGRID
#include "dnnl_common.h"
#endif

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_err_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_err[256];
static int g_err_set;

void hyfi_ops_report(const char *name, int rc)
{
    if (rc == 0) return;
    pthread_mutex_lock(&g_err_lock);
    if (!g_err_set) {
        snprintf(g_err, sizeof g_err, "kernel %s failed with code %d on worker %d (%s)", name,
                 rc, starpu_worker_get_id(),
                 starpu_worker_get_type(starpu_worker_get_id()) == STARPU_CUDA_WORKER ? "CUDA"
                                                                                      : "CPU");
        g_err_set = 1;
    }
    pthread_mutex_unlock(&g_err_lock);
}

/* 'w' or 'r' for a mode: written (W or REDUX in it), read (R alone); '?' else. */
static char mode_letter(enum starpu_data_access_mode m)
{
    if (m & (STARPU_W | STARPU_REDUX)) return 'w';
    return (m & STARPU_R) && !(m & STARPU_SCRATCH) ? 'r' : '?';
}

int hyfi_ops_buffers_ok(void *buffers[], const char *codelet, const char *head, int n, char rep,
                        const char *tail)
{
    const struct starpu_task *task = starpu_task_get_current();
    if (!task) return 1;
    const int nh = (int)strlen(head), nt = (int)strlen(tail);
    if (n < 0) n = 0;
    const int want = nh + n + nt, got = (int)STARPU_TASK_GET_NBUFFERS(task);
    int ok = got == want || got == want + 1;
    for (int i = 0; ok && i < want; i++) {
        const char c = i < nh ? head[i] : i < nh + n ? rep : tail[i - nh - n];
        ok = mode_letter(STARPU_TASK_GET_MODE(task, i)) == c;
    }
    if (ok && got == want + 1) { /* the 1F1B pipeline token: one float */
        const enum starpu_data_access_mode m = STARPU_TASK_GET_MODE(task, want);
        ok = (m == STARPU_R || m == (STARPU_RW | STARPU_COMMUTE)) &&
             STARPU_VECTOR_GET_NX(buffers[want]) == 1;
    }
    if (ok) return 1;
    char sig[72], modes[72];
    int k = 0;
    for (int i = 0; i < want && k < (int)sizeof sig - 4; i++)
        sig[k++] = i < nh ? head[i] : i < nh + n ? rep : tail[i - nh - n];
    if (k < want) sig[k++] = '.', sig[k++] = '.', sig[k++] = '.';
    sig[k] = 0;
    k = 0;
    for (int i = 0; i < got && k < (int)sizeof modes - 4; i++)
        modes[k++] = mode_letter(STARPU_TASK_GET_MODE(task, i));
    if (k < got) modes[k++] = '.', modes[k++] = '.', modes[k++] = '.';
    modes[k] = 0;
    pthread_mutex_lock(&g_err_lock);
    if (!g_err_set) {
        snprintf(g_err, sizeof g_err, "codelet %s: task %s has buffers \"%s\", takes \"%s\" "
                 "(w written, r read; then optionally the pipeline token): an engine bug",
                 codelet, task->name ? task->name : "?", modes, sig);
        g_err_set = 1;
    }
    pthread_mutex_unlock(&g_err_lock);
    return 0;
}

int hyfi_ops_take_error(char *msg, size_t len)
{
    pthread_mutex_lock(&g_err_lock);
    int had = g_err_set;
    if (had && msg && len) snprintf(msg, len, "%s", g_err);
    g_err_set = 0;
    pthread_mutex_unlock(&g_err_lock);
    return had;
}

/* ------------------------------------------------------------- bfloat16 */
static atomic_int g_bf16_used;

void hyfi_ops_bf16_used(void) { atomic_store(&g_bf16_used, 1); }

void hyfi_ops_round_outputs(void *buffers[])
{
#ifdef STARPU_SIMGRID
    (void)buffers;
#else
    if (!atomic_load_explicit(&g_bf16_used, memory_order_relaxed)) return;
    struct starpu_task *task = starpu_task_get_current();
    if (!task) return;
    const unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
    for (unsigned i = 0; i < nb; i++) {
        if (!(STARPU_TASK_GET_MODE(task, i) & STARPU_W)) continue;
        const hyfi_handle_info *info = starpu_data_get_user_data(STARPU_TASK_GET_HANDLE(task, i));
        if (!info || !info->bf16 || STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) != sizeof(float))
            continue;
        hyfi_bf16_round_cpu(HYFI_F(i), STARPU_VECTOR_GET_NX(buffers[i]));
    }
#endif
}

void **hyfi_ops_stage_in(void *buffers[], const char *codelet)
{
#ifdef STARPU_SIMGRID
    (void)codelet;
    return buffers;
#else
    if (!atomic_load_explicit(&g_bf16_used, memory_order_relaxed)) return buffers;
    struct starpu_task *task = starpu_task_get_current();
    if (!task) return buffers;
    const unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
    static _Thread_local struct starpu_vector_interface iface[HYFI_SCRATCH_NSTAGE];
    static _Thread_local void *staged[HYFI_SCRATCH_NSTAGE];
    int any = 0;
    for (unsigned i = 0; i < nb; i++) any |= STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) == 2;
    if (!any) return buffers;
    if (nb > HYFI_SCRATCH_NSTAGE) {
        hyfi_ops_report(codelet, -1);
        return NULL;
    }
    for (unsigned i = 0; i < nb; i++) {
        staged[i] = buffers[i];
        if (STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) != 2) continue;
        const size_t n = STARPU_VECTOR_GET_NX(buffers[i]);
        float *s = hyfi_cpu_scratch(HYFI_SCRATCH_STAGE + (int)i, n);
        if (!s) {
            hyfi_ops_report(codelet, -1);
            return NULL;
        }
        if (STARPU_TASK_GET_MODE(task, i) & STARPU_R)
            hyfi_bf16_to_f32_cpu(s, (const uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]), n);
        iface[i] = *(struct starpu_vector_interface *)buffers[i];
        iface[i].ptr = (uintptr_t)s;
        iface[i].elemsize = sizeof(float);
        staged[i] = &iface[i];
    }
    return staged;
#endif
}

unsigned hyfi_ops_bf16_mask(void *buffers[])
{
    if (!atomic_load_explicit(&g_bf16_used, memory_order_relaxed)) return 0;
    struct starpu_task *task = starpu_task_get_current();
    const unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    unsigned mask = 0;
    for (unsigned i = 0; i < nb && i < 32; i++)
        if (STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) == sizeof(uint16_t)) mask |= 1u << i;
    return mask;
}

int hyfi_ops_all_bf16(void *buffers[])
{
    struct starpu_task *task = starpu_task_get_current();
    unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
    /* a trailing one-float buffer is the pipeline token or a recompute fence
     * (hyfi_ops_buffers_ok), which no kernel reads */
    if (nb > 1 && STARPU_VECTOR_GET_NX(buffers[nb - 1]) == 1 &&
        STARPU_VECTOR_GET_ELEMSIZE(buffers[nb - 1]) == sizeof(float))
        nb--;
    const unsigned all = nb < 32 ? (1u << nb) - 1u : 0;
    return nb > 0 && all && (hyfi_ops_bf16_mask(buffers) & all) == all;
}

void hyfi_ops_stage_out(void *buffers[], void **staged)
{
#ifndef STARPU_SIMGRID
    if (staged != buffers) {
        struct starpu_task *task = starpu_task_get_current();
        const unsigned nb = task ? STARPU_TASK_GET_NBUFFERS(task) : 0;
        for (unsigned i = 0; i < nb; i++)
            if (staged[i] != buffers[i] && (STARPU_TASK_GET_MODE(task, i) & STARPU_W))
                hyfi_f32_to_bf16_cpu((uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]),
                                     (const float *)STARPU_VECTOR_GET_PTR(staged[i]),
                                     STARPU_VECTOR_GET_NX(buffers[i]));
    }
#endif
    hyfi_ops_round_outputs(buffers);
}

int hyfi_ops_is_u16(void *buffers[], int i)
{
#ifdef STARPU_SIMGRID
    (void)buffers, (void)i;
    return 0;
#else
    if (STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) == sizeof(uint16_t)) return 1;
    struct starpu_task *task = starpu_task_get_current();
    const hyfi_handle_info *info =
        task ? starpu_data_get_user_data(STARPU_TASK_GET_HANDLE(task, i)) : NULL;
    return info && info->bf16 && STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) == sizeof(float) &&
           i < HYFI_SCRATCH_NSTAGE;
#endif
}

const uint16_t *hyfi_ops_u16_view(void *buffers[], int i)
{
#ifdef STARPU_SIMGRID
    (void)buffers, (void)i;
    return NULL;
#else
    if (!hyfi_ops_is_u16(buffers, i)) return NULL;
    if (STARPU_VECTOR_GET_ELEMSIZE(buffers[i]) == sizeof(uint16_t))
        return (const uint16_t *)STARPU_VECTOR_GET_PTR(buffers[i]);
    const size_t n = STARPU_VECTOR_GET_NX(buffers[i]);
    uint16_t *s = (uint16_t *)hyfi_cpu_scratch(HYFI_SCRATCH_STAGE + i, (n + 1) / 2);
    if (s) hyfi_f32_to_bf16_cpu(s, HYFI_F(i), n); /* bf16 values: exact */
    return s;
#endif
}

const float *hyfi_ops_bf16_view(void *buffers[], int i, int slot)
{
#ifdef STARPU_SIMGRID
    (void)buffers, (void)i, (void)slot;
    return NULL;
#else
    if (slot < 0 || slot > 1) return NULL;
    const size_t n = STARPU_VECTOR_GET_NX(buffers[i]);
    float *s = hyfi_cpu_scratch(HYFI_SCRATCH_BF16 + slot, n);
    if (s) hyfi_bf16_round_copy_cpu(s, HYFI_F(i), n);
    return s;
#endif
}

/* The arguments' bytes a footprint always hashes: the size of hyfi_task_args
 * while a plan took at most 16 tiles. The argument block grew with the tile
 * limit (the batch-norm combines' counts per tile); hashing its new zero tail
 * too would give every task a new footprint and orphan every calibrated model
 * in perfmodels/. So the tail is hashed only where a byte of it is set (the
 * combines of more than 37 tiles). */
#define FOOTPRINT_ARG_BYTES 320

uint32_t hyfi_ops_footprint(struct starpu_task *task)
{
    const unsigned char *arg = task->cl_arg;
    size_t n = task->cl_arg_size;
    if (n > FOOTPRINT_ARG_BYTES) {
        size_t k = FOOTPRINT_ARG_BYTES;
        while (k < n && !arg[k]) k++;
        if (k == n) n = FOOTPRINT_ARG_BYTES;
    }
    uint32_t h = starpu_hash_crc32c_be_n(task->cl_arg, n, 0);
    const unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
    for (unsigned i = 0; i < nb; i++)
        h = starpu_hash_crc32c_be(
            (uint32_t)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i)), h);
    return h;
}

#if HYFI_HAVE_CUDA
static hyfi_cuda_env g_cuda_env[STARPU_NMAXWORKERS];
static int g_cuda_init_rc[STARPU_NMAXWORKERS];

static void cuda_env_init_on_worker(void *arg)
{
    (void)arg;
    int id = starpu_worker_get_id();
    g_cuda_init_rc[id] = hyfi_cuda_env_init(&g_cuda_env[id], starpu_cuda_get_local_stream());
}

static void cuda_env_fini_on_worker(void *arg)
{
    (void)arg;
    hyfi_cuda_env_fini(&g_cuda_env[starpu_worker_get_id()]);
}

hyfi_cuda_env *hyfi_ops_cuda_env(void)
{
    return &g_cuda_env[starpu_worker_get_id()];
}

int hyfi_ops_init(void)
{
    if (starpu_cuda_worker_get_count() == 0) return 0;
    starpu_execute_on_each_worker(cuda_env_init_on_worker, NULL, STARPU_CUDA);
    for (int i = 0; i < STARPU_NMAXWORKERS; i++)
        if (g_cuda_init_rc[i]) return g_cuda_init_rc[i];
    return 0;
}

void hyfi_ops_fini(void)
{
    if (starpu_cuda_worker_get_count() == 0) return;
    starpu_execute_on_each_worker(cuda_env_fini_on_worker, NULL, STARPU_CUDA);
}
#else
int hyfi_ops_init(void) { return 0; }
void hyfi_ops_fini(void) {}
#endif

#ifdef STARPU_SIMGRID
void hyfi_ops_sim_nop(void *buffers[], void *cl_arg)
{
    (void)buffers;
    (void)cl_arg;
}

/* ----------------------------------------------- analytic models (simulation) */
/* Every codelet with a model of its own. */
static struct starpu_codelet *const g_sim_codelets[] = {
    &hyfi_cl_conv2d_forward, &hyfi_cl_conv2d_backward_data, &hyfi_cl_conv2d_backward_weight,
    &hyfi_cl_conv2d_forward_add,
    &hyfi_cl_batchnorm_forward_train, &hyfi_cl_batchnorm_forward_eval,
    &hyfi_cl_batchnorm_backward, &hyfi_cl_relu_forward, &hyfi_cl_relu_backward,
    &hyfi_cl_add_forward, &hyfi_cl_accumulate, &hyfi_cl_fill, &hyfi_cl_maxpool_forward,
    &hyfi_cl_maxpool_backward, &hyfi_cl_avgpool_forward, &hyfi_cl_avgpool_backward,
    &hyfi_cl_gap_forward, &hyfi_cl_gap_backward, &hyfi_cl_concat_forward,
    &hyfi_cl_concat_backward, &hyfi_cl_fc_forward, &hyfi_cl_fc_backward_data,
    &hyfi_cl_fc_backward_weight, &hyfi_cl_xent_forward, &hyfi_cl_xent_backward,
    &hyfi_cl_sgd_update, &hyfi_cl_sgd_update_n, &hyfi_cl_copy_slice, &hyfi_cl_running_combine, &hyfi_cl_accumulate_n,
    &hyfi_cl_pack_slices, &hyfi_cl_unpack_slices,
    &hyfi_cl_tile_assemble, &hyfi_cl_tile_scatter, &hyfi_cl_bn_stats, &hyfi_cl_bn_combine,
    &hyfi_cl_bn_bwd_stats, &hyfi_cl_bn_bwd_combine, &hyfi_cl_bn_bwd_apply,
    &hyfi_cl_redux_zero, &hyfi_cl_redux_add,
};
#define SIM_NCL (sizeof g_sim_codelets / sizeof *g_sim_codelets)

/* Coefficients per codelet and device kind (0 CPU, 1 CUDA): microseconds
 * a + b * flops + c * bytes (the task's STARPU_FLOPS and the sum of its
 * buffers' sizes). */
typedef struct {
    double a, b, c;
    int set;
} sim_coef;
static sim_coef g_sim_coef[SIM_NCL][2];
/* The calibrated history of each codelet (its files, for STARPU_HOSTNAME),
 * loaded at its first task: 0 not yet, 1 loaded, -1 none. */
static struct starpu_perfmodel g_sim_hist[SIM_NCL];
static int g_sim_hist_state[SIM_NCL];
static double g_sim_task_us; /* HYFI_SIM_TASK_US: runtime cost per task */

/* A task's duration: its footprint's calibrated mean where there is one, else
 * the analytic model, plus the per-task cost; NAN (StarPU then stops the
 * simulation naming the codelet) when neither knows it. */
static double sim_cost(struct starpu_task *task, struct starpu_perfmodel_arch *arch,
                       unsigned nimpl)
{
    (void)nimpl;
    const int dev = arch->ndevices > 0 && arch->devices[0].type == STARPU_CUDA_WORKER ? 1 : 0;
    size_t k = 0;
    while (k < SIM_NCL && g_sim_codelets[k] != task->cl) k++;
    if (k == SIM_NCL) return NAN;
    if (g_sim_hist_state[k] == 0) {
        g_sim_hist[k].type = STARPU_HISTORY_BASED;
        g_sim_hist_state[k] =
            starpu_perfmodel_load_symbol(g_sim_codelets[k]->model->symbol, &g_sim_hist[k]) == 0
                ? 1
                : -1;
    }
    double t = NAN;
    if (g_sim_hist_state[k] == 1)
        t = starpu_perfmodel_history_based_expected_perf(&g_sim_hist[k], arch,
                                                         hyfi_ops_footprint(task));
    /* a footprint never measured: NAN, or 0 (StarPU's simulation answers 0,
     * "assuming it can not work there") */
    const sim_coef *c = &g_sim_coef[k][dev];
    if (!(t > 0) && c->set) {
        double bytes = 0;
        for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); i++)
            bytes += (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
        const double flops = task->flops > 0 ? task->flops : 0;
        t = c->a + c->b * flops + c->c * bytes;
    }
    return t > 0 ? t + g_sim_task_us : NAN;
}

/* The coefficient lines of FILE into g_sim_coef. */
static int sim_load(const char *path, char *err, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, len, "hyfi_ctx_config.sim_analytic %s: cannot open it", path);
        return -1;
    }
    char line[512];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char sym[128], dev[16];
        double a, b, c;
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%127s %15s %lf %lf %lf", sym, dev, &a, &b, &c) != 5 ||
            (strcmp(dev, "cpu") && strcmp(dev, "cuda"))) {
            snprintf(err, len, "hyfi_ctx_config.sim_analytic %s line %d: expected 'SYMBOL cpu|cuda A B C' "
                     "(microseconds = A + B * flops + C * bytes)", path, lineno);
            fclose(f);
            return -1;
        }
        size_t k = 0;
        while (k < SIM_NCL && strcmp(g_sim_codelets[k]->model->symbol, sym)) k++;
        if (k == SIM_NCL) continue; /* a codelet this hyfi does not have */
        g_sim_coef[k][strcmp(dev, "cuda") == 0] = (sim_coef){a, b, c, 1};
    }
    fclose(f);
    return 0;
}

int hyfi_ops_sim_models(const char *path, double task_us, char *err, size_t len)
{
    if (!(task_us >= 0) || task_us > 1e9) {
        snprintf(err, len, "hyfi_ctx_config.sim_task_us %g: expected microseconds >= 0",
                 task_us);
        return -1;
    }
    g_sim_task_us = task_us;
    const int analytic = path && *path;
    if (!analytic && g_sim_task_us == 0) return 0; /* StarPU's history models as they are */
    if (analytic && sim_load(path, err, len)) return -1;
    for (size_t k = 0; k < SIM_NCL; k++) {
        g_sim_codelets[k]->model->type = STARPU_PER_ARCH;
        g_sim_codelets[k]->model->arch_cost_function = sim_cost;
    }
    return 0;
}
#endif

int hyfi_ops_cuda_devices(void)
{
#ifdef STARPU_SIMGRID
    /* simulated GPUs: as many as STARPU_NCUDA asks for */
    const char *e = getenv("STARPU_NCUDA");
    return e && atoi(e) > 0 ? atoi(e) : 0;
#elif HYFI_HAVE_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
#else
    return 0;
#endif
}

/* ------------------------------------------------------------ core lending */
static pthread_mutex_t g_core_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_core_cond = PTHREAD_COND_INITIALIZER;
static int g_core_pool = 1, g_core_free = 1, g_core_per_worker = 1, g_core_lend;
static size_t g_core_min_bytes = 1;
static atomic_int g_core_submitting;
#ifndef STARPU_SIMGRID
static _Thread_local int t_threads; /* OpenMP threads last set on this worker */
#endif

void hyfi_ops_cores_init(int ncpu_workers, int per_worker, size_t lend_min_bytes)
{
    pthread_mutex_lock(&g_core_lock);
    /* a new split of the cores (a plan: engine/plan.c) once the kernels that hold
     * some under the old one have given them back */
    while (g_core_free < g_core_pool) pthread_cond_wait(&g_core_cond, &g_core_lock);
    g_core_per_worker = per_worker > 0 ? per_worker : 1;
    g_core_pool = g_core_free = (ncpu_workers > 0 ? ncpu_workers : 1) * g_core_per_worker;
    g_core_lend = lend_min_bytes > 0 && ncpu_workers > 1;
    g_core_min_bytes = lend_min_bytes;
    pthread_mutex_unlock(&g_core_lock);
}

/* Largest buffer of the running task, bytes. */
static size_t task_max_bytes(void)
{
    struct starpu_task *task = starpu_task_get_current();
    size_t m = 0;
    if (!task) return 0;
    const unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
    for (unsigned i = 0; i < nb; i++) {
        size_t b = starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
        if (b > m) m = b;
    }
    return m;
}

int hyfi_ops_cores_take(void)
{
    int n = g_core_per_worker;
    const int big = g_core_lend && task_max_bytes() >= g_core_min_bytes;
    pthread_mutex_lock(&g_core_lock);
    while (g_core_free < n) pthread_cond_wait(&g_core_cond, &g_core_lock);
    g_core_free -= n;
    if (big && g_core_free > 0) {
        /* tasks ready or running, less those running on a worker now */
        int busy = (g_core_pool - g_core_free) / g_core_per_worker;
        if (starpu_task_nready() <= busy) {
            n += g_core_free;
            g_core_free = 0;
        }
    }
    pthread_mutex_unlock(&g_core_lock);
#ifndef STARPU_SIMGRID
    /* one thread fewer while the submitting thread needs a core of them */
    const int threads = n > 1 && atomic_load(&g_core_submitting) ? n - 1 : n;
    if (threads != t_threads) {
        hyfi_cpu_set_threads(threads);
        t_threads = threads;
    }
#endif
    return n;
}

void hyfi_ops_cores_give(int n)
{
#ifndef STARPU_SIMGRID
    /* the task is over: what it grew of the thread's scratch beyond the
     * usual sizes goes back (dnnl_common.h, HYFI_SCRATCH_KEEP) */
    hyfi_cpu_scratch_trim(HYFI_SCRATCH_KEEP);
#endif
    pthread_mutex_lock(&g_core_lock);
    g_core_free += n;
    pthread_cond_broadcast(&g_core_cond);
    pthread_mutex_unlock(&g_core_lock);
}

void hyfi_ops_cores_submitting(int on) { atomic_store(&g_core_submitting, on); }

int hyfi_ops_cores_busy(void)
{
    pthread_mutex_lock(&g_core_lock);
    const int busy = g_core_pool - g_core_free;
    pthread_mutex_unlock(&g_core_lock);
    return busy;
}
