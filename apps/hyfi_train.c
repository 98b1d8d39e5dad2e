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
 * previous step (waiting for the batch, copying it in, forward, backward and
 * update); batches are prepared by a prefetch thread (apps/data.h) meanwhile.
 * Single process for now: the context is created with mpi = 0.
 *
 * Output: `step S loss L images/s R` every --print-freq steps (and the first
 * and last), then a summary:
 * mean and median images/s over the steps after the first 5 (warm-up: StarPU
 * calibrates its performance models there), and the accuracy on the test split
 * computed in eval mode (hyfi_infer: batch norm with running statistics). The
 * test set is cut into batches of --batch-size; the last one is filled up with
 * images from the start of the set, and those padding rows are not counted.
 * --metrics FILE writes the same as JSON lines (see usage()).
 *
 * Exit status: 0 success, 1 a run-time failure (data files, hyfi/StarPU
 * errors; the message says which), 2 a bad command line, model or plan (the
 * flags cannot work: fix them).
 *
 * Under mpiexec an error that every rank hits alike (it follows from the
 * flags, the model, the plan or the data's geometry) is printed once, by rank
 * 0; one that may differ between ranks (a data file one node cannot read, a
 * failure of its workers) by each rank that hits it, with its rank. */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "data.h"
#include "models.h"

#include <hyfi.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define WARMUP_STEPS 5
#define MAX_IMAGE_SIDE 16384
#define MIN_IMAGE_SIDE 1 /* each model checks its own minimum (models.h) */

typedef struct options {
    model_config mc;           /* --model and its flags (num_classes set in main) */
    int dry_run;               /* --dry-run: summary of the graph, no training */
    int batch_size;
    int image_size;            /* 0: the data set's */
    int num_classes;           /* 0: the data set's (synthetic: 10) */
    hyfi_data_kind dataset;
    const char *datapath;      /* NULL: the data set's default */
    long long steps;           /* 0: whole epochs */
    int num_epochs;
    float lr, momentum, weight_decay;
    int cosine;                /* --lr-schedule cosine */
    uint64_t seed;
    hyfi_device device;
    const char *metrics;       /* NULL: none */
    int print_freq;
    float divergence;          /* --divergence-ratio: stop when loss > this x the first; 0: never */
    long long eval_batches;    /* 0: the whole test split */
    int verbose;
    /* parallelism (hyfi_plan_config) */
    int split_size;            /* --split-size: stages */
    int *balance;              /* --balance a,b,...: layers per stage (nbalance entries) */
    int nbalance;
    int parts;                 /* --parts: micro-batches */
    hyfi_schedule schedule;    /* --schedule */
    int deterministic;         /* --deterministic */
    int spatial_size;          /* --spatial-size: tiled stages */
    int spatial_parts;         /* --num-spatial-parts */
    hyfi_slice_method slice;   /* --slice-method */
    int fused_layers;          /* --fused-layers, --halo-d2 */
    hyfi_gems gems;            /* --gems */
    int replications;          /* --replications, --times (MASTER) */
    int data_parallel;         /* --data-parallel */
    hyfi_allreduce allreduce;  /* --allreduce */
    int bucket_kib;            /* --bucket-kib */
    const char *trace;         /* --trace DIR */
    int watchdog_s;            /* --watchdog, HYFI_WATCHDOG_S; 0: off */
} options;

/* Model replicas: GEMS copies x data-parallel groups. */
static int replicas(const options *o)
{
    const int copies = o->gems == HYFI_GEMS_NONE   ? 1
                       : o->gems == HYFI_GEMS_MAST ? 2
                                                   : 2 * (o->replications > 1 ? o->replications : 1);
    return copies * (o->data_parallel > 1 ? o->data_parallel : 1);
}

#define MAX_STAGES 4096
/* --watchdog default: far above a step of the models this driver trains on a
 * node's CPUs, far below "forever". */
#define DEFAULT_WATCHDOG_S 120

static void usage(FILE *f)
{
    fprintf(f,
        "usage: hyfi-train [options]\n"
        "Train a CNN with hyfi (StarPU task graphs) and report images/s and test accuracy.\n"
        "\n"
        "  --model NAME          cnn | resnet | amoebanet [cnn] (apps/models.h has the details)\n"
        "                        cnn: conv3x3(32)-bn-relu-maxpool2, conv3x3(64)-bn-relu-\n"
        "                        maxpool2, conv3x3(128)-bn-relu, global average pool, fc\n"
        "                        resnet: ResNet of --depth and --resnet-version\n"
        "                        amoebanet: AmoebaNet-D (--num-layers, --num-filters), images\n"
        "                        of 32x32 or more\n"
        "  --depth N             ResNet depth [%d]. Depths 18, 34, 50, 101, 152: ImageNet\n"
        "                        family (7x7/2 stem, max-pool, 4 stages; v1 = torchvision's\n"
        "                        resnetN; images of 32x32 or more); any other depth: CIFAR\n"
        "                        family (3x3 stem, 3 stages of 16/32/64 basic blocks for v1,\n"
        "                        depth 6n+2: 8, 20, 56, 110, 164, ...; pre-activation\n"
        "                        bottlenecks 16->64, 64->128, 128->256 for v2, depth 9n+2:\n"
        "                        11, 20, 56, 110, 164, 1001, ...)\n"
        "  --resnet-version V    1: post-activation (He et al. 2015); 2: pre-activation\n"
        "                        (He et al. 2016; at ImageNet depths the pre-activation\n"
        "                        ResNet on the ImageNet stem) [%d]\n"
        "  --resnet-style S      auto | cifar | imagenet: the family rule above (auto), or\n"
        "                        forced (e.g. cifar for MPI4DL's v2-101, n = 11) [auto]\n"
        "  --num-layers L        AmoebaNet-D normal cells, a multiple of 3: L/3 in each of\n"
        "                        3 groups [%d, MPI4DL's default]\n"
        "  --num-filters F       AmoebaNet-D filters, a multiple of 4 (stem F/4, cells F/2\n"
        "                        up to 4F) [%d, MPI4DL's default: 312M parameters, very slow\n"
        "                        on CPUs; try --num-layers 6 --num-filters 64]\n"
        "  --dry-run             build the graph, print per op its name, kind, output shape,\n"
        "                        parameters and FLOPs per image, then the totals (parameters,\n"
        "                        forward FLOPs per image, activation memory per image) and\n"
        "                        exit 0 without compiling or training\n"
        "  --dataset NAME        synthetic | fashion-mnist | mnist | cifar10 | folder\n"
        "                        [synthetic]\n"
        "                        synthetic: 10 x batch-size random 3-channel images with random\n"
        "                        labels (like MPI4DL's FakeData), no test split\n"
        "                        folder: DIR/CLASS/*.png|*.jpg|*.jpeg (torchvision ImageFolder,\n"
        "                        MPI4DL's app 1), classes sorted by name; DIR/train and\n"
        "                        DIR/val (or DIR/test) when present are the train and test\n"
        "                        splits, else no test split; images decoded per batch\n"
        "  --datapath DIR        data directory; fashion-mnist defaults to\n"
        "                        " HYFI_FASHION_MNIST_DEFAULT_DIR " (Debian's\n"
        "                        dataset-fashion-mnist); mnist, cifar10 and folder need it;\n"
        "                        refused with synthetic, which reads no files\n"
        "  --batch-size N        images per step [64]\n"
        "  --image-size N        resize images to N x N (bilinear) [the data set's; synthetic 32]\n"
        "  --num-classes N       classes of the classifier [the data set's; synthetic 10]\n"
        "  --steps N             training steps; 0: whole epochs [0]\n"
        "  --num-epochs N        epochs when --steps is 0 [1]\n"
        "  --lr X                SGD learning rate (also --learning-rate) [0.05]\n"
        "  --lr-schedule S       constant | cosine: lr * (1 + cos(pi * step / steps)) / 2,\n"
        "                        from lr down to 0 over the run [constant]\n"
        "  --momentum X          SGD momentum, 0 <= X < 1 [0.9]\n"
        "  --weight-decay X      L2 weight decay [5e-4]\n"
        "  --seed N              seed of the parameters, the shuffling and synthetic data [42]\n"
        "  --device D            auto | cpu | cuda [auto]\n"
        "  --print-freq N        print a step line every N steps [50]\n"
        "  --eval-batches K      evaluate on the first K test batches; 0: all [0]\n"
        "  --divergence-ratio R  stop with an error when a step's loss exceeds R times the\n"
        "                        first step's (a diverging run); 0: never. A loss 10x the\n"
        "                        first's or a gradient norm 100x the first's is warned\n"
        "                        about [1000]\n"
        "  --metrics FILE        write JSON lines: per step {\"step\",\"loss\",\"images_per_sec\",\n"
        "                        \"grad_norm\",\"weight_norm\"},\n"
        "                        then {\"summary\":true,\"mean_images_per_sec\",\n"
        "                        \"median_images_per_sec\",\"test_accuracy\"} (null where not\n"
        "                        applicable)\n"
        "\n"
        "Parallelism (run under mpiexec for several ranks; every plan also runs in one\n"
        "process, its places sharing the process's workers):\n"
        "  --split-size S        cut the model's layers into S stages, one place each\n"
        "                        (layer parallelism); places are spread over the MPI ranks,\n"
        "                        at most one rank per stage [1]\n"
        "  --balance a,b,...     layers per stage (S numbers summing to the model's layer\n"
        "                        count: --dry-run lists the layers) [balanced by FLOPs]\n"
        "  --parts M             micro-batches per step (pipeline parallelism); M divides\n"
        "                        the batch; batch norm works per micro-batch [1]\n"
        "  --schedule S          gpipe | 1f1b: all forwards then all backwards, or one\n"
        "                        forward one backward (fewer activations alive) [gpipe]\n"
        "  --deterministic       sum micro-batch gradients in micro-batch order (the same\n"
        "                        floats for every plan) instead of a StarPU reduction\n"
        "  --spatial-size K      the first K stages work on tiles of each image (spatial\n"
        "                        parallelism), one place per tile; halos are exchanged\n"
        "                        between tiles and batch norm uses whole-batch statistics,\n"
        "                        so the step is the untiled one [0]\n"
        "  --num-spatial-parts P tiles per image, at most 16 [4 with --spatial-size]\n"
        "  --slice-method S      square | vertical | horizontal: a sqrt(P) x sqrt(P) grid, P\n"
        "                        vertical strips or P horizontal strips [square]\n"
        "  --fused-layers F      up to F consecutive tiled convolutions/pools share one\n"
        "                        wider halo exchange, recomputing a shrinking border [1]\n"
        "  --halo-d2             --fused-layers 2 (MPI4DL's flag)\n"
        "  --gems M              mast | master: bidirectional parallelism (GEMS): a second\n"
        "                        copy of the model with its stages mirrored (stage i on the\n"
        "                        place of stage S-1-i), on its own slice of the data [none]\n"
        "  --replications R      master: R pairs of copies (also --times, MPI4DL's name) [1]\n"
        "  --data-parallel N     N replicas of the whole arrangement, each on ranks/N ranks\n"
        "                        and its own slice of the data; gradients all-reduced by\n"
        "                        tasks as soon as each is complete [1]\n"
        "  --allreduce A         auto | ring | tree: the all-reduce over the replicas; auto:\n"
        "                        tree below 64 KiB per gradient, ring above [auto]\n"
        "  --bucket-kib K        gradients travel packed in buckets of up to K KiB; -1: one\n"
        "                        all-reduce per parameter [256]\n"
        "  With replicas, --batch-size is per replica (as in MPI4DL): a step trains on\n"
        "  batch-size x replicas images, replica k on the k-th slice, and images/s counts\n"
        "  them all. The step equals the one-place step with --batch-size B x replicas\n"
        "  --parts M x replicas. Each step line is followed by MPI4DL's own line\n"
        "  (`Epoch: e images per sec:X`, X = --batch-size / step time, as MPI4DL counts).\n"
        "\n"
        "  --trace DIR           record a StarPU FxT trace on every rank; at the end rank 0\n"
        "                        merges it into DIR (paje.trace for ViTE, tasks.rec,\n"
        "                        comms.rec, dag.dot), prints hyfi's summary and writes\n"
        "                        DIR/summary.json and DIR/timeline.svg (docs/tracing.md)\n"
        "  --watchdog S          under mpiexec: when a rank has waited S seconds for the\n"
        "                        others without any task completing on it (a peer stopped\n"
        "                        or died, or a hang), it prints so and ends every rank\n"
        "                        (MPI_Abort); set it above the longest step; 0: off\n"
        "                        [HYFI_WATCHDOG_S, else %d]\n"
        "  -v, --verbose         print the StarPU workers found\n"
        "  -h, --help            this text\n"
        "\n"
        "Exit status: 0 success, 1 run-time failure, 2 bad command line, model or plan.\n",
        MODEL_DEFAULT_DEPTH, MODEL_DEFAULT_RESNET_VERSION, MODEL_DEFAULT_NUM_LAYERS,
        MODEL_DEFAULT_NUM_FILTERS, DEFAULT_WATCHDOG_S);
}

/* ----------------------------------------------------------------- errors */
/* This process's rank and the rank count: from the launcher's environment
 * until the context exists (MPICH/Hydra, PMIx, Open MPI), then the context's. */
static int g_rank, g_nranks = 1;

static void launcher_rank(void)
{
    static const char *const rank_vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"};
    static const char *const size_vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof rank_vars / sizeof *rank_vars; i++)
        if (getenv(rank_vars[i])) {
            g_rank = atoi(getenv(rank_vars[i]));
            break;
        }
    for (size_t i = 0; i < sizeof size_vars / sizeof *size_vars; i++)
        if (getenv(size_vars[i])) {
            g_nranks = atoi(getenv(size_vars[i]));
            break;
        }
    if (g_rank < 0) g_rank = 0;
    if (g_nranks <= g_rank) g_nranks = g_rank + 1;
}

