/* hyfi-train's start-up, collective under mpiexec (train_run.h).
 *
 * Every rank first starts MPI (hyfi_launch_begin, under the --watchdog time
 * limit), then does its own start-up without printing anything: the command
 * line, the checkpoint to resume (its settings decide the run's where no
 * flag says otherwise), the data and its geometry, the output paths rank 0
 * will write (--metrics, --save, --checkpoint-dir, probed now rather than at
 * the end of a long run), the engine's configuration (device, swap and trace
 * folders). Then all ranks meet in hyfi_launch_agree with their outcome and
 * every setting they must share (every flag but the node's own, the data's
 * contents, the checkpoint chosen): no rank goes on unless every rank can,
 * and each says why it stops, within seconds of the first failure.
 *
 * The resume rule: a setting stored in the checkpoint (the learning rate, its
 * schedule, momentum, weight decay, seed, steps, batch size, image size,
 * classes) is the run's unless its flag is given; a flag given with another
 * value wins and the difference is printed, except where it would make the
 * resumed run another run (the image size, the classes, the model), which is
 * refused with the fix. A damaged newest checkpoint is skipped for the newest
 * valid one, saying so. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoints.h"
#include "models.h"
#include "train_run.h"
#include "env_config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Jobs larger than this: only rank 0 and the failing ranks print why they stop. */
#define QUIET_ABOVE_RANKS 16

