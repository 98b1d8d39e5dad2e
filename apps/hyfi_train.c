/* hyfi-train: train a CNN with hyfi on a data set and report throughput and
 * test accuracy.
 *
 * Models (apps/models.h): cnn, resnet (v1/v2, CIFAR and ImageNet families),
 * amoebanet (AmoebaNet-D); --dry-run builds the graph, prints a summary of its
 * ops (shapes, parameters, FLOPs) and exits without compiling. Single process,
 * SGD with momentum and weight decay at a constant learning rate, or one
 * decaying to 0 along a cosine over the run (--lr-schedule cosine). Flag names
 * follow MPI4DL's benchmarks (--batch-size, --image-size, --num-classes,
 * --num-epochs, --datapath, --learning-rate) so scripts carry over.
 *
 * A step's images/s is B divided by the wall time since the end of the
 * previous step (waiting for the batch, under MPI the check between the ranks
 * that every one can go on, copying it in, forward, backward and update;
 * checkpoints are not counted); batches are prepared by a prefetch thread
 * (apps/data.h) meanwhile.
 *
 * Output: the setup on stdout; progress on stderr (apps/train_progress.h:
 * `step S loss L images/s R (S of N, ETA ...)` every --print-freq steps, the
 * first and the last, and at least every --print-secs seconds; the
 * evaluation's batches and running accuracy); then a summary block on
 * stdout: mean and median images/s over the steps after the first 5 (warm-up:
 * StarPU calibrates its performance models there), and the accuracy on the
 * test split computed in eval mode (hyfi_infer: batch norm with running
 * statistics). The test set is cut into batches of --batch-size; the last one
 * is filled up with images from the start of the set, and those padding rows
 * are not counted. --metrics FILE writes the same as JSON lines (apps/train_metrics.h; see
 * train_usage()).
 *
 * Exit status: 0 success, 1 a run-time failure (data files, hyfi/StarPU
 * errors; the message says which), 2 a bad command line, model or plan (the
 * flags cannot work: fix them).
 *
 * Under mpiexec no rank waits for one that failed: the start-up is collective
 * (apps/train_startup.c), and before every step and evaluation batch the
 * ranks agree that each can go on (its batch prepared, rank 0's metrics
 * written) and whether a stop signal came. An error every rank hits alike is
 * printed once, by rank 0; one of some ranks by each of them, with its rank,
 * while the others say they stop because of it.
 *
 * The command line is apps/train_options.c's. main runs the start-up (MPI,
 * the command line, the data and its geometry, the checkpoint to resume, the
 * outputs, agreed by every rank), then the phases below in order, each
 * returning 0 or the exit status to stop with: (--dry-run, or) start the
 * engine, build the model, compile it, train, evaluate, print the summary;
 * finish() frees everything and merges the trace. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "checkpoints.h"
#include "data.h"
#include "models.h"
#include "train_metrics.h"
#include "train_options.h"
#include "train_progress.h"
#include "train_regions.h"
#include "train_run.h"
#include "env_config.h"

#include <hyfi.h>

#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

/* ---------------------------------------------------------------- helpers */
/* Learning rate of step s (0-based) of `total` under --lr-schedule cosine. */
static float cosine_lr(float lr, long long s, long long total)
{
    const double pi = 3.14159265358979323846;
    return (float)(lr * 0.5 * (1.0 + cos(pi * (double)s / (double)total)));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --trace-steps: pause (on false) or resume recording the trace on this
 * rank (every rank at the same step). 0 or 1. */
static int trace_record(run *r, bool on)
{
    if (r->trace_paused == !on) return 0;
    const hyfi_status st = hyfi_ctx_trace_record(r->ctx, on);
    if (st != HYFI_OK) return lib_fail("--trace-steps (hyfi_ctx_trace_record)", st, NULL);
    r->trace_paused = !on;
    return 0;
}

/* ------------------------------------------------------------------- run */
/* Engine: StarPU-MPI when launched by mpiexec. Every rank runs this same
 * program on the same data (seeded); rank 0 prints and writes the metrics. */
static int start_engine(run *r)
{
    const train_options *o = &r->o;
    char err[1024] = "";
    hyfi_status st;
#ifdef __GLIBC__
    /* Under a memory limit, buffers StarPU frees must leave the process: a fixed
     * mmap threshold (glibc's rises to the size of the last freed buffer, after
     * which freed activations stay in fragmented heaps: measured +260 MB resident
     * at 256x256, docs/results.md). */
    if (o->mem_limit_mb > 0) mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
    /* --explain: one CPU worker (the search runs on the main thread) */
    hyfi_ctx_config cc = {.device = o->device, .ncpus = o->explain, .ncuda = -1, .mpi = -1,
                          .scheduler = NULL, .verbose = o->verbose, .trace_dir = o->trace,
                          /* --trace-lean: what the summary reads (comms.rec: MPI) */
                          .trace_events = o->trace && o->trace_lean ? "TASK|USER|MPI" : NULL,
                          .watchdog_s = o->watchdog_s, .mem_limit_mb = o->mem_limit_mb,
                          .swap_dir = o->swap_dir, .swap_mb = o->swap_mb,
                          .submit_window = o->submit_window};
    hyfi_env_ctx_config(&cc);
    cc.death_notice = hyfi_env_death_notice();
    if ((st = hyfi_ctx_create(&cc, &r->ctx)) != HYFI_OK) {
        lib_fail("starting the engine (hyfi_ctx_create)", st, NULL);
        return 1;
    }
    /* (the launch's rank and count; in a simulation, where SMPI's ranks have
     * no launcher, only the context knows them) */
    r->nranks = g_nranks = hyfi_ctx_nranks(r->ctx);
    g_rank = hyfi_ctx_rank(r->ctx);
    if (r->lead && g_rank != 0) {
        FILE *quiet = freopen("/dev/null", "w", stdout); /* other ranks: quiet on stdout */
        (void)quiet;
    }
    r->lead = g_rank == 0;
    /* Only rank 0 writes the metrics (its folder was probed at start-up),
     * but every rank stops when it cannot: the others would wait for it. */
    st = HYFI_OK;
    /* a resumed run appends to the metrics of the steps before it */
    if (r->lead && o->metrics && !(r->mf = fopen(o->metrics, o->resume ? "a" : "w"))) {
        snprintf(err, sizeof err, "--metrics %s: cannot open for writing: %s", o->metrics,
                 strerror(errno));
        st = HYFI_ERR_IO;
    }
    const hyfi_status a = hyfi_ctx_agree(r->ctx, st, err);
    if (a != HYFI_OK) {
        report_agreed(st != HYFI_OK, false);
        return 1;
    }
    /* line-buffered: a killed run leaves whole lines (each written at its '\n') */
    if (r->mf) setvbuf(r->mf, NULL, _IOLBF, 0);

    /* SIGTERM / SIGINT: stop after the step (after StarPU's own handlers) */
    stop_signals_install();
    return 0;
}

/* The graph: input, labels, the model and the loss. */
static int build_model(run *r)
{
    char err[1024] = "";
    hyfi_status st;
    if ((st = hyfi_graph_create(r->ctx, r->o.seed, &r->g)) != HYFI_OK) {
        lib_fail("hyfi_graph_create", st, NULL);
        return 1;
    }
    hyfi_graph *g = r->g;
    r->tx = hyfi_input(g, "image", r->B, r->C, r->H, r->W); /* (B, C, H, W) */
    r->ty = hyfi_labels(g, "label", r->B);                  /* (B) */
    r->tlogits = hyfi_model_build(g, &r->o.mc, r->tx, err, sizeof err); /* (B, K, 1, 1) */
    if (!r->tlogits) {
        report(true, "%s", err);
        return config_error(hyfi_graph_status(g)) ? 2 : 1;
    }
    r->loss = hyfi_softmax_cross_entropy(g, "loss", r->tlogits, r->ty);
    if (hyfi_graph_status(g) != HYFI_OK) {
        lib_fail("building the loss", hyfi_graph_status(g), g);
        return config_error(hyfi_graph_status(g)) ? 2 : 1;
    }
    return 0;
}

/* The plan and the compile; then the rest of what every rank must share. */
static int compile_model(run *r)
{
    const train_options *o = &r->o;
    hyfi_status st;
    hyfi_train_config tc = {.lr = o->lr, .momentum = o->momentum, .weight_decay = o->weight_decay,
                            .precision = o->precision};
    hyfi_plan_config plan = {.stages = o->split_size, .balance = o->balance, .parts = o->parts,
                             .schedule = o->schedule, .deterministic = o->deterministic,
                             .spatial_stages = o->spatial_size,
                             .spatial_parts = o->spatial_size && !o->spatial_parts
                                                  ? 4
                                                  : o->spatial_parts,
                             .slice = o->slice, .fused_layers = o->fused_layers,
                             .gems = o->gems, .replications = o->replications,
                             .data_parallel = o->data_parallel, .allreduce = o->allreduce,
                             .bucket_kib = o->bucket_kib, .recompute = o->recompute};
    hyfi_env_plan_config(&plan);
    if ((st = hyfi_graph_set_plan(r->g, &plan)) != HYFI_OK ||
        (st = hyfi_graph_compile(r->g, r->loss, &tc)) != HYFI_OK) {
        /* a mismatch between the ranks is the same message on every rank */
        if (r->lead || st != HYFI_ERR_MISMATCH) lib_fail("hyfi_graph_compile", st, r->g);
        return config_error(st) ? 2 : 1; /* 2: a plan the flags cannot make */
    }
    /* the rest of what every rank must share was agreed at start-up */
    return 0;
}

/* --compile-only: this rank's share of the compiled plan, a line on stderr */
static int print_rank_stats(run *r)
{
    hyfi_rank_stats st;
    const hyfi_status s = hyfi_graph_rank_stats(r->g, &st);
    if (s != HYFI_OK) {
        lib_fail("hyfi_graph_rank_stats", s, r->g);
        return 1;
    }
    /* every rank (stdout is the first rank's alone) */
    fprintf(stderr,
            "hyfi-train: compiled rank %d of %d: %ld handles, %ld tasks built (%ld of far tiles "
            "not), %ld submitted per step, compile %.1f MB, largest task %.1f MB\n",
            st.rank, st.nranks, st.handles, st.tasks_built, st.tasks_far, st.tasks_submitted,
            st.graph_mb, st.largest_task_mb);
    return 0;
}

/* The model, the data, the settings and the plan, on stdout. */
static void print_setup(const run *r)
{
    const train_options *o = &r->o;
    char model_what[200];
    model_describe(&o->mc, model_what, sizeof model_what);
    printf("hyfi-train: model %s (%zu parameters), data %s: %zu train%s images of %dx%dx%d, %d "
           "classes\n",
           model_what, hyfi_param_numel(r->g), hyfi_data_kind_name(o->dataset), r->ntrain,
           r->test ? "" : " (no test split)", r->C, r->H, r->W, r->K);
    if (r->test) printf("hyfi-train: %zu test images\n", hyfi_dataset_size(r->test));
    if (r->nrep > 1)
        printf("hyfi-train: %d replicas x batch %d per replica = global batch %d\n", r->nrep,
               o->batch_size, r->B);
    if (o->eval_only)
        printf("hyfi-train: batch %d, evaluation only (--eval-only): %zu test batches, seed %" PRIu64
               ", %s, %d CPU + %d CUDA workers\n", r->B, r->eval_nb, o->seed,
               o->precision == HYFI_PRECISION_BF16 ? "bf16 (mixed precision)" : "fp32",
               hyfi_ctx_ncpu_workers(r->ctx), hyfi_ctx_ncuda_workers(r->ctx));
    else
        printf("hyfi-train: batch %d, %lld steps (%zu per epoch), lr %g (%s), momentum %g, weight "
               "decay %g, seed %" PRIu64 ", %s, %d CPU + %d CUDA workers\n",
               r->B, r->total, r->spe, (double)o->lr, o->cosine ? "cosine" : "constant",
               (double)o->momentum, (double)o->weight_decay, o->seed,
               o->precision == HYFI_PRECISION_BF16 ? "bf16 (mixed precision)" : "fp32",
               hyfi_ctx_ncpu_workers(r->ctx), hyfi_ctx_ncuda_workers(r->ctx));
    char *pd = NULL;
    size_t need = hyfi_plan_describe(r->g, NULL, 0);
    if (need && (pd = malloc(need + 1))) {
        hyfi_plan_describe(r->g, pd, need + 1);
        fputs(pd, stdout);
    }
    free(pd);
    fflush(stdout);
}

/* A diverging run: warn early, stop past --divergence-ratio (every rank has
 * the same loss and norms, so every rank stops). The first step's loss and
 * norm are the run's (kept in checkpoints). True: stop. */
static bool diverged(run *r, long long s, float l, double gnorm)
{
    const train_options *o = &r->o;
    if (s == 0) r->loss0 = l, r->gnorm0 = gnorm;
    if (s > 0 && r->nwarn < 5 &&
        ((r->loss0 > 0 && l > 10 * r->loss0) || (r->gnorm0 > 0 && gnorm > 100 * r->gnorm0))) {
        if (r->lead)
            fprintf(stderr, "hyfi-train: warning: step %lld: loss %.4g (first step %.4g), "
                            "gradient norm %.4g (first step %.4g): the run may be diverging; "
                            "consider a lower --lr\n",
                    s + 1, (double)l, (double)r->loss0, gnorm, r->gnorm0);
        r->nwarn++;
    }
    if (o->divergence > 0 && r->loss0 > 0 && l > o->divergence * r->loss0) {
        if (r->lead)
            fprintf(stderr, "hyfi-train: training diverged at step %lld: the loss %.4g is "
                            "above %g x the first step's %.4g; lower --lr (%g now), or raise "
                            "--divergence-ratio (0: never stop)%s\n",
                    s + 1, (double)l, (double)o->divergence, (double)r->loss0, (double)o->lr,
                    r->saved_at >= 0 ? "; the last checkpoint is from before it" : "");
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ long runs */
static double file_mb(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
}

/* A checkpoint of the state after `steps` steps (collective); rank 0 then
 * removes the oldest beyond --keep. 0 or 1. */
static int write_checkpoint(run *r, long long steps)
{
    const train_options *o = &r->o;
    hyfi_checkpoint_meta m = {0};
    char v[256], path[4096];
    hyfi_status st = HYFI_OK;
#define META(key, ...)                                                                            \
    do {                                                                                          \
        snprintf(v, sizeof v, __VA_ARGS__);                                                       \
        if (st == HYFI_OK) st = hyfi_checkpoint_meta_set(&m, key, v);                             \
    } while (0)
    META("step", "%lld", steps);
    META("epoch", "%lld", steps / (long long)r->spe);
    META("total_steps", "%lld", r->total);
    META("seed", "%" PRIu64, o->seed);
    META("lr", "%.9g", (double)o->lr);
    META("lr_schedule", "%s", o->cosine ? "cosine" : "constant");
    META("global_batch", "%d", r->B);
    META("batch_size", "%d", o->batch_size);
    META("image_size", "%d", r->H);
    META("num_classes", "%d", r->K);
    META("loss0", "%.9g", (double)r->loss0);
    META("grad_norm0", "%.17g", r->gnorm0);
    model_describe(&o->mc, v, sizeof v);
    if (st == HYFI_OK) st = hyfi_checkpoint_meta_set(&m, "model", v);
    META("dataset", "%s", hyfi_data_kind_name(o->dataset));
    META("precision", "%s", o->precision == HYFI_PRECISION_BF16 ? "bf16" : "fp32");
#undef META
    if (st != HYFI_OK) return lib_fail("checkpoint metadata", st, NULL);
    ckpt_path(o->checkpoint_dir, steps, path, sizeof path);
    const double t0 = now_s();
    if ((st = hyfi_save_checkpoint(r->g, path, &m)) != HYFI_OK)
        return lib_fail("writing a checkpoint (hyfi_save_checkpoint)", st, r->g);
    r->saved_at = steps;
    if (r->lead) {
        const int removed = ckpt_prune(o->checkpoint_dir, o->keep);
        printf("checkpoint: %s (%.1f MB in %.2f s%s)\n", path, file_mb(path), now_s() - t0,
               removed ? ", older ones beyond --keep removed" : "");
        fflush(stdout);
    }
    return 0;
}

/* --load, or --resume from the checkpoint chosen at start-up (the newest
 * valid one; train_startup.c). */
static int restore(run *r)
{
    train_options *o = &r->o;
    hyfi_status st;
    r->saved_at = -1;
    if (o->load_path) {
        hyfi_export_options eo = {.rename = model_export_rename, .user = &o->mc};
        if ((st = hyfi_load_safetensors(r->g, o->load_path, &eo)) != HYFI_OK)
            return lib_fail("--load (hyfi_load_safetensors)", st, r->g);
        printf("hyfi-train: parameters loaded from %s\n", o->load_path);
        fflush(stdout); /* (before the progress lines on stderr, also in a log of both) */
    }
    if (!o->resume) return 0;
    const char *file = r->resume_file;
    hyfi_checkpoint_meta m;
    if ((st = hyfi_load_checkpoint(r->g, file, &m)) != HYFI_OK)
        return lib_fail("--resume (hyfi_load_checkpoint)", st, r->g);
    /* an explicit --lr wins over the rate in force in the checkpoint (the
     * cosine schedule sets it at every step from --lr anyway) */
    if (train_given(o, "--lr") && !o->cosine && (st = hyfi_set_lr(r->g, o->lr)) != HYFI_OK)
        return lib_fail("hyfi_set_lr", st, r->g);
    const char *step_s = hyfi_checkpoint_meta_get(&m, "step");
    const long long step = step_s ? strtoll(step_s, NULL, 10) : 0;
    const char *l0 = hyfi_checkpoint_meta_get(&m, "loss0");
    const char *g0 = hyfi_checkpoint_meta_get(&m, "grad_norm0");
    r->first = step > 0 ? step : 0;
    r->loss0 = l0 ? strtof(l0, NULL) : 0;
    r->gnorm0 = g0 ? strtod(g0, NULL) : 0;
    if (r->lead) {
        train_print_lines(stderr, "hyfi-train: ", r->notes); /* what the resume rule decided */
        printf("hyfi-train: resumed from %s: %lld steps done (epoch %lld), %lld to go\n", file,
               r->first, r->first / (long long)r->spe, r->first < r->total ? r->total - r->first : 0);
        fflush(stdout);
    }
    r->saved_at = r->first;
    r->done = r->first;
    return 0;
}

/* Before each step and evaluation batch, one round between the ranks: this
 * rank's outcome so far (its batch prepared, rank 0's metrics written) made
 * common, so that a rank that cannot go on stops every rank at once instead
 * of leaving them waiting in the step for its tasks; and a stop signal on
 * any rank (flag in, *any out: may be NULL). 0: go on; 1: stop on an error
 * (the reason printed). */
static int go_on(run *r, hyfi_status st, const char *msg, bool flag, bool *any)
{
    if (any) *any = flag;
    if (r->nranks < 2) {
        if (st != HYFI_OK) report(false, "%s", msg);
        return st != HYFI_OK;
    }
    const hyfi_status a = hyfi_ctx_agree_any(r->ctx, st, msg, flag, any);
    if (a == HYFI_OK) return 0;
    report_agreed(st != HYFI_OK, false);
    return 1;
}

/* The batch's images into the input: prefetched whole images, or (slides)
 * each rank's own regions read from the files now (apps/train_regions.c). */
static hyfi_status set_batch(run *r, const hyfi_batch *b)
{
    if (!r->tr) return hyfi_set_input(r->g, r->tx, b->x, (size_t)r->B * r->numel);
    const hyfi_status st = train_regions_set_input(r->tr, r->g, r->tx);
    if (st != HYFI_OK && train_regions_error(r->tr)[0])
        report(false, "%s", train_regions_error(r->tr));
    return st;
}

/* The batch rows whose pixels this rank writes into the input (its regions,
 * hyfi_input_regions): on several ranks each prefetches only those instead of
 * the whole global batch. NULL: every row (one rank, or a rank owning all). */
static unsigned char *own_rows(run *r)
{
    int n = 0;
    if (r->nranks < 2 || hyfi_input_regions(r->g, r->tx, NULL, 0, &n) != HYFI_OK) return NULL;
    hyfi_input_region *reg = malloc((size_t)(n > 0 ? n : 1) * sizeof *reg);
    unsigned char *rows = calloc((size_t)r->B, 1);
    int all = 1;
    if (reg && rows && hyfi_input_regions(r->g, r->tx, reg, n, &n) == HYFI_OK) {
        for (int k = 0; k < n; k++)
            for (int i = reg[k].first; i < reg[k].first + reg[k].count && i < r->B; i++)
                if (i >= 0) rows[i] = 1;
        for (int i = 0; i < r->B; i++) all &= rows[i];
    }
    free(reg);
    if (r->o.verbose && rows && !all) {
        int own = 0;
        for (int i = 0; i < r->B; i++) own += rows[i];
        fprintf(stderr, "hyfi-train: rank %d prepares %d of the %d images of a batch\n", g_rank,
                own, r->B);
    }
    if (all) { /* (or out of memory: every row, as without the mask) */
        free(rows);
        return NULL;
    }
    return rows;
}

/* Training: --steps steps (or whole epochs) on prefetched, shuffled batches,
 * from step r->first (resumed) on. */
static int train_loop(run *r)
{
    const train_options *o = &r->o;
    hyfi_graph *g = r->g;
    const int B = r->B;
    const long long total = r->total;
    char err[1024] = "";
    hyfi_status st;
    r->done = r->first;
    r->rates = calloc((size_t)(total > 0 ? total : 1), sizeof *r->rates);
    if (!r->rates) {
        report(false, "out of memory for %lld step timings", total);
        return 1;
    }
    if (r->first >= total) return 0;
    unsigned char *rows = o->dataset == HYFI_DATA_SLIDES ? NULL : own_rows(r);
    hyfi_prefetch_config pc = {.batch = B, .seed = o->seed, .shuffle = 1,
                               .first_step = (uint64_t)r->first,
                               .num_steps = (uint64_t)(total - r->first), .rows = rows};
    const int fail = o->dataset == HYFI_DATA_SLIDES
            ? train_regions_new(r->train, B, o->seed, 1, &r->tr, err, sizeof err)
            : hyfi_prefetch_start(r->train, &pc, &r->pf, err, sizeof err);
    free(rows);
    if (fail) {
        report(false, "%s", err);
        return 1;
    }
    if (o->trace && r->first > 0) { /* resumed: the trace numbers the steps on */
        if ((st = hyfi_ctx_trace_steps_done(r->ctx, r->first)) != HYFI_OK)
            return lib_fail("--trace (hyfi_ctx_trace_steps_done)", st, NULL);
    }
    /* --trace-steps A:B: not recorded before step A (the compile is); a
     * resumed run that starts after B is refused at start-up (the pause here
     * stays, should one get this far) */
    if (o->trace && (o->trace_first > r->first + 1 || (o->trace_last && o->trace_last <= r->first)) &&
        trace_record(r, false))
        return 1;
    double t_prev = now_s();
    /* s == total: the check after the last step (a stop signal, the metrics) */
    for (long long s = r->first;; s++) {
        hyfi_batch b;
        int prc = 0;
        if (s < total)
            prc = r->tr ? train_regions_next(r->tr, (uint64_t)s, &b) : hyfi_prefetch_next(r->pf, &b);
        st = HYFI_OK;
        if (prc) {
            snprintf(err, sizeof err, "preparing batch %lld failed: %s: %s", s + 1,
                     hyfi_data_status_name(prc), hyfi_prefetch_error(r->pf));
            st = HYFI_ERR_IO;
        } else {
            st = metrics_status(r, err, sizeof err);
        }
        /* SIGTERM / SIGINT on any rank: stop after the step before */
        bool sig = s > r->first && stop_requested() != 0;
        if (go_on(r, st, err, sig, &sig)) return 1;
        if (sig || (o->stop_at && s == o->stop_at && s > r->first && s < total)) {
            r->stop_sig = sig ? (stop_requested() ? stop_requested() : SIGTERM) : 0;
            r->stopped = true;
            break;
        }
        if (s == total) break;
        if (o->trace && s + 1 == o->trace_first && trace_record(r, true)) return 1;
        progress_step_start(r, s);
        float l = NAN;
        if (o->cosine && (st = hyfi_set_lr(g, cosine_lr(o->lr, s, total))) != HYFI_OK) {
            lib_fail("hyfi_set_lr", st, g);
            return 1;
        }
        if ((st = set_batch(r, &b)) != HYFI_OK ||
            (st = hyfi_set_labels(g, r->ty, b.y, (size_t)B)) != HYFI_OK) {
            lib_fail("copying a batch in", st, g);
            return 1;
        }
        if ((st = hyfi_train_step(g, &l)) != HYFI_OK) {
            char what[128];
            snprintf(what, sizeof what, "training step %lld%s", s + 1,
                     st == HYFI_ERR_DATA && r->saved_at >= 0
                         ? " (the last checkpoint, from before it, is intact)"
                         : "");
            lib_fail(what, st, g);
            if (st == HYFI_ERR_DATA && r->lead)
                fprintf(stderr, "hyfi-train: the run diverged at step %lld; lower --lr (%g now)\n",
                        s + 1, (double)(o->cosine ? cosine_lr(o->lr, s, total) : o->lr));
            return 1;
        }
        r->done = s + 1;
        double t = now_s();
        r->rates[s] = B / (t - t_prev);
        r->train_s += t - t_prev;
        if (o->trace && s + 1 == o->trace_last && trace_record(r, false)) return 1;
        double gnorm = NAN, wnorm = NAN;
        hyfi_train_norms(g, &gnorm, &wnorm);
        const double acc = step_accuracy(r, b.y); /* (the step's own logits) */
        if (diverged(r, s, l, gnorm)) return 1;
        progress_step_done(r, s, l, acc);
        if (metrics_step(r, s, l, gnorm, wnorm, acc)) return 1;
        if (o->checkpoint_every && (s + 1) % o->checkpoint_every == 0 && s + 1 < total &&
            write_checkpoint(r, s + 1))
            return 1;
        t_prev = now_s(); /* checkpoints are not counted in the step times */
    }
    hyfi_prefetch_stop(r->pf);
    r->pf = NULL;
    train_regions_free(r->tr);
    r->tr = NULL;
    if (o->checkpoint_dir && r->saved_at != r->done && write_checkpoint(r, r->done)) return 1;
    if (r->stopped && r->lead) {
        char where[4200];
        if (o->checkpoint_dir)
            snprintf(where, sizeof where, "checkpoint %s/step-%08lld.safetensors written; "
                                          "continue with --resume %s", o->checkpoint_dir,
                     r->done, o->checkpoint_dir);
        else
            snprintf(where, sizeof where, "nothing saved (no --checkpoint-dir)");
        printf("hyfi-train: stopped by %s after step %lld of %lld: %s\n",
               !r->stop_sig ? "--stop-at-step" : r->stop_sig == SIGINT ? "SIGINT" : "SIGTERM",
               r->done, total, where);
        fflush(stdout);
    }
    return 0;
}

/* Throughput over the steps after the warm-up. */
static void throughput(run *r)
{
    const long long from = r->first + WARMUP_STEPS; /* this process's steps */
    r->nmeas = r->done > from ? r->done - from : 0;
    r->mean = r->median = 0;
    if (r->nmeas > 0) {
        const long long nmeas = r->nmeas;
        for (long long s = from; s < r->done; s++) r->mean += r->rates[s];
        r->mean /= (double)nmeas;
        qsort(r->rates + from, (size_t)nmeas, sizeof *r->rates, cmp_double);
        const double *q = r->rates + from;
        r->median = nmeas % 2 ? q[nmeas / 2] : 0.5 * (q[nmeas / 2 - 1] + q[nmeas / 2]);
    }
}

/* Test accuracy in eval mode (none without a test split). */
static int evaluate(run *r)
{
    if (!r->test) return 0;
    /* --trace-steps: a window of training steps, not the evaluation */
    if (r->o.trace && r->o.trace_first && trace_record(r, false)) return 1;
    const int B = r->B, K = r->K;
    char err[1024] = "";
    hyfi_status st;
    const size_t ntest = hyfi_dataset_size(r->test);
    size_t nb = hyfi_data_steps_per_epoch(ntest, B);
    if (r->o.eval_batches > 0 && (size_t)r->o.eval_batches < nb) nb = (size_t)r->o.eval_batches;
    if (!r->logits_buf) r->logits_buf = malloc((size_t)B * (size_t)K * sizeof *r->logits_buf);
    if (!r->logits_buf) {
        report(false, "out of memory for the logits");
        return 1;
    }
    unsigned char *rows = r->o.dataset == HYFI_DATA_SLIDES ? NULL : own_rows(r);
    hyfi_prefetch_config ec = {.batch = B, .shuffle = 0, .num_steps = nb, .rows = rows};
    const int fail = r->o.dataset == HYFI_DATA_SLIDES
            ? train_regions_new(r->test, B, 0, 0, &r->tr, err, sizeof err)
            : hyfi_prefetch_start(r->test, &ec, &r->pf, err, sizeof err);
    free(rows);
    if (fail) {
        report(false, "%s", err);
        return 1;
    }
    double t0 = now_s();
    progress_eval_start(r, nb);
    for (size_t k = 0; k < nb; k++) {
        hyfi_batch b;
        int prc = r->tr ? train_regions_next(r->tr, k, &b) : hyfi_prefetch_next(r->pf, &b);
        st = HYFI_OK;
        if (prc) {
            snprintf(err, sizeof err, "preparing test batch %zu failed: %s: %s", k + 1,
                     hyfi_data_status_name(prc), hyfi_prefetch_error(r->pf));
            st = HYFI_ERR_IO;
        }
        if (go_on(r, st, err, false, NULL)) return 1;
        if ((st = set_batch(r, &b)) != HYFI_OK ||
            (st = hyfi_set_labels(r->g, r->ty, b.y, (size_t)B)) != HYFI_OK ||
            (st = hyfi_infer(r->g, NULL)) != HYFI_OK ||
            (st = hyfi_tensor_read(r->g, r->tlogits, r->logits_buf, (size_t)B * (size_t)K)) !=
                HYFI_OK) {
            lib_fail("evaluation (hyfi_infer)", st, r->g);
            return 1;
        }
        /* rows past the end of the test set are padding: not counted */
        size_t valid = ntest - b.start < (size_t)B ? ntest - b.start : (size_t)B;
        for (size_t row = 0; row < valid; row++) {
            const float *z = r->logits_buf + row * (size_t)K; /* (K) */
            int best = 0;
            for (int c = 1; c < K; c++)
                if (z[c] > z[best]) best = c;
            r->correct += best == b.y[row];
        }
        r->counted += valid;
        progress_eval_batch(r, k, nb, r->correct, r->counted);
    }
    hyfi_prefetch_stop(r->pf);
    r->pf = NULL;
    train_regions_free(r->tr);
    r->tr = NULL;
    r->have_acc = r->counted > 0;
    r->acc = r->have_acc ? (double)r->correct / (double)r->counted : 0;
    r->eval_nb = nb;
    progress_eval_done(r, nb, now_s() - t0);
    return 0;
}

/* Free everything; after a successful --trace run rank 0 merges the trace.
 * Returns the exit status: rc, or 1 when the metrics or the trace fail. */
static int finish(run *r, int rc)
{
    const train_options *o = &r->o;
    hyfi_status st;
    progress_end(r);
    hyfi_prefetch_stop(r->pf);
    train_regions_free(r->tr);
    /* rank 0's metrics complete, or every rank ends with status 1 */
    char err[1024] = "";
    hyfi_status st_m = metrics_status(r, err, sizeof err);
    if (r->mf && fclose(r->mf) != 0 && st_m == HYFI_OK) {
        snprintf(err, sizeof err, "--metrics %s: write failed: %s; the file is incomplete",
                 o->metrics, strerror(errno));
        st_m = HYFI_ERR_IO;
    }
    r->mf = NULL;
    if (rc == 0 && r->ctx && go_on(r, st_m, err, false, NULL)) rc = 1;
    else if (rc == 0 && !r->ctx && st_m != HYFI_OK) rc = (report(false, "%s", err), 1);
    free(r->rates);
    free(r->logits_buf);
    free(r->o.balance);
    if (r->g) hyfi_graph_destroy(r->g);
    hyfi_launch_exit_status(rc); /* should MPI's shutdown hang: the run's own status */
    hyfi_ctx_destroy(r->ctx);
    /* the ranks have written their trace files (hyfi_ctx_destroy waits) */
    if (rc == 0 && o->trace && r->lead) {
        fflush(stdout);
        if ((st = hyfi_trace_merge(o->trace, r->nranks)) != HYFI_OK ||
            (st = hyfi_trace_summarize(o->trace, stdout)) != HYFI_OK) {
            fprintf(stderr, "hyfi-train: --trace %s: %s\n", o->trace, hyfi_last_error());
            rc = 1;
        } else {
            printf("trace: %s/paje.trace (ViTE), %s/summary.json, %s/timeline.svg\n", o->trace,
                   o->trace, o->trace);
        }
    }
    hyfi_dataset_free(r->train);
    hyfi_dataset_free(r->test);
    hyfi_launch_end(); /* MPI, where no context took it over (--dry-run) */
    return rc;
}

/* --save: the model in the safetensors format with PyTorch's names. */
static int save_model(run *r)
{
    hyfi_export_options eo = {.rename = model_export_rename, .user = &r->o.mc,
                              .num_batches_tracked = r->done, .bf16 = r->o.save_bf16};
    const double t0 = now_s();
    hyfi_status st = hyfi_save_safetensors(r->g, r->o.save_path, &eo);
    if (st != HYFI_OK) return lib_fail("--save (hyfi_save_safetensors)", st, r->g);
    printf("saved: %s (%.1f MB in %.2f s)\n", r->o.save_path, file_mb(r->o.save_path),
           now_s() - t0);
    return 0;
}

/* ------------------------------------------------------------------- main */
int main(int argc, char **argv)
{
    run r = {.nranks = 1};
    /* MPI's start, the command line, the data and the outputs, agreed by
     * every rank (train_startup.c) */
    int rc = train_startup(&r, argc, argv);
    if (rc != 0) {
        free(r.o.balance);
        hyfi_dataset_free(r.train);
        hyfi_dataset_free(r.test);
        return rc < 0 ? 0 : rc;
    }
    if (r.o.dry_run) return finish(&r, train_dry_run(&r.o, r.C, r.H, r.W, r.K));
    rc = start_engine(&r);
    if (rc == 0) rc = build_model(&r);
    if (rc == 0 && r.o.plan_auto) rc = train_autoplan(&r); /* --plan auto */
    if (rc == 0 && r.o.explain) return finish(&r, 0);
    if (rc == 0) rc = compile_model(&r);
    if (rc == 0 && r.o.compile_only) return finish(&r, print_rank_stats(&r));
    if (rc == 0 && r.o.verbose) rc = print_rank_stats(&r); /* -v: every rank's share too */
    if (rc == 0) rc = progress_begin(&r); /* (the evaluation's size: print_setup) */
    if (rc == 0) {
        print_setup(&r);
        rc = restore(&r);
    }
    if (rc == 0 && !r.o.eval_only) rc = train_loop(&r);
    if (rc == 0 && r.stopped) /* preempted: saved; evaluation and export skipped */
        return finish(&r, r.o.checkpoint_dir || !r.stop_sig ? 0 : 128 + r.stop_sig);
    if (rc == 0) {
        throughput(&r);
        rc = evaluate(&r);
    }
    if (rc == 0) progress_summary(&r);
    if (rc == 0 && r.o.save_path) rc = save_model(&r);
    return finish(&r, rc);
}