/* An error. alike: every rank hits it alike; only rank 0 prints it. Otherwise
 * it is printed with the rank (in multi-rank runs). One write per message, so
 * that the ranks' lines do not interleave. */
__attribute__((format(printf, 2, 3)))
static void report(bool alike, const char *fmt, ...)
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

/* Statuses that follow from the flags (the model or the plan cannot work):
 * exit status 2. */
static bool config_error(hyfi_status s) { return s == HYFI_ERR_ARG || s == HYFI_ERR_SHAPE; }

/* ---------------------------------------------------------------- parsing */
__attribute__((format(printf, 1, 2)))
static int bad_usage(const char *fmt, ...)
{
    if (g_rank != 0) return -1; /* every rank has the same command line */
    va_list ap;
    fputs("hyfi-train: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n(hyfi-train --help lists the flags)\n", stderr);
    return -1;
}

static int parse_ll(const char *flag, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return bad_usage("%s '%s' is not valid: expected an integer in %lld..%lld", flag, s, lo,
                         hi);
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out)
{
    long long v;
    if (parse_ll(flag, s, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* A finite float in the interval lo..hi, each end open or closed. */
static int parse_float(const char *flag, const char *s, double lo, bool lo_open, double hi,
                       bool hi_open, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || (lo_open ? v <= lo : v < lo) ||
        (hi_open ? v >= hi : v > hi))
        return bad_usage("%s '%s' is not valid: expected a number in %s%g, %g%s", flag, s,
                         lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
    *out = (float)v;
    return 0;
}

/* 0: parsed; 1: --help shown; -1: bad command line (message printed). */
static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.batch_size = 64, .dataset = HYFI_DATA_SYNTHETIC,
                   .num_epochs = 1, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f,
                   .seed = 42, .device = HYFI_DEVICE_AUTO, .print_freq = 50,
                   .divergence = 1000,
                   .mc = model_config_default(), .watchdog_s = DEFAULT_WATCHDOG_S};
    const char *wd = getenv("HYFI_WATCHDOG_S");
    if (wd && *wd && parse_int("HYFI_WATCHDOG_S", wd, 0, 1 << 24, &o->watchdog_s)) return -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
            o->verbose = 1;
            continue;
        }
        if (strcmp(arg, "--dry-run") == 0) {
            o->dry_run = 1;
            continue;
        }
        if (strcmp(arg, "--deterministic") == 0) {
            o->deterministic = 1;
            continue;
        }
        if (strcmp(arg, "--halo-d2") == 0) {
            o->fused_layers = 2;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0)
            return bad_usage("unexpected argument '%s': flags start with --", arg);
        /* --flag=value or --flag value */
        char flag[64];
        const char *val = NULL, *eq = strchr(arg, '=');
        size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (flen >= sizeof flag) return bad_usage("unknown flag '%s'", arg);
        memcpy(flag, arg, flen);
        flag[flen] = 0;
        static const char *const KNOWN[] = {
            "--model", "--dataset", "--datapath", "--batch-size", "--image-size",
            "--num-classes", "--steps", "--num-epochs", "--lr", "--learning-rate",
            "--lr-schedule", "--momentum", "--weight-decay", "--seed", "--device", "--print-freq",
            "--eval-batches", "--metrics", "--divergence-ratio", "--depth", "--resnet-version", "--resnet-style",
            "--num-layers", "--num-filters", "--split-size", "--balance", "--parts",
            "--schedule", "--spatial-size", "--num-spatial-parts", "--slice-method",
            "--fused-layers", "--gems", "--replications", "--times", "--data-parallel",
            "--allreduce", "--bucket-kib", "--trace", "--watchdog"};
        bool known = false;
        for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++) known |= !strcmp(flag, KNOWN[k]);
        if (!known) return bad_usage("unknown flag '%s'", flag);
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            return bad_usage("%s needs a value", flag);
        }
        long long ll;
        int rc = 0;
        if (!strcmp(flag, "--model")) {
            if (model_kind_from_name(val, &o->mc.kind) != 0)
                return bad_usage("--model '%s' is not known; valid: cnn, resnet, amoebanet", val);
        } else if (!strcmp(flag, "--depth")) {
            rc = parse_int(flag, val, 1, MODEL_MAX_DEPTH, &o->mc.depth);
        } else if (!strcmp(flag, "--resnet-version")) {
            rc = parse_int(flag, val, 1, 2, &o->mc.resnet_version);
        } else if (!strcmp(flag, "--resnet-style")) {
            if (resnet_style_from_name(val, &o->mc.style) != 0)
                return bad_usage("--resnet-style '%s' is not known; valid: auto, cifar, imagenet",
                                 val);
        } else if (!strcmp(flag, "--num-layers")) {
            rc = parse_int(flag, val, 1, MODEL_MAX_NUM_LAYERS, &o->mc.num_layers);
        } else if (!strcmp(flag, "--num-filters")) {
            rc = parse_int(flag, val, 1, MODEL_MAX_NUM_FILTERS, &o->mc.num_filters);
        } else if (!strcmp(flag, "--dataset")) {
            if (hyfi_data_kind_from_name(val, &o->dataset) != 0)
                return bad_usage("--dataset '%s' is not known; valid: synthetic, fashion-mnist, "
                                 "mnist, cifar10, folder", val);
        } else if (!strcmp(flag, "--datapath")) {
            if (!*val) return bad_usage("--datapath needs a directory");
            o->datapath = val;
        } else if (!strcmp(flag, "--batch-size")) {
            rc = parse_int(flag, val, 1, 1 << 20, &o->batch_size);
        } else if (!strcmp(flag, "--image-size")) {
            rc = parse_int(flag, val, MIN_IMAGE_SIDE, MAX_IMAGE_SIDE, &o->image_size);
        } else if (!strcmp(flag, "--num-classes")) {
            rc = parse_int(flag, val, 2, 1 << 20, &o->num_classes);
        } else if (!strcmp(flag, "--steps")) {
            rc = parse_ll(flag, val, 0, LLONG_MAX / 2, &o->steps);
        } else if (!strcmp(flag, "--num-epochs")) {
            rc = parse_int(flag, val, 1, 1 << 20, &o->num_epochs);
        } else if (!strcmp(flag, "--lr") || !strcmp(flag, "--learning-rate")) {
            rc = parse_float(flag, val, 0, true, 1e3, false, &o->lr);
        } else if (!strcmp(flag, "--lr-schedule")) {
            if (!strcmp(val, "constant")) o->cosine = 0;
            else if (!strcmp(val, "cosine")) o->cosine = 1;
            else return bad_usage("--lr-schedule '%s' is not known; valid: constant, cosine", val);
        } else if (!strcmp(flag, "--momentum")) {
            rc = parse_float(flag, val, 0, false, 1, true, &o->momentum);
        } else if (!strcmp(flag, "--weight-decay")) {
            rc = parse_float(flag, val, 0, false, 1, false, &o->weight_decay);
        } else if (!strcmp(flag, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-')
                return bad_usage("--seed '%s' is not valid: expected an integer in 0..%llu", val,
                                 (unsigned long long)UINT64_MAX);
            o->seed = v;
        } else if (!strcmp(flag, "--device")) {
            if (!strcmp(val, "auto")) o->device = HYFI_DEVICE_AUTO;
            else if (!strcmp(val, "cpu")) o->device = HYFI_DEVICE_CPU;
            else if (!strcmp(val, "cuda")) o->device = HYFI_DEVICE_CUDA;
            else return bad_usage("--device '%s' is not known; valid: auto, cpu, cuda", val);
        } else if (!strcmp(flag, "--divergence-ratio")) {
            rc = parse_float(flag, val, 0, false, 1e30f, false, &o->divergence);
            if (!rc && o->divergence > 0 && o->divergence <= 1)
                return bad_usage("--divergence-ratio %g must be above 1 (or 0: never stop)",
                                 (double)o->divergence);
        } else if (!strcmp(flag, "--print-freq")) {
            rc = parse_int(flag, val, 1, INT_MAX, &o->print_freq);
        } else if (!strcmp(flag, "--eval-batches")) {
            rc = parse_ll(flag, val, 0, LLONG_MAX / 2, &ll);
            o->eval_batches = ll;
        } else if (!strcmp(flag, "--metrics")) {
            if (!*val) return bad_usage("--metrics needs a file name");
            o->metrics = val;
        } else if (!strcmp(flag, "--split-size")) {
            rc = parse_int(flag, val, 1, MAX_STAGES, &o->split_size);
        } else if (!strcmp(flag, "--fused-layers")) {
            rc = parse_int(flag, val, 1, 32, &o->fused_layers);
        } else if (!strcmp(flag, "--spatial-size")) {
            rc = parse_int(flag, val, 0, MAX_STAGES, &o->spatial_size);
        } else if (!strcmp(flag, "--num-spatial-parts")) {
            rc = parse_int(flag, val, 1, 16, &o->spatial_parts);
        } else if (!strcmp(flag, "--slice-method")) {
            if (!strcmp(val, "square")) o->slice = HYFI_SLICE_SQUARE;
            else if (!strcmp(val, "vertical")) o->slice = HYFI_SLICE_VERTICAL;
            else if (!strcmp(val, "horizontal")) o->slice = HYFI_SLICE_HORIZONTAL;
            else return bad_usage("--slice-method '%s' is not known; valid: square, vertical, "
                                  "horizontal", val);
        } else if (!strcmp(flag, "--gems")) {
            if (!strcmp(val, "mast")) o->gems = HYFI_GEMS_MAST;
            else if (!strcmp(val, "master")) o->gems = HYFI_GEMS_MASTER;
            else if (!strcmp(val, "none")) o->gems = HYFI_GEMS_NONE;
            else return bad_usage("--gems '%s' is not known; valid: mast, master, none", val);
        } else if (!strcmp(flag, "--replications") || !strcmp(flag, "--times")) {
            rc = parse_int(flag, val, 1, 6, &o->replications);
        } else if (!strcmp(flag, "--data-parallel")) {
            rc = parse_int(flag, val, 1, 12, &o->data_parallel);
        } else if (!strcmp(flag, "--trace")) {
            if (!*val) return bad_usage("--trace needs a folder");
            o->trace = val;
        } else if (!strcmp(flag, "--watchdog")) {
            rc = parse_int(flag, val, 0, 1 << 24, &o->watchdog_s);
        } else if (!strcmp(flag, "--bucket-kib")) {
            rc = parse_int(flag, val, -1, 1 << 20, &o->bucket_kib);
        } else if (!strcmp(flag, "--allreduce")) {
            if (!strcmp(val, "auto")) o->allreduce = HYFI_ALLREDUCE_AUTO;
            else if (!strcmp(val, "ring")) o->allreduce = HYFI_ALLREDUCE_RING;
            else if (!strcmp(val, "tree")) o->allreduce = HYFI_ALLREDUCE_TREE;
            else return bad_usage("--allreduce '%s' is not known; valid: auto, ring, tree", val);
        } else if (!strcmp(flag, "--parts")) {
            rc = parse_int(flag, val, 1, 1 << 20, &o->parts);
        } else if (!strcmp(flag, "--schedule")) {
            if (!strcmp(val, "gpipe")) o->schedule = HYFI_SCHEDULE_GPIPE;
            else if (!strcmp(val, "1f1b")) o->schedule = HYFI_SCHEDULE_1F1B;
            else return bad_usage("--schedule '%s' is not known; valid: gpipe, 1f1b", val);
        } else if (!strcmp(flag, "--balance")) {
            free(o->balance);
            o->balance = NULL;
            o->nbalance = 0;
            int cap = 1;
            for (const char *c = val; *c; c++) cap += *c == ',';
            if (cap > MAX_STAGES) return bad_usage("--balance has more than %d entries", MAX_STAGES);
            o->balance = malloc((size_t)cap * sizeof *o->balance);
            if (!o->balance) return bad_usage("out of memory parsing --balance");
            const char *c = val;
            for (;;) {
                char *end;
                errno = 0;
                long v = strtol(c, &end, 10);
                if (end == c || errno || v < 1 || v > 1000000 || (*end && *end != ','))
                    return bad_usage("--balance '%s' is not valid: expected positive layer "
                                     "counts separated by commas, e.g. 3,4,4", val);
                o->balance[o->nbalance++] = (int)v;
                if (!*end) break;
                c = end + 1;
            }
        }
        if (rc) return -1;
    }
    if (o->datapath && o->dataset == HYFI_DATA_SYNTHETIC)
        return bad_usage("--datapath %s is given, but the data set is synthetic (the default), "
                         "which reads no files; pass --dataset folder, mnist, cifar10 or "
                         "fashion-mnist with it, or leave --datapath out", o->datapath);
    if (o->replications > 1 && o->gems != HYFI_GEMS_MASTER)
        return bad_usage("--replications %d needs --gems master (MAST has one pair of copies)",
                         o->replications);
    if (replicas(o) > 12)
        return bad_usage("%d replicas (GEMS copies x --data-parallel): at most 12", replicas(o));
    if (o->balance) {
        if (!o->split_size) o->split_size = o->nbalance;
        if (o->nbalance != o->split_size)
            return bad_usage("--balance has %d entries but --split-size is %d; give one layer "
                             "count per stage", o->nbalance, o->split_size);
    }
    /* The model's own rules (ResNet depths, L and F of AmoebaNet-D); the
     * image size is checked once the data set's is known. */
    char err[512];
    model_config mc = o->mc;
    mc.num_classes = 2;
    if (model_check(&mc, 3, MAX_IMAGE_SIDE, MAX_IMAGE_SIDE, err, sizeof err))
        return bad_usage("%s", err);
    return 0;
}