int g_rank, g_nranks = 1;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void report(bool alike, const char *fmt, ...)
{
    if (alike && g_rank != 0) return;
    char msg[2048];
    int n = snprintf(msg, sizeof msg, "hyfi-train: ");
    if (!alike && g_nranks > 1) n += snprintf(msg + n, sizeof msg - (size_t)n, "rank %d: ", g_rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
}

int lib_fail(const char *what, hyfi_status s, const hyfi_graph *g)
{
    const char *msg = g ? hyfi_graph_error(g) : "";
    if (!msg || !*msg) msg = hyfi_last_error();
    const bool alike = config_error(s) || s == HYFI_ERR_STATE || s == HYFI_ERR_DATA;
    report(alike, "%s failed (%s): %s", what, hyfi_status_name(s),
           msg && *msg ? msg : "no message");
    return 1;
}

void report_agreed(bool own, bool alike)
{
    const char *msg = hyfi_last_error();
    if (alike || g_nranks < 2) {
        if (g_rank == 0) fprintf(stderr, "hyfi-train: %s\n", msg);
    } else if (own) {
        fprintf(stderr, "hyfi-train: rank %d: %s\n", g_rank, msg);
    } else if (g_rank == 0 || g_nranks <= QUIET_ABOVE_RANKS) {
        fprintf(stderr, "hyfi-train: rank %d: stopping: %s\n", g_rank, msg);
    }
}

/* --------------------------------------------------------------- pieces */
__attribute__((format(printf, 3, 4)))
static hyfi_status failf(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return HYFI_ERR_IO;
}

#define note(r, ...) train_add_line((r)->notes, sizeof (r)->notes, __VA_ARGS__)

/* The train split and, where the kind has one, the test split. */
static hyfi_status load_data(run *r, char *msg, size_t len)
{
    const train_options *o = &r->o;
    hyfi_data_spec spec = {.kind = o->dataset, .split = HYFI_SPLIT_TRAIN, .dir = o->datapath};
    if (o->dataset == HYFI_DATA_SYNTHETIC) {
        spec.channels = 3;
        spec.height = spec.width = o->image_size ? o->image_size : 32;
        spec.num_classes = o->num_classes ? o->num_classes : 10;
        spec.count = (size_t)10 * (size_t)o->batch_size * (size_t)train_replicas(o);
        spec.seed = o->seed;
    }
    int drc = hyfi_dataset_open(&spec, &r->train, msg, len);
    if (drc == 0 && hyfi_data_has_test_split(o->dataset, o->datapath)) {
        spec.split = HYFI_SPLIT_TEST;
        drc = hyfi_dataset_open(&spec, &r->test, msg, len);
    }
    if (drc) return HYFI_ERR_IO;
    if (o->eval_only && !r->test) {
        snprintf(msg, len, "--eval-only evaluates on the test split, and %s%s%s has none; give "
                           "a data set with one", hyfi_data_kind_name(o->dataset),
                 o->datapath ? " " : "", o->datapath ? o->datapath : "");
        return HYFI_ERR_ARG;
    }
    return HYFI_OK;
}

/* The images at --image-size (test at the train geometry), the model and the
 * classes checked against them, the batch and the step count. */
static hyfi_status fit_geometry(run *r, char *msg, size_t len)
{
    train_options *o = &r->o;
    hyfi_dataset *train = r->train, *test = r->test;
    const int C = hyfi_dataset_channels(train);
    int H = hyfi_dataset_height(train), W = hyfi_dataset_width(train);
    if (o->image_size && (o->image_size != H || o->image_size != W)) {
        H = W = o->image_size;
        if (hyfi_dataset_set_output(train, C, H, W, msg, len) ||
            (test && hyfi_dataset_set_output(test, C, H, W, msg, len)))
            return HYFI_ERR_ARG;
    }
    /* A folder's test split may differ from train in channels (grey only) or
     * native size (its first image): give it the train geometry. */
    if (test && (hyfi_dataset_channels(test) != C || hyfi_dataset_height(test) != H ||
                 hyfi_dataset_width(test) != W) &&
        hyfi_dataset_set_output(test, C, H, W, msg, len))
        return HYFI_ERR_ARG;
    if (model_check(&o->mc, C, H, W, msg, len)) return HYFI_ERR_ARG;
    const int K = o->num_classes ? o->num_classes : hyfi_dataset_num_classes(train);
    if (K < hyfi_dataset_num_classes(train)) {
        snprintf(msg, len, "--num-classes %d is smaller than the %d classes of %s; pass "
                           "--num-classes %d or more (or leave it out)",
                 K, hyfi_dataset_num_classes(train), hyfi_data_kind_name(o->dataset),
                 hyfi_dataset_num_classes(train));
        return HYFI_ERR_ARG;
    }
    if (K < 2) { /* a 1-way classifier learns nothing: its loss is always 0 */
        snprintf(msg, len, "%s%s%s has %d class; a classifier needs at least 2: give each class "
                           "its own subfolder (or pass --num-classes 2 or more to train anyway)",
                 hyfi_data_kind_name(o->dataset), o->datapath ? " " : "",
                 o->datapath ? o->datapath : "", K);
        return HYFI_ERR_ARG;
    }
    r->C = C;
    r->H = H;
    r->W = W;
    r->K = K;
    /* B: the global batch (--batch-size per replica, as in MPI4DL) */
    r->nrep = train_replicas(o);
    r->B = o->batch_size * r->nrep;
    r->ntrain = hyfi_dataset_size(train);
    r->numel = hyfi_dataset_image_numel(train);
    r->spe = hyfi_data_steps_per_epoch(r->ntrain, r->B);
    r->total = o->steps > 0 ? o->steps : (long long)o->num_epochs * (long long)r->spe;
    o->mc.num_classes = K;
    return HYFI_OK;
}

/* ------------------------------------------------------------- --resume */
/* A checkpoint entry as a number; false when absent or bad. */
static bool meta_ll(const hyfi_checkpoint_meta *m, const char *key, long long *out)
{
    const char *v = hyfi_checkpoint_meta_get(m, key);
    char *end;
    if (!v) return false;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return !errno && end != v && !*end;
}

static bool meta_f(const hyfi_checkpoint_meta *m, const char *key, float *out)
{
    const char *v = hyfi_checkpoint_meta_get(m, key);
    char *end;
    if (!v) return false;
    *out = strtof(v, &end);
    return end != v && !*end;
}

/* The checkpoint to resume from (the newest valid one) and the settings it
 * decides; before the data is opened (its image size and classes). */
static hyfi_status resolve_resume(run *r, hyfi_checkpoint_meta *m, char *msg, size_t len)
{
    train_options *o = &r->o;
    char **list = NULL;
    int n = 0;
    const char *where = o->resume_path ? o->resume_path : o->checkpoint_dir;
    if (ckpt_candidates(where, &list, &n, msg, len)) return HYFI_ERR_IO;
    hyfi_train_config tc = {0};
    int chosen = -1;
    char first_err[1024] = "";
    for (int i = 0; i < n && chosen < 0; i++) {
        if (hyfi_checkpoint_peek(list[i], m, &tc) == HYFI_OK) chosen = i;
        else if (i == 0) snprintf(first_err, sizeof first_err, "%s", hyfi_last_error());
    }
    if (chosen < 0) {
        snprintf(msg, len, "--resume %s: no valid checkpoint%s: %s", where,
                 n > 1 ? " among the folder's" : "", first_err);
        ckpt_candidates_free(list, n);
        return HYFI_ERR_IO;
    }
    snprintf(r->resume_file, sizeof r->resume_file, "%s", list[chosen]);
    if (chosen > 0)
        note(r, "warning: %s; resuming from the newest valid one instead, %s (%d newer %s "
                "skipped)", first_err, list[chosen], chosen,
             chosen > 1 ? "checkpoints" : "checkpoint");
    ckpt_candidates_free(list, n);
    if (!hyfi_checkpoint_meta_get(m, "step") || !hyfi_checkpoint_meta_get(m, "seed") ||
        !hyfi_checkpoint_meta_get(m, "loss0") || !hyfi_checkpoint_meta_get(m, "grad_norm0")) {
        snprintf(msg, len, "--resume %.300s: the checkpoint lacks hyfi-train's entries (step, "
                           "seed, loss0, grad_norm0); it was written by another program",
                 r->resume_file);
        return HYFI_ERR_IO;
    }
    /* the rule: the checkpoint's value unless the flag is given */
    long long v;
    float f;
    if (meta_ll(m, "image_size", &v) && v > 0 && v != o->image_size) {
        if (train_given(o, "--image-size")) {
            snprintf(msg, len, "--resume %.300s: the checkpoint was trained on %lldx%lld images, "
                               "--image-size %d asks for another run. Leave --image-size out "
                               "to resume it, or start a new run from its parameters with "
                               "--load %.300s --image-size %d", r->resume_file, v, v,
                     o->image_size, r->resume_file, o->image_size);
            return HYFI_ERR_ARG;
        }
        o->image_size = (int)v;
    }
    if (meta_ll(m, "num_classes", &v) && v > 0 && v != o->num_classes) {
        if (train_given(o, "--num-classes")) {
            snprintf(msg, len, "--resume %.300s: the checkpoint's classifier has %lld classes, "
                               "--num-classes %d asks for another run; leave --num-classes out "
                               "to resume it, or start a new run with --load",
                     r->resume_file, v, o->num_classes);
            return HYFI_ERR_ARG;
        }
        o->num_classes = (int)v;
    }
    if (meta_ll(m, "batch_size", &v) && v > 0 && v <= INT_MAX && v != o->batch_size) {
        if (train_given(o, "--batch-size"))
            note(r, "--batch-size %d given: the checkpoint was trained with %lld per replica",
                 o->batch_size, v);
        else o->batch_size = (int)v;
    }
    if (meta_ll(m, "total_steps", &v) && v > 0 && !train_given(o, "--steps") &&
        !train_given(o, "--num-epochs"))
        o->steps = v;
    const char *sched = hyfi_checkpoint_meta_get(m, "lr_schedule");
    if (sched && (!strcmp(sched, "cosine") || !strcmp(sched, "constant")) &&
        strcmp(sched, o->cosine ? "cosine" : "constant")) {
        if (train_given(o, "--lr-schedule"))
            note(r, "--lr-schedule %s given: the checkpoint's run had %s",
                 o->cosine ? "cosine" : "constant", sched);
        else o->cosine = !strcmp(sched, "cosine");
    }
    /* the run's base learning rate (the in-force one is restored by the load) */
    if (meta_f(m, "lr", &f) && f > 0 && f != o->lr) {
        if (train_given(o, "--lr"))
            note(r, "--lr %g given: it replaces the checkpoint's %g from the first resumed "
                    "step on", (double)o->lr, (double)f);
        else o->lr = f;
    }
    if (tc.momentum != o->momentum) {
        if (train_given(o, "--momentum"))
            note(r, "--momentum %g given: it replaces the checkpoint's %g", (double)o->momentum,
                 (double)tc.momentum);
        else o->momentum = tc.momentum;
    }
    if (tc.weight_decay != o->weight_decay) {
        if (train_given(o, "--weight-decay"))
            note(r, "--weight-decay %g given: it replaces the checkpoint's %g",
                 (double)o->weight_decay, (double)tc.weight_decay);
        else o->weight_decay = tc.weight_decay;
    }
    const char *prec = hyfi_checkpoint_meta_get(m, "precision");
    if (prec && (!strcmp(prec, "fp32") || !strcmp(prec, "bf16"))) {
        const hyfi_precision p = !strcmp(prec, "bf16") ? HYFI_PRECISION_BF16 : HYFI_PRECISION_FP32;
        if (p != o->precision && train_given(o, "--precision"))
            note(r, "--precision %s given: the checkpoint's run trained in %s (its master weights "
                    "are fp32 either way)", o->precision == HYFI_PRECISION_BF16 ? "bf16" : "fp32",
                 prec);
        else if (p != o->precision) {
            o->precision = p;
            if (p == HYFI_PRECISION_BF16 && o->device == HYFI_DEVICE_AUTO) o->device = HYFI_DEVICE_CPU;
        }
    }
    const uint64_t seed = strtoull(hyfi_checkpoint_meta_get(m, "seed"), NULL, 10);
    if (seed != o->seed) {
        if (train_given(o, "--seed"))
            note(r, "--seed %" PRIu64 " given: the data order from here on follows it, not the "
                    "checkpoint's seed %" PRIu64 " (an uninterrupted run's)", o->seed, seed);
        else o->seed = seed;
    }
    return HYFI_OK;
}

/* What can only be compared once the data and the model are known. */
static hyfi_status check_resume(run *r, const hyfi_checkpoint_meta *m, char *msg, size_t len)
{
    const train_options *o = &r->o;
    char ours[200];
    model_describe(&o->mc, ours, sizeof ours);
    const char *model = hyfi_checkpoint_meta_get(m, "model");
    if (model && strcmp(model, ours)) {
        snprintf(msg, len, "--resume %.300s: the checkpoint holds %s, this run builds %s; give the "
                           "checkpoint's model flags (or start a new run from it with --load)",
                 r->resume_file, model, ours);
        return HYFI_ERR_ARG;
    }
    const char *data = hyfi_checkpoint_meta_get(m, "dataset");
    if (data && strcmp(data, hyfi_data_kind_name(o->dataset)))
        note(r, "warning: the checkpoint was trained on %s; this run goes on with %s", data,
             hyfi_data_kind_name(o->dataset));
    long long total;
    if (meta_ll(m, "total_steps", &total) && total != r->total)
        note(r, "the run now ends after %lld steps (the checkpoint's run: %lld)%s", r->total,
             total, o->cosine ? "; the cosine schedule follows the new length" : "");
    long long batch;
    if (meta_ll(m, "global_batch", &batch) && batch != r->B)
        note(r, "warning: the checkpoint was trained with a global batch of %lld, this run has "
                "%d (--batch-size x replicas): the data order and the steps differ from an "
                "uninterrupted run", batch, r->B);
    return HYFI_OK;
}

/* --trace (--trace-steps A:B) against what this run does: its steps (from a
 * resumed checkpoint's step + 1 to the end) and its evaluation. A trace that
 * would hold nothing (a window none of the steps falls in, a resumed run
 * with no step left and no test split) is refused (exit status 2), saying
 * what to give instead. (A window with --eval-only: refused with the flags.) */
static hyfi_status check_trace_window(run *r, const hyfi_checkpoint_meta *m, char *msg, size_t len)
{
    const train_options *o = &r->o;
    if (!o->trace) return HYFI_OK;
    const bool window = train_given(o, "--trace-steps");
    long long done = 0; /* steps done before --resume */
    if (o->resume && (!meta_ll(m, "step", &done) || done < 0)) done = 0;
    const long long total = r->total, a = o->trace_first, b = o->trace_last ? o->trace_last : total;
    char win[64], before[64]; /* the window as given, quoted */
    if (o->trace_last == a) snprintf(win, sizeof win, "'%lld'", a);
    else if (o->trace_last) snprintf(win, sizeof win, "'%lld:%lld'", a, o->trace_last);
    else snprintf(win, sizeof win, "'%lld:'", a);
    if (a == done) snprintf(before, sizeof before, "step %lld was", a);
    else snprintf(before, sizeof before, "steps %lld-%lld were", a, done);
    if (o->eval_only) {
        return HYFI_OK; /* (the evaluation is traced) */
    } else if (done >= total && !window) {
        if (r->test) return HYFI_OK; /* (the evaluation is traced) */
        failf(msg, len, "--trace %s: nothing to trace: the checkpoint %.300s has all %lld steps "
                        "done and the data has no test split to evaluate (raise --steps, or "
                        "leave --trace out)", o->trace, r->resume_file, total);
    } else if (!window) {
        return HYFI_OK;
    } else if (done >= total) {
        failf(msg, len, "--trace-steps %s: no step is left to trace: the checkpoint %.300s has "
                        "all %lld steps done (raise --steps, or leave --trace-steps out)",
              win, r->resume_file, total);
    } else if (done > 0 && b <= done) {
        failf(msg, len, "--trace-steps %s: this run resumes from %.300s after step %lld, so its "
                        "first step is %lld, after the window, which would trace no step; give "
                        "a window from step %lld on (e.g. --trace-steps %lld:%lld), or trace a "
                        "run from the start", win, r->resume_file, done, done + 1, done + 1,
              done + 1, done + 2 <= total ? done + 2 : done + 1);
    } else if (a > total) {
        failf(msg, len, "--trace-steps %s: the run ends after step %lld, before the window, "
                        "which would trace no step; give a window within steps %lld-%lld (or "
                        "more --steps)", win, total, done + 1, total);
    } else {
        if (done > 0 && a <= done)
            note(r, "--trace-steps %s: %s done before --resume; the trace begins at step "
                    "%lld", win, before, done + 1);
        return HYFI_OK;
    }
    return HYFI_ERR_ARG;
}

/* ---------------------------------------------------------- output probes */
/* Whether files can be created in folder dir: a temporary file made and
 * removed (access() says yes to root on read-only exports). 0 or errno. */
static int probe_folder(const char *dir)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.hyfi-probe-XXXXXX", dir);
    const int fd = mkstemp(tmp);
    if (fd < 0) return errno ? errno : EIO;
    close(fd);
    unlink(tmp);
    return 0;
}

/* The folder of path into dir. */
static void folder_of(const char *path, char *dir, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, len, ".");
    else if (slash == path) snprintf(dir, len, "/");
    else snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* A file rank 0 will write (--metrics, --save): its folder takes new files
 * and the path is no folder. */
static hyfi_status probe_output(const char *flag, const char *path, char *msg, size_t len)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return failf(msg, len, "%s %s is a folder; give a file name", flag, path);
    char dir[4096];
    folder_of(path, dir, sizeof dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return failf(msg, len, "%s %s: the folder %s does not exist; create it or give another "
                               "path", flag, path, dir);
    const int e = probe_folder(dir);
    if (e)
        return failf(msg, len, "%s %s: cannot create files in %s: %s; give a writable path "
                               "(checked at the start, so that a run is not lost at its end)",
                     flag, path, dir, strerror(e));
    return HYFI_OK;
}

/* Rank 0's outputs, probed before training. */
static hyfi_status probe_outputs(run *r, char *msg, size_t len)
{
    const train_options *o = &r->o;
    hyfi_status st = HYFI_OK;
    if (o->metrics) st = probe_output("--metrics", o->metrics, msg, len);
    if (st == HYFI_OK && o->save_path) st = probe_output("--save", o->save_path, msg, len);
    if (st == HYFI_OK && o->checkpoint_dir && ckpt_prepare_dir(o->checkpoint_dir, msg, len))
        st = HYFI_ERR_IO;
    return st;
}