/* ---------------------------------------------------------------- helpers */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

/* A JSON number, or null when not finite / not applicable. */
static void json_num(FILE *f, bool have, double v)
{
    if (have && isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

/* A failed hyfi call. Argument, shape, state and data errors come from what
 * every rank computes alike (flags, plan, the same batches): printed once. */
static int lib_fail(const char *what, hyfi_status s, const hyfi_graph *g)
{
    const char *msg = g ? hyfi_graph_error(g) : "";
    if (!msg || !*msg) msg = hyfi_last_error();
    const bool alike = config_error(s) || s == HYFI_ERR_STATE || s == HYFI_ERR_DATA;
    report(alike, "%s failed (%s): %s", what, hyfi_status_name(s),
           msg && *msg ? msg : "no message");
    return 1;
}

/* Under mpiexec every rank runs this program in lock step (SPMD): what makes
 * the ranks' collective work differ beyond the graph, plan and training
 * settings (which hyfi_graph_compile compares) is compared here: the steps,
 * the data, the evaluation, the trace. Each rank may choose the rest
 * (--device, --watchdog, -v), or only rank 0 uses it (--metrics,
 * --print-freq). */
static hyfi_status check_same_args(hyfi_ctx *ctx, const options *o, const hyfi_dataset *train,
                                   const hyfi_dataset *test, long long total)
{
    char steps[64], data[256], eval[32];
    snprintf(steps, sizeof steps, "%lld steps", total);
    snprintf(data, sizeof data, "%s, %zu train and %zu test images of %dx%dx%d, %d classes%s%s",
             hyfi_data_kind_name(o->dataset), hyfi_dataset_size(train),
             test ? hyfi_dataset_size(test) : 0, hyfi_dataset_channels(train),
             hyfi_dataset_height(train), hyfi_dataset_width(train),
             hyfi_dataset_num_classes(train), o->datapath ? " in " : "",
             o->datapath ? o->datapath : "");
    snprintf(eval, sizeof eval, "%lld", o->eval_batches);
    const hyfi_setting set[] = {
        {"--steps/--num-epochs", steps},
        {"--dataset/--datapath", data},
        {"--eval-batches", eval},
        {"--lr-schedule", o->cosine ? "cosine" : "constant"},
        {"--trace", o->trace ? o->trace : "(none)"},
    };
    return hyfi_ctx_check_same(ctx, "arguments", set, (int)(sizeof set / sizeof *set));
}

/* ---------------------------------------------------------------- dry run */
/* --dry-run: build the model on a CPU-only context (no data is read beyond
 * the geometry), print one line per op and the totals, exit 0 without
 * compiling. FLOPs and activation bytes are per image (the op's values for the
 * batch divided by B). Returns the exit status. */
static int dry_run(const options *o, int C, int H, int W, int K)
{
    const int B = o->batch_size;
    char err[1024], what[200];
    hyfi_ctx *ctx = NULL;
    hyfi_graph *g = NULL;
    hyfi_status st;
    int rc = 1;
    hyfi_ctx_config cc = {.device = HYFI_DEVICE_CPU, .ncpus = 1, .mpi = 0,
                          .verbose = o->verbose};
    if ((st = hyfi_ctx_create(&ctx, &cc)) != HYFI_OK) {
        lib_fail("starting the engine (hyfi_ctx_create)", st, NULL);
        return 1;
    }
    if ((st = hyfi_graph_create(ctx, o->seed, &g)) != HYFI_OK) {
        lib_fail("hyfi_graph_create", st, NULL);
        goto done;
    }
    hyfi_tensor *x = hyfi_input(g, "image", B, C, H, W);
    hyfi_tensor *y = hyfi_labels(g, "label", B);
    hyfi_tensor *logits = hyfi_model_build(g, &o->mc, x, err, sizeof err);
    if (!logits) {
        fprintf(stderr, "hyfi-train: %s\n", err);
        goto done;
    }
    hyfi_softmax_cross_entropy(g, "loss", logits, y);
    if ((st = hyfi_graph_status(g)) != HYFI_OK) {
        lib_fail("building the loss", st, g);
        goto done;
    }
    model_describe(&o->mc, what, sizeof what);
    printf("hyfi-train: dry run: %s on %dx%dx%d images, %d classes, batch %d\n", what, C, H, W,
           K, B);
    printf("%5s  %-40s %-22s %-22s %12s %16s  %s\n", "op", "name", "kind", "output (N,C,H,W)",
           "params", "FLOPs/image", "layer");
    const int nops = hyfi_graph_op_count(g);
    size_t params = 0, act = 0;
    double flops = 0;
    for (int i = 0; i < nops; i++) {
        hyfi_op_info oi;
        if ((st = hyfi_graph_op_info(g, i, &oi)) != HYFI_OK) {
            lib_fail("hyfi_graph_op_info", st, g);
            goto done;
        }
        char shape[64];
        snprintf(shape, sizeof shape, "(%d,%d,%d,%d)", oi.out_dims[0], oi.out_dims[1],
                 oi.out_dims[2], oi.out_dims[3]);
        printf("%5d  %-40s %-22s %-22s %12zu %16.0f  %d %s\n", i, oi.name, oi.kind, shape,
               oi.params, oi.flops / B, oi.layer, oi.layer_name);
        params += oi.params;
        flops += oi.flops / B;
        act += oi.act_bytes;
    }
    const double act_img = (double)act / B;
    printf("ops: %d\n", nops);
    printf("layers: %d (the units of --balance)\n", hyfi_layer_count(g));
    printf("parameters: %zu (%.3f M)\n", params, (double)params / 1e6);
    printf("forward FLOPs per image: %.0f (%.3f GFLOPs; the backward costs about twice that)\n",
           flops, flops / 1e9);
    printf("activation memory per image: %.0f bytes (%.2f MiB; sum of the op outputs, float32; "
           "x %d images: %.1f MiB)\n",
           act_img, act_img / (1 << 20), B, (double)act / (1 << 20));
    if (params != hyfi_param_numel(g))
        fprintf(stderr, "hyfi-train: warning: op parameters %zu differ from the graph's %zu\n",
                params, hyfi_param_numel(g));
    rc = 0;
done:
    if (g) hyfi_graph_destroy(g);
    hyfi_ctx_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------- main */
int main(int argc, char **argv)
{
    options o;
    launcher_rank();
    int pr = parse_args(argc, argv, &o);
    if (pr != 0) free(o.balance);
    if (pr > 0) return 0;
    if (pr < 0) return 2;

    int rc = 1;
    char err[1024] = "";
    hyfi_dataset *train = NULL, *test = NULL;
    hyfi_prefetch *pf = NULL;
    hyfi_ctx *ctx = NULL;
    hyfi_graph *g = NULL;
    FILE *mf = NULL;
    double *rates = NULL;
    float *logits_buf = NULL;
    hyfi_status st;
    int lead = 0, nranks = 1;

    /* Data. */
    hyfi_data_spec spec = {.kind = o.dataset, .split = HYFI_SPLIT_TRAIN, .dir = o.datapath};
    if (o.dataset == HYFI_DATA_SYNTHETIC) {
        spec.channels = 3;
        spec.height = spec.width = o.image_size ? o.image_size : 32;
        spec.num_classes = o.num_classes ? o.num_classes : 10;
        spec.count = (size_t)10 * (size_t)o.batch_size * (size_t)replicas(&o);
        spec.seed = o.seed;
    }
    int drc = hyfi_dataset_open(&spec, &train, err, sizeof err);
    if (drc == 0 && hyfi_data_has_test_split(o.dataset, o.datapath)) {
        spec.split = HYFI_SPLIT_TEST;
        drc = hyfi_dataset_open(&spec, &test, err, sizeof err);
    }
    if (drc) {
        report(false, "%s", err); /* a file one node lacks: per rank */
        goto out;
    }
    const int C = hyfi_dataset_channels(train);
    int H = hyfi_dataset_height(train), W = hyfi_dataset_width(train);
    if (o.image_size && (o.image_size != H || o.image_size != W)) {
        H = W = o.image_size;
        if (hyfi_dataset_set_output(train, C, H, W, err, sizeof err) ||
            (test && hyfi_dataset_set_output(test, C, H, W, err, sizeof err))) {
            report(true, "%s", err);
            goto out;
        }
    }
    /* A folder's test split may differ from train in channels (grey only) or
     * native size (its first image): give it the train geometry. */
    if (test && (hyfi_dataset_channels(test) != C || hyfi_dataset_height(test) != H ||
                 hyfi_dataset_width(test) != W) &&
        hyfi_dataset_set_output(test, C, H, W, err, sizeof err)) {
        report(true, "%s", err);
        goto out;
    }
    if (model_check(&o.mc, C, H, W, err, sizeof err)) {
        report(true, "%s", err);
        rc = 2;
        goto out;
    }
    const int K = o.num_classes ? o.num_classes : hyfi_dataset_num_classes(train);
    if (K < hyfi_dataset_num_classes(train)) {
        report(true, "--num-classes %d is smaller than the %d classes of %s; pass "
                     "--num-classes %d or more (or leave it out)",
               K, hyfi_dataset_num_classes(train), hyfi_data_kind_name(o.dataset),
               hyfi_dataset_num_classes(train));
        rc = 2;
        goto out;
    }
    if (K < 2) { /* a 1-way classifier learns nothing: its loss is always 0 */
        report(true, "%s%s%s has %d class; a classifier needs at least 2: give each class its "
                     "own subfolder (or pass --num-classes 2 or more to train anyway)",
               hyfi_data_kind_name(o.dataset), o.datapath ? " " : "",
               o.datapath ? o.datapath : "", K);
        rc = 2;
        goto out;
    }
    /* B: the global batch (--batch-size per replica, as in MPI4DL) */
    const int nrep = replicas(&o), B = o.batch_size * nrep;
    const size_t ntrain = hyfi_dataset_size(train), numel = hyfi_dataset_image_numel(train);
    const size_t spe = hyfi_data_steps_per_epoch(ntrain, B);
    const long long total = o.steps > 0 ? o.steps : (long long)o.num_epochs * (long long)spe;

    o.mc.num_classes = K;
    if (o.dry_run) {
        rc = dry_run(&o, C, H, W, K);
        goto out;
    }
    /* Engine: StarPU-MPI when launched by mpiexec. Every rank runs this same
     * program on the same data (seeded); rank 0 prints and writes the metrics. */
    hyfi_ctx_config cc = {.device = o.device, .ncpus = 0, .ncuda = -1, .mpi = -1,
                          .scheduler = NULL, .verbose = o.verbose, .trace_dir = o.trace,
                          .watchdog_s = o.watchdog_s};
    if ((st = hyfi_ctx_create(&ctx, &cc)) != HYFI_OK) {
        lib_fail("starting the engine (hyfi_ctx_create)", st, NULL);
        goto out;
    }
    lead = hyfi_ctx_rank(ctx) == 0;
    nranks = hyfi_ctx_nranks(ctx);
    g_rank = hyfi_ctx_rank(ctx);
    g_nranks = nranks;
    if (!lead) {
        /* other ranks stay quiet on stdout */
        if (!freopen("/dev/null", "w", stdout)) {
            fprintf(stderr, "hyfi-train: rank %d: cannot silence stdout\n", hyfi_ctx_rank(ctx));
            goto out;
        }
    }
    /* Only rank 0 writes the metrics, but every rank stops when it cannot:
     * the others would wait for it forever. */
    st = HYFI_OK;
    if (lead && o.metrics && !(mf = fopen(o.metrics, "w"))) {
        snprintf(err, sizeof err, "--metrics %s: cannot open for writing: %s", o.metrics,
                 strerror(errno));
        st = HYFI_ERR_IO;
    }
    if (hyfi_ctx_agree(ctx, st, err) != HYFI_OK) {
        if (lead) fprintf(stderr, "hyfi-train: %s\n", hyfi_last_error());
        goto out;
    }
    /* line-buffered: a killed run leaves whole lines (each written at its '\n') */
    if (mf) setvbuf(mf, NULL, _IOLBF, 0);
    if ((st = hyfi_graph_create(ctx, o.seed, &g)) != HYFI_OK) {
        lib_fail("hyfi_graph_create", st, NULL);
        goto out;
    }
    hyfi_tensor *tx = hyfi_input(g, "image", B, C, H, W); /* (B, C, H, W) */
    hyfi_tensor *ty = hyfi_labels(g, "label", B);         /* (B) */
    hyfi_tensor *tlogits = hyfi_model_build(g, &o.mc, tx, err, sizeof err); /* (B, K, 1, 1) */
    if (!tlogits) {
        report(true, "%s", err);
        if (config_error(hyfi_graph_status(g))) rc = 2;
        goto out;
    }
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", tlogits, ty);
    if (hyfi_graph_status(g) != HYFI_OK) {
        lib_fail("building the loss", hyfi_graph_status(g), g);
        if (config_error(hyfi_graph_status(g))) rc = 2;
        goto out;
    }
    hyfi_train_config tc = {.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay};
    hyfi_plan_config plan = {.stages = o.split_size, .balance = o.balance, .parts = o.parts,
                             .schedule = o.schedule, .deterministic = o.deterministic,
                             .spatial_stages = o.spatial_size,
                             .spatial_parts = o.spatial_size && !o.spatial_parts ? 4
                                                                                 : o.spatial_parts,
                             .slice = o.slice, .fused_layers = o.fused_layers,
                             .gems = o.gems, .replications = o.replications,
                             .data_parallel = o.data_parallel, .allreduce = o.allreduce,
                             .bucket_kib = o.bucket_kib};
    if ((st = hyfi_graph_set_plan(g, &plan)) != HYFI_OK ||
        (st = hyfi_graph_compile(g, loss, &tc)) != HYFI_OK) {
        /* a mismatch between the ranks is the same message on every rank */
        if (lead || st != HYFI_ERR_MISMATCH) lib_fail("hyfi_graph_compile", st, g);
        if (config_error(st)) rc = 2; /* a plan the flags cannot make */
        goto out;
    }
    /* The graph, plan and training settings agree (compile checked them);
     * the rest of what every rank must share, too. */
    if ((st = check_same_args(ctx, &o, train, test, total)) != HYFI_OK) {
        if (lead) fprintf(stderr, "hyfi-train: %s\n", hyfi_last_error());
        goto out;
    }

    char model_what[200];
    model_describe(&o.mc, model_what, sizeof model_what);
    printf("hyfi-train: model %s (%zu parameters), data %s: %zu train%s images of %dx%dx%d, %d "
           "classes\n",
           model_what, hyfi_param_numel(g), hyfi_data_kind_name(o.dataset), ntrain,
           test ? "" : " (no test split)", C, H, W, K);
    if (test) printf("hyfi-train: %zu test images\n", hyfi_dataset_size(test));
    if (nrep > 1)
        printf("hyfi-train: %d replicas x batch %d per replica = global batch %d\n", nrep,
               o.batch_size, B);
    printf("hyfi-train: batch %d, %lld steps (%zu per epoch), lr %g (%s), momentum %g, weight "
           "decay %g, seed %" PRIu64 ", %d CPU + %d CUDA workers\n",
           B, total, spe, (double)o.lr, o.cosine ? "cosine" : "constant", (double)o.momentum,
           (double)o.weight_decay, o.seed,
           hyfi_ctx_ncpu_workers(ctx), hyfi_ctx_ncuda_workers(ctx));
    {
        char *pd = NULL;
        size_t need = hyfi_plan_describe(g, NULL, 0);
        if (need && (pd = malloc(need + 1))) {
            hyfi_plan_describe(g, pd, need + 1);
            fputs(pd, stdout);
        }
        free(pd);
    }
    fflush(stdout);

    /* Training. */
    rates = malloc((size_t)(total > 0 ? total : 1) * sizeof *rates);
    if (!rates) {
        report(false, "out of memory for %lld step timings", total);
        goto out;
    }
    hyfi_prefetch_config pc = {.batch = B, .seed = o.seed, .shuffle = 1,
                               .num_steps = (uint64_t)total};
    if (hyfi_prefetch_start(train, &pc, &pf, err, sizeof err)) {
        report(false, "%s", err);
        goto out;
    }
    double t_prev = now_s();
    float loss0 = 0;
    double gnorm0 = 0;
    int nwarn = 0;
    for (long long s = 0; s < total; s++) {
        hyfi_batch b;
        int prc = hyfi_prefetch_next(pf, &b);
        if (prc) {
            report(false, "preparing batch %lld failed: %s: %s", s + 1,
                   hyfi_data_status_name(prc), hyfi_prefetch_error(pf));
            goto out;
        }
        float l = NAN;
        if (o.cosine && (st = hyfi_set_lr(g, cosine_lr(o.lr, s, total))) != HYFI_OK) {
            lib_fail("hyfi_set_lr", st, g);
            goto out;
        }
        if ((st = hyfi_set_input(g, tx, b.x, (size_t)B * numel)) != HYFI_OK ||
            (st = hyfi_set_labels(g, ty, b.y, (size_t)B)) != HYFI_OK) {
            lib_fail("copying a batch in", st, g);
            goto out;
        }
        if ((st = hyfi_train_step(g, &l)) != HYFI_OK) {
            char what[64];
            snprintf(what, sizeof what, "training step %lld", s + 1);
            lib_fail(what, st, g);
            goto out;
        }
        double t = now_s();
        rates[s] = B / (t - t_prev);
        t_prev = t;
        /* a diverging run: warn early, stop past --divergence-ratio (every rank
         * has the same loss and norms, so every rank stops) */
        double gnorm = NAN, wnorm = NAN;
        hyfi_train_norms(g, &gnorm, &wnorm);
        if (s == 0) loss0 = l, gnorm0 = gnorm;
        if (s > 0 && nwarn < 5 &&
            ((loss0 > 0 && l > 10 * loss0) || (gnorm0 > 0 && gnorm > 100 * gnorm0))) {
            if (lead)
                fprintf(stderr, "hyfi-train: warning: step %lld: loss %.4g (first step %.4g), "
                                "gradient norm %.4g (first step %.4g): the run may be diverging; "
                                "consider a lower --lr\n",
                        s + 1, (double)l, (double)loss0, gnorm, gnorm0);
            nwarn++;
        }
        if (o.divergence > 0 && loss0 > 0 && l > o.divergence * loss0) {
            if (lead)
                fprintf(stderr, "hyfi-train: training diverged at step %lld: the loss %.4g is "
                                "above %g x the first step's %.4g; lower --lr (%g now), or raise "
                                "--divergence-ratio (0: never stop)\n",
                        s + 1, (double)l, (double)o.divergence, (double)loss0, (double)o.lr);
            goto out;
        }
        if ((s + 1) % o.print_freq == 0 || s == 0 || s + 1 == total) {
            printf("step %lld loss %.4f images/s %.1f\n", s + 1, (double)l, rates[s]);
            /* MPI4DL's line: its rank 0 divides --batch-size (one replica's) by the time */
            printf("Epoch: %lld images per sec:%f\n", s / (long long)spe, rates[s] / nrep);
            fflush(stdout);
        }
        if (mf) {
            fprintf(mf, "{\"step\":%lld,\"loss\":", s + 1);
            json_num(mf, true, l);
            fputs(",\"images_per_sec\":", mf);
            json_num(mf, true, rates[s]);
            fputs(",\"grad_norm\":", mf);
            json_num(mf, true, gnorm);
            fputs(",\"weight_norm\":", mf);
            json_num(mf, true, wnorm);
            fputs("}\n", mf);
        }
    }
    hyfi_prefetch_stop(pf);
    pf = NULL;

    /* Throughput over the steps after the warm-up. */
    long long nmeas = total > WARMUP_STEPS ? total - WARMUP_STEPS : 0;
    double mean = 0, median = 0;
    if (nmeas > 0) {
        for (long long s = WARMUP_STEPS; s < total; s++) mean += rates[s];
        mean /= (double)nmeas;
        qsort(rates + WARMUP_STEPS, (size_t)nmeas, sizeof *rates, cmp_double);
        const double *r = rates + WARMUP_STEPS;
        median = nmeas % 2 ? r[nmeas / 2] : 0.5 * (r[nmeas / 2 - 1] + r[nmeas / 2]);
    }

    /* Test accuracy in eval mode. */
    bool have_acc = false;
    double acc = 0;
    size_t correct = 0, counted = 0;
    if (test) {
        const size_t ntest = hyfi_dataset_size(test);
        size_t nb = hyfi_data_steps_per_epoch(ntest, B);
        if (o.eval_batches > 0 && (size_t)o.eval_batches < nb) nb = (size_t)o.eval_batches;
        logits_buf = malloc((size_t)B * (size_t)K * sizeof *logits_buf);
        if (!logits_buf) {
            report(false, "out of memory for the logits");
            goto out;
        }
        hyfi_prefetch_config ec = {.batch = B, .shuffle = 0, .num_steps = nb};
        if (hyfi_prefetch_start(test, &ec, &pf, err, sizeof err)) {
            report(false, "%s", err);
            goto out;
        }
        double t0 = now_s();
        for (size_t k = 0; k < nb; k++) {
            hyfi_batch b;
            int prc = hyfi_prefetch_next(pf, &b);
            if (prc) {
                report(false, "preparing test batch %zu failed: %s: %s", k + 1,
                       hyfi_data_status_name(prc), hyfi_prefetch_error(pf));
                goto out;
            }
            if ((st = hyfi_set_input(g, tx, b.x, (size_t)B * numel)) != HYFI_OK ||
                (st = hyfi_set_labels(g, ty, b.y, (size_t)B)) != HYFI_OK ||
                (st = hyfi_infer(g, NULL)) != HYFI_OK ||
                (st = hyfi_tensor_read(g, tlogits, logits_buf, (size_t)B * (size_t)K)) != HYFI_OK) {
                lib_fail("evaluation (hyfi_infer)", st, g);
                goto out;
            }
            /* rows past the end of the test set are padding: not counted */
            size_t valid = ntest - b.start < (size_t)B ? ntest - b.start : (size_t)B;
            for (size_t r = 0; r < valid; r++) {
                const float *z = logits_buf + r * (size_t)K; /* (K) */
                int best = 0;
                for (int c = 1; c < K; c++)
                    if (z[c] > z[best]) best = c;
                correct += best == b.y[r];
            }
            counted += valid;
        }
        hyfi_prefetch_stop(pf);
        pf = NULL;
        have_acc = counted > 0;
        acc = have_acc ? (double)correct / (double)counted : 0;
        printf("eval: %zu batches, %zu images in %.2f s\n", nb, counted, now_s() - t0);
    }

    printf("summary: %lld steps, images/s mean ", total);
    if (nmeas > 0) printf("%.1f median %.1f (excluding %d warm-up steps)", mean, median, WARMUP_STEPS);
    else printf("n/a median n/a (no steps after the %d warm-up steps)", WARMUP_STEPS);
    if (have_acc) printf(", test accuracy %.4f (%zu/%zu)\n", acc, correct, counted);
    else printf(", test accuracy n/a (%s)\n", test ? "no test images" : "no test split");
    {
        /* peak memory of this process (each rank: its places) */
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            fprintf(stderr, "hyfi-train: rank %d peak memory %.1f MB\n", hyfi_ctx_rank(ctx),
                    (double)ru.ru_maxrss / 1024.0);
    }
    if (mf) {
        fputs("{\"summary\":true,\"mean_images_per_sec\":", mf);
        json_num(mf, nmeas > 0, mean);
        fputs(",\"median_images_per_sec\":", mf);
        json_num(mf, nmeas > 0, median);
        fputs(",\"test_accuracy\":", mf);
        json_num(mf, have_acc, acc);
        fputs("}\n", mf);
    }
    rc = 0;

out:
    hyfi_prefetch_stop(pf);
    if (mf && fclose(mf) != 0 && rc == 0) {
        fprintf(stderr, "hyfi-train: --metrics %s: write failed: %s\n", o.metrics, strerror(errno));
        rc = 1;
    }
    free(rates);
    free(logits_buf);
    free(o.balance);
    if (g) hyfi_graph_destroy(g);
    hyfi_ctx_destroy(ctx);
    /* the ranks have written their trace files (hyfi_ctx_destroy waits) */
    if (rc == 0 && o.trace && lead) {
        fflush(stdout);
        if ((st = hyfi_trace_merge(o.trace, nranks)) != HYFI_OK ||
            (st = hyfi_trace_summarize(o.trace, stdout)) != HYFI_OK) {
            fprintf(stderr, "hyfi-train: --trace %s: %s\n", o.trace, hyfi_last_error());
            rc = 1;
        } else {
            printf("trace: %s/paje.trace (ViTE), %s/summary.json, %s/timeline.svg\n", o.trace,
                   o.trace, o.trace);
        }
    }
    hyfi_dataset_free(train);
    hyfi_dataset_free(test);
    return rc;
}