/* --------------------------------------------------------------- start-up */
/* The data, in a setting: kind, sizes and geometry shown, its contents
 * compared (two copies of the same data in different places agree). */
static void data_setting(run *r, train_settings *ts)
{
    if (ts->n >= TRAIN_MAX_SETTINGS) return;
    const train_options *o = &r->o;
    char *v = ts->text[ts->n];
    if (!r->train) { /* (--help, or this rank failed before: the same count of settings) */
        snprintf(v, sizeof ts->text[0], "(not opened)");
        ts->set[ts->n++] = (hyfi_setting){.name = "the data (--dataset, --datapath: its contents)",
                                          .value = v};
        return;
    }
    snprintf(v, sizeof ts->text[0], "%s: %zu+%zu images %dx%dx%d, %d classes",
             hyfi_data_kind_name(o->dataset), hyfi_dataset_size(r->train),
             r->test ? hyfi_dataset_size(r->test) : 0, hyfi_dataset_channels(r->train),
             hyfi_dataset_height(r->train), hyfi_dataset_width(r->train),
             hyfi_dataset_num_classes(r->train));
    uint64_t h = hyfi_dataset_fingerprint(r->train);
    if (r->test) h = h * 0x100000001b3ull ^ hyfi_dataset_fingerprint(r->test);
    ts->set[ts->n++] = (hyfi_setting){.name = "the data (--dataset, --datapath: its contents)",
                                      .value = v, .hash = h | 1};
}

static void resume_setting(run *r, train_settings *ts)
{
    if (ts->n >= TRAIN_MAX_SETTINGS) return;
    const char *base = strrchr(r->resume_file, '/');
    snprintf(ts->text[ts->n], sizeof ts->text[0], "%.90s",
             !r->resume_file[0] ? "(none)" : base ? base + 1 : r->resume_file);
    ts->set[ts->n] = (hyfi_setting){.name = "the checkpoint resumed", .value = ts->text[ts->n]};
    ts->n++;
}

int train_startup(run *r, int argc, char **argv)
{
    /* --version: before MPI and StarPU, so that it answers at once, with or
     * without mpiexec and on a machine without a GPU */
    if (train_version(argc, argv, stdout)) return -1;
    /* MPI's start, under the watchdog's limit */
    hyfi_launch_config lc = hyfi_launch_config_default();
    lc.timeout_s = train_early_watchdog(argc, argv);
    lc.death_notice = hyfi_env_death_notice();
    if (hyfi_launch_begin(&lc, &g_rank, &g_nranks) != HYFI_OK) {
        fprintf(stderr, "hyfi-train: %s\n", hyfi_last_error());
        return 1;
    }
    r->nranks = g_nranks;
    r->lead = g_rank == 0;
    if (!r->lead) {
        FILE *quiet = freopen("/dev/null", "w", stdout); /* other ranks: quiet on stdout */
        (void)quiet;
    }
    /* this rank's own start-up: nothing printed until every rank has told */
    char msg[1024] = "";
    hyfi_status st = HYFI_OK;
    int code = 0; /* the exit status of this rank's own failure */
    const int pr = train_parse_args(argc, argv, &r->o, msg, sizeof msg);
    if (pr < 0) {
        const size_t used = strlen(msg);
        snprintf(msg + used, sizeof msg - used, "\n(hyfi-train --help lists the flags)");
        st = HYFI_ERR_ARG;
    }
    hyfi_checkpoint_meta meta;
    if (st == HYFI_OK && pr == 0 && r->o.resume) st = resolve_resume(r, &meta, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0) st = load_data(r, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0) st = fit_geometry(r, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0 && r->o.resume) st = check_resume(r, &meta, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0) st = check_trace_window(r, &meta, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0 && r->lead && !r->o.dry_run) st = probe_outputs(r, msg, sizeof msg);
    if (st == HYFI_OK && pr == 0 && !r->o.dry_run) {
        const hyfi_ctx_config cc = {.device = r->o.device, .ncuda = -1, .mpi = -1,
                                    .trace_dir = r->o.trace, .watchdog_s = r->o.watchdog_s,
                                    .mem_limit_mb = r->o.mem_limit_mb,
                                    .swap_dir = r->o.swap_dir, .swap_mb = r->o.swap_mb};
        if ((st = hyfi_ctx_config_check(&cc)) != HYFI_OK)
            snprintf(msg, sizeof msg, "%s", hyfi_last_error());
    }
    if (st != HYFI_OK) code = config_error(st) ? 2 : 1;

    /* every rank's outcome and settings, on every rank */
    train_settings ts;
    ts.n = 0;
    snprintf(ts.text[0], sizeof ts.text[0], "%s", r->o.help ? "yes" : "no");
    ts.set[ts.n++] = (hyfi_setting){.name = "--help", .value = ts.text[0]};
    {
        /* (also for --help, whose options are the defaults: the same count) */
        train_settings rest;
        train_settings_fill(&r->o, &rest);
        for (int i = 0; i < rest.n && ts.n < TRAIN_MAX_SETTINGS; i++, ts.n++) {
            memcpy(ts.text[ts.n], rest.text[i], sizeof ts.text[0]);
            ts.set[ts.n] = rest.set[i];
            ts.set[ts.n].value = ts.text[ts.n];
        }
        data_setting(r, &ts);
        resume_setting(r, &ts);
    }
    bool alike = false;
    const hyfi_status a =
        hyfi_launch_agree(st, msg, "arguments", ts.set, ts.n, &alike);
    if (a != HYFI_OK) {
        report_agreed(st != HYFI_OK, alike);
        return st != HYFI_OK ? code : config_error(a) ? 2 : 1;
    }
    if (pr > 0) { /* --help */
        if (r->lead) train_usage(stdout);
        hyfi_launch_end();
        return -1;
    }
    if (r->lead) {
        train_print_lines(stderr, "hyfi-train: warning: ", r->o.warnings);
        if (train_given(&r->o, "--watchdog") && r->o.watchdog_s && r->nranks < 2)
            fprintf(stderr, "hyfi-train: warning: --watchdog has no effect in a single process "
                            "(it watches the other ranks of an MPI run)\n");
    }
    return 0;
}
