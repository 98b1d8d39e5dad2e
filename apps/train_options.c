/* hyfi-train's command line: the options' defaults, the parsing of every
 * flag (--flag value or --flag=value, and HYFI_WATCHDOG_S) and the checks of
 * the flags together (the --help text is apps/train_usage.c). A bad command
 * line is printed once, by rank 0, with the hint to --help; the driver exits
 * with status 2. */
#include "train_options.h"
#include "flag_suggest.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_IMAGE_SIDE 32768
#define MIN_IMAGE_SIDE 1 /* each model checks its own minimum (models.h) */
#define MAX_STAGES 4096

int train_replicas(const train_options *o)
{
    const int copies = o->gems == HYFI_GEMS_NONE   ? 1
                       : o->gems == HYFI_GEMS_MAST ? 2
                                                   : 2 * (o->replications > 1 ? o->replications : 1);
    return copies * (o->data_parallel > 1 ? o->data_parallel : 1);
}

/* ---------------------------------------------------------------- parsing */
/* The message of a bad command line (train_parse_args copies it out) and the
 * warnings about flags without effect, one per line. */
static char g_msg[1024];

__attribute__((format(printf, 1, 2)))
static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    return -1;
}

void train_add_line(char *buf, size_t len, const char *fmt, ...)
{
    const size_t used = strlen(buf);
    if (used + 2 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used - 1, fmt, ap);
    va_end(ap);
    strcat(buf, "\n");
}

void train_print_lines(FILE *f, const char *prefix, const char *lines)
{
    for (const char *l = lines; *l;) {
        const char *e = strchr(l, '\n');
        const int n = e ? (int)(e - l) : (int)strlen(l);
        fprintf(f, "%s%.*s\n", prefix, n, l);
        l += n + (e != NULL);
    }
}

#define warn(o, ...) train_add_line((o)->warnings, sizeof (o)->warnings, __VA_ARGS__)

/* Flags given on the command line, by their canonical names (" --lr --seed "). */
static void mark_given(train_options *o, const char *flag)
{
    if (!strcmp(flag, "--learning-rate")) flag = "--lr";
    else if (!strcmp(flag, "--times")) flag = "--replications";
    else if (!strcmp(flag, "--halo-d2")) flag = "--fused-layers";
    if (train_given(o, flag)) return;
    const size_t used = strlen(o->given);
    if (used + strlen(flag) + 2 < sizeof o->given)
        snprintf(o->given + used, sizeof o->given - used, "%s%s ", used ? "" : " ", flag);
}

bool train_given(const train_options *o, const char *flag)
{
    char key[72];
    snprintf(key, sizeof key, " %s ", flag);
    return strstr(o->given, key) != NULL;
}

/* A value not among `valid` ("a, b, c"): named with the closest ones. */
static int unknown_value(const char *flag, const char *val, const char *valid)
{
    char names[8][24], hint[128];
    const char *known[8];
    size_t n = 0;
    for (const char *v = valid; *v && n < 8; n++) {
        const size_t len = strcspn(v, ",");
        snprintf(names[n], sizeof names[n], "%.*s", (int)len, v);
        known[n] = names[n];
        v += len;
        v += strspn(v, ", ");
    }
    flag_suggest(val, known, n, hint, sizeof hint);
    if (!strcmp(flag, "--device") && !strcasecmp(val, "gpu")) /* (not "cpu", one letter off) */
        snprintf(hint, sizeof hint, " (did you mean cuda?)");
    return bad_usage("%s '%s' is not known%s; valid: %s", flag, val, hint, valid);
}

static int parse_ll(const char *flag, const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return hi >= INT_MAX /* (a bound no one means: "1 or more") */
                   ? bad_usage("%s '%s' is not valid: expected a whole number, %lld or more", flag,
                               s, lo)
                   : bad_usage("%s '%s' is not valid: expected an integer in %lld..%lld", flag, s,
                               lo, hi);
    *out = v;
    return 0;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out)
{
    long long v = 0; /* set by parse_ll when it returns 0 */
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

/* s is a whole integer (no sign check), into *out. */
static bool whole_ll(const char *s, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return !errno && end != s && !*end;
}

/* --trace-steps A:B (steps A to B), A: (A to the end), :B or A (that step
 * alone): 0, or -1 (message set). */
static int parse_trace_steps(const char *val, train_options *o)
{
    const char *colon = strchr(val, ':');
    const size_t la = colon ? (size_t)(colon - val) : strlen(val);
    const char *bs = colon ? colon + 1 : val;
    char a[32] = "";
    long long first = 1, last = 0;
    bool ok = la < sizeof a && (la || *bs);
    if (ok) {
        memcpy(a, val, la);
        a[la] = 0;
        ok = (!*a || whole_ll(a, &first)) && (!*bs || whole_ll(bs, &last)) && first >= 1 &&
             (!*bs || last >= first);
    }
    if (!ok)
        return bad_usage("--trace-steps '%s' is not valid: expected A:B (steps A to B, from 1), "
                         "A: (A to the end), :B or A (that step alone)", val);
    o->trace_first = first;
    o->trace_last = last;
    return 0;
}

/* The value of a model, data or training flag: 0 parsed, -1 bad (message
 * printed), 1 not one of these flags. */
static int parse_run_flag(const char *flag, const char *val, train_options *o)
{
    long long ll;
    int rc = 0;
    if (!strcmp(flag, "--model")) {
        if (model_kind_from_name(val, &o->mc.kind) != 0)
            return unknown_value("--model", val, "cnn, resnet, amoebanet");
    } else if (!strcmp(flag, "--depth")) {
        rc = parse_int(flag, val, 1, MODEL_MAX_DEPTH, &o->mc.depth);
    } else if (!strcmp(flag, "--resnet-version")) {
        rc = parse_int(flag, val, 1, 2, &o->mc.resnet_version);
    } else if (!strcmp(flag, "--resnet-style")) {
        if (resnet_style_from_name(val, &o->mc.style) != 0)
            return unknown_value("--resnet-style", val, "auto, cifar, imagenet");
    } else if (!strcmp(flag, "--num-layers")) {
        rc = parse_int(flag, val, 1, MODEL_MAX_NUM_LAYERS, &o->mc.num_layers);
    } else if (!strcmp(flag, "--num-filters")) {
        rc = parse_int(flag, val, 1, MODEL_MAX_NUM_FILTERS, &o->mc.num_filters);
    } else if (!strcmp(flag, "--dataset")) {
        if (hyfi_data_kind_from_name(val, &o->dataset) != 0)
            return unknown_value("--dataset", val,
                                 "synthetic, fashion-mnist, mnist, cifar10, folder, slides");
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
        else return unknown_value("--lr-schedule", val, "constant, cosine");
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
        else return unknown_value("--device", val, "auto, cpu, cuda");
    } else if (!strcmp(flag, "--precision")) {
        if (!strcmp(val, "fp32")) o->precision = HYFI_PRECISION_FP32;
        else if (!strcmp(val, "bf16")) o->precision = HYFI_PRECISION_BF16;
        else return unknown_value("--precision", val, "fp32, bf16");
    } else if (!strcmp(flag, "--divergence-ratio")) {
        rc = parse_float(flag, val, 0, false, 1e30f, false, &o->divergence);
        if (!rc && o->divergence > 0 && o->divergence <= 1)
            return bad_usage("--divergence-ratio %g must be above 1 (or 0: never stop)",
                             (double)o->divergence);
    } else if (!strcmp(flag, "--print-freq")) {
        rc = parse_int(flag, val, 1, INT_MAX, &o->print_freq);
    } else if (!strcmp(flag, "--print-secs")) {
        rc = parse_float(flag, val, 0, false, 1e7, false, &o->print_secs);
    } else if (!strcmp(flag, "--trace-steps")) {
        rc = parse_trace_steps(val, o);
    } else if (!strcmp(flag, "--eval-batches")) {
        rc = parse_ll(flag, val, 0, LLONG_MAX / 2, &ll);
        o->eval_batches = ll;
    } else if (!strcmp(flag, "--metrics")) {
        if (!*val) return bad_usage("--metrics needs a file name");
        o->metrics = val;
    } else if (!strcmp(flag, "--checkpoint-dir")) {
        if (!*val) return bad_usage("--checkpoint-dir needs a folder");
        o->checkpoint_dir = val;
    } else if (!strcmp(flag, "--checkpoint-every")) {
        rc = parse_ll(flag, val, 0, LLONG_MAX / 2, &o->checkpoint_every);
    } else if (!strcmp(flag, "--stop-at-step")) {
        rc = parse_ll(flag, val, 0, LLONG_MAX / 2, &o->stop_at);
    } else if (!strcmp(flag, "--keep")) {
        rc = parse_int(flag, val, 0, 1 << 20, &o->keep);
    } else if (!strcmp(flag, "--save")) {
        if (!*val) return bad_usage("--save needs a file name");
        o->save_path = val;
    } else if (!strcmp(flag, "--save-precision")) {
        if (strcmp(val, "fp32") && strcmp(val, "bf16"))
            return unknown_value("--save-precision", val, "fp32, bf16");
        o->save_bf16 = !strcmp(val, "bf16");
    } else if (!strcmp(flag, "--load")) {
        if (!*val) return bad_usage("--load needs a file name");
        o->load_path = val;
    } else {
        return 1;
    }
    return rc ? -1 : 0;
}

/* --balance a,b,...: layers per stage. 0, or -1 (message printed). */
static int parse_balance(const char *val, train_options *o)
{
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
    return 0;
}

/* The value of a parallelism, trace or watchdog flag: 0 parsed, -1 bad
 * (message printed), 1 not one of these flags. */
static int parse_plan_flag(const char *flag, const char *val, train_options *o)
{
    int rc = 0;
    if (!strcmp(flag, "--split-size")) {
        rc = parse_int(flag, val, 1, MAX_STAGES, &o->split_size);
    } else if (!strcmp(flag, "--fused-layers")) {
        rc = parse_int(flag, val, 1, 32, &o->fused_layers);
    } else if (!strcmp(flag, "--spatial-size")) {
        rc = parse_int(flag, val, 0, MAX_STAGES, &o->spatial_size);
    } else if (!strcmp(flag, "--num-spatial-parts")) {
        rc = parse_int(flag, val, 1, 64, &o->spatial_parts); /* ops/kernels.h: HYFI_MAX_TILES */
    } else if (!strcmp(flag, "--slice-method")) {
        if (!strcmp(val, "square")) o->slice = HYFI_SLICE_SQUARE;
        else if (!strcmp(val, "vertical")) o->slice = HYFI_SLICE_VERTICAL;
        else if (!strcmp(val, "horizontal")) o->slice = HYFI_SLICE_HORIZONTAL;
        else return unknown_value("--slice-method", val, "square, vertical, horizontal");
    } else if (!strcmp(flag, "--gems")) {
        if (!strcmp(val, "mast")) o->gems = HYFI_GEMS_MAST;
        else if (!strcmp(val, "master")) o->gems = HYFI_GEMS_MASTER;
        else if (!strcmp(val, "none")) o->gems = HYFI_GEMS_NONE;
        else return unknown_value("--gems", val, "mast, master, none");
    } else if (!strcmp(flag, "--replications") || !strcmp(flag, "--times")) {
        rc = parse_int(flag, val, 1, 2048, &o->replications);
    } else if (!strcmp(flag, "--data-parallel")) {
        rc = parse_int(flag, val, 1, 4096, &o->data_parallel);
    } else if (!strcmp(flag, "--trace")) {
        if (!*val) return bad_usage("--trace needs a folder");
        o->trace = val;
    } else if (!strcmp(flag, "--watchdog")) {
        rc = parse_int(flag, val, 0, 1 << 24, &o->watchdog_s);
    } else if (!strcmp(flag, "--recompute")) {
        if (!strcmp(val, "none")) o->recompute = HYFI_RECOMPUTE_NONE;
        else if (!strcmp(val, "stage")) o->recompute = HYFI_RECOMPUTE_STAGE;
        else if (!strcmp(val, "layer")) o->recompute = HYFI_RECOMPUTE_LAYER;
        else return unknown_value("--recompute", val, "none, stage, layer");
    } else if (!strcmp(flag, "--mem-limit-mb")) {
        rc = parse_int(flag, val, 1, 1 << 30, &o->mem_limit_mb);
    } else if (!strcmp(flag, "--swap-mb")) {
        rc = parse_int(flag, val, 16, 1 << 30, &o->swap_mb);
    } else if (!strcmp(flag, "--submit-window")) {
        rc = parse_int(flag, val, 0, 1 << 30, &o->submit_window);
        if (rc == 0 && o->submit_window == 1)
            return bad_usage("--submit-window 1: give 0 (a whole step at once) or at least 2");
    } else if (!strcmp(flag, "--swap-dir")) {
        if (!*val) return bad_usage("--swap-dir needs a folder");
        o->swap_dir = val;
    } else if (!strcmp(flag, "--bucket-kib")) {
        rc = parse_int(flag, val, -1, 1 << 20, &o->bucket_kib);
    } else if (!strcmp(flag, "--allreduce")) {
        if (!strcmp(val, "auto")) o->allreduce = HYFI_ALLREDUCE_AUTO;
        else if (!strcmp(val, "ring")) o->allreduce = HYFI_ALLREDUCE_RING;
        else if (!strcmp(val, "tree")) o->allreduce = HYFI_ALLREDUCE_TREE;
        else return unknown_value("--allreduce", val, "auto, ring, tree");
    } else if (!strcmp(flag, "--parts")) {
        rc = parse_int(flag, val, 1, 1 << 20, &o->parts);
    } else if (!strcmp(flag, "--schedule")) {
        if (!strcmp(val, "gpipe")) o->schedule = HYFI_SCHEDULE_GPIPE;
        else if (!strcmp(val, "1f1b")) o->schedule = HYFI_SCHEDULE_1F1B;
        else return unknown_value("--schedule", val, "gpipe, 1f1b");
    } else if (!strcmp(flag, "--balance")) {
        rc = parse_balance(val, o);
    } else {
        return 1;
    }
    return rc ? -1 : 0;
}

/* The flags that take a value, and those that take none (parse_all), for the
 * parser and for "did you mean" (flag_suggest.h). */
static const char *const VALUE_FLAGS[] = {
    "--model", "--dataset", "--datapath", "--batch-size", "--image-size",
    "--num-classes", "--steps", "--num-epochs", "--lr", "--learning-rate",
    "--lr-schedule", "--momentum", "--weight-decay", "--seed", "--device", "--precision",
    "--print-freq",
    "--print-secs", "--trace-steps",
    "--eval-batches", "--metrics", "--divergence-ratio", "--depth", "--resnet-version", "--resnet-style",
    "--num-layers", "--num-filters", "--split-size", "--balance", "--parts",
    "--schedule", "--spatial-size", "--num-spatial-parts", "--slice-method",
    "--fused-layers", "--gems", "--replications", "--times", "--data-parallel",
    "--allreduce", "--bucket-kib", "--trace", "--watchdog", "--checkpoint-dir",
    "--checkpoint-every", "--keep", "--save", "--save-precision", "--load", "--stop-at-step",
    "--recompute",
    "--mem-limit-mb", "--swap-dir", "--swap-mb", "--submit-window", "--plan", "--plan-ranks",
    "--plan-gpus-per-rank", "--plan-ranks-per-node", "--plan-cores", "--plan-device",
    "--plan-mem-gb", "--plan-model", "--plan-link-gbs", "--plan-link-us", "--plan-top"};
static const char *const SWITCHES[] = {"--dry-run", "--compile-only", "--deterministic",
                                       "--eval-only", "--resume", "--halo-d2", "--verbose",
                                       "--help", "--version",
                                       "--print-mpi4dl", "--trace-lean", "--explain"};
#define NVALUE (sizeof VALUE_FLAGS / sizeof *VALUE_FLAGS)
#define NSWITCH (sizeof SWITCHES / sizeof *SWITCHES)

/* Whether flag is one of list[0..n-1]. */
static bool among(const char *flag, const char *const *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(flag, list[k])) return true;
    return false;
}

/* " (did you mean --flag?)" for typed, or "" (flag_suggest.h). */
static void suggest(const char *typed, char *hint, size_t len)
{
    const char *all[NVALUE + NSWITCH];
    memcpy(all, VALUE_FLAGS, sizeof VALUE_FLAGS);
    memcpy(all + NVALUE, SWITCHES, sizeof SWITCHES);
    flag_suggest(typed, all, NVALUE + NSWITCH, hint, len);
}

/* An unknown flag (arg: as typed, flag: its name, before any '='), with the
 * closest known ones: -1 (message set). */
static int unknown_flag(const char *arg, const char *flag)
{
    if (among(flag, SWITCHES, NSWITCH))
        return bad_usage("%s takes no value: give '%s' alone, not '%s'", flag, flag, arg);
    char hint[200];
    suggest(flag, hint, sizeof hint);
    return bad_usage("unknown flag '%s'%s", flag, hint);
}

/* The flag with a value at argv[*i] (--flag=value, or --flag and the next
 * argument, which *i then skips): 0, or -1 (message printed). */
static int parse_flag(int argc, char **argv, int *i, train_options *o)
{
    const char *arg = argv[*i];
    /* --flag=value or --flag value */
    char flag[64];
    const char *val = NULL, *eq = strchr(arg, '=');
    size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (flen >= sizeof flag) return bad_usage("unknown flag '%s'", arg);
    memcpy(flag, arg, flen);
    flag[flen] = 0;
    if (!among(flag, VALUE_FLAGS, NVALUE)) return unknown_flag(arg, flag);
    mark_given(o, flag);
    if (eq) {
        val = eq + 1;
    } else if (*i + 1 < argc) {
        val = argv[++*i];
    } else {
        return bad_usage("%s needs a value", flag);
    }
    int rc = parse_run_flag(flag, val, o);
    if (rc == 1) rc = parse_plan_flag(flag, val, o);
    if (rc == 1) rc = train_autoplan_flag(flag, val, o, g_msg, sizeof g_msg);
    return rc == 1 ? 0 : rc;
}

/* The flags together: 0, or -1 (message printed). */
static int check_options(train_options *o)
{
    if (o->datapath && o->dataset == HYFI_DATA_SYNTHETIC)
        return bad_usage("--datapath %s is given, but the data set is synthetic (the default), "
                         "which reads no files; pass --dataset folder, mnist, cifar10 or "
                         "fashion-mnist with it, or leave --datapath out", o->datapath);
    if (o->checkpoint_every && !o->checkpoint_dir)
        return bad_usage("--checkpoint-every %lld needs --checkpoint-dir DIR (where to write "
                         "them)", o->checkpoint_every);
    if (o->resume && !o->resume_path && !o->checkpoint_dir)
        return bad_usage("--resume needs a folder or file (--resume PATH), or --checkpoint-dir "
                         "DIR to resume from");
    if (o->resume && o->load_path)
        return bad_usage("--resume and --load %s both set the parameters; --resume restores "
                         "the whole training state, --load starts a new run from a model: "
                         "give one", o->load_path);
    if (o->eval_only && !o->load_path && !o->resume)
        return bad_usage("--eval-only evaluates a saved model: give it with --load FILE (or "
                         "--resume)");
    if (!o->trace && (train_given(o, "--trace-steps") || o->trace_lean))
        return bad_usage("%s needs --trace DIR (where to write the trace)",
                         train_given(o, "--trace-steps") ? "--trace-steps" : "--trace-lean");
    if (o->eval_only && train_given(o, "--trace-steps"))
        return bad_usage("--trace-steps picks training steps, and --eval-only makes none; leave "
                         "--trace-steps out to trace the evaluation");
    if (o->swap_mb && !o->swap_dir)
        return bad_usage("--swap-mb %d needs --swap-dir DIR (where to swap)", o->swap_mb);
    if (o->replications > 1 && o->gems != HYFI_GEMS_MASTER)
        return bad_usage("--replications %d needs --gems master (MAST has one pair of copies)",
                         o->replications);
    if (train_replicas(o) > 4096) /* the engine's bound (HYFI_MAX_REPLICAS) */
        return bad_usage("%d replicas (GEMS copies x --data-parallel): at most 4096",
                         train_replicas(o));
    if (o->balance) {
        if (!o->split_size) o->split_size = o->nbalance;
        if (o->nbalance != o->split_size)
            return bad_usage("--balance has %d entries but --split-size is %d; give one layer "
                             "count per stage", o->nbalance, o->split_size);
    }
    if (o->precision == HYFI_PRECISION_BF16) {
        if (o->device == HYFI_DEVICE_CUDA)
            return bad_usage("--precision bf16 runs on CPU workers only so far (the CUDA "
                             "workers' bf16 kernels are not written yet); give --device cpu or "
                             "train in fp32");
        o->device = HYFI_DEVICE_CPU; /* auto: the CPU workers */
    }
    /* Flags that would change nothing: refused where the run would not be
     * what was asked for, warned about where it is all the same. */
    if (train_autoplan_check(o, g_msg, sizeof g_msg)) return -1;
    if (!o->spatial_size && !o->plan_auto) {
        const char *sp = train_given(o, "--num-spatial-parts") ? "--num-spatial-parts"
                         : train_given(o, "--slice-method")    ? "--slice-method"
                         : train_given(o, "--fused-layers")    ? "--fused-layers (--halo-d2)"
                                                               : NULL;
        if (sp)
            return bad_usage("%s has no effect without --spatial-size K (the number of leading "
                             "stages cut into tiles), which is 0 here: no stage is tiled. Add "
                             "--spatial-size 1 to tile the first stage (MPI4DL's default; "
                             "hyfi's is 0)%s, or leave %s out", sp,
                             o->split_size > 1 ? "" : " with --split-size 2 (the head needs a "
                                                      "stage of its own, untiled)",
                             sp);
    }
    /* Every model here ends with its head (global average pool and fc) in the
     * last stage, which needs whole images: at least one stage after the
     * tiled ones. */
    const int stages = o->split_size > 1 ? o->split_size : 1, K = o->spatial_size;
    if (K >= stages && !o->plan_auto) {
        char tiled[96], first[32] = "first stage", also[64] = "", other[48] = "";
        if (K == stages)
            snprintf(tiled, sizeof tiled, stages == 1 ? "the plan's only stage (--split-size 1)"
                                                      : "all %d stages (--split-size %d)",
                     stages, stages);
        else
            snprintf(tiled, sizeof tiled, "%d stages, but the plan has %d (--split-size %d)", K,
                     stages, stages);
        if (o->balance) snprintf(also, sizeof also, " and a --balance of %d entries", K + 1);
        if (K > 1) snprintf(first, sizeof first, "first %d stages", K);
        if (stages > 1)
            snprintf(other, sizeof other, ", or --spatial-size %d%s", stages - 1,
                     stages > 2 ? " or less" : "");
        return bad_usage("--spatial-size %d tiles %s; the last stage holds the model's head "
                         "(global average pool and classifier), which needs whole images: use "
                         "--split-size %d%s (the %s tiled, the head's whole)%s", K, tiled, K + 1,
                         also, first, other);
    }
    if (o->swap_dir && !o->mem_limit_mb)
        return bad_usage("--swap-dir %s has no effect without --mem-limit-mb N: StarPU swaps "
                         "data out only above a memory limit; add --mem-limit-mb (the memory "
                         "this rank may use, in MB), or leave --swap-dir out", o->swap_dir);
    if (o->schedule == HYFI_SCHEDULE_1F1B && o->parts <= 1 && !o->plan_auto)
        warn(o, "--schedule 1f1b has no effect with one micro-batch (--parts 1): add --parts M");
    if (train_replicas(o) <= 1 && !o->plan_auto) {
        if (train_given(o, "--allreduce"))
            warn(o, "--allreduce has no effect without model replicas (--gems or "
                    "--data-parallel): there is no all-reduce");
        if (train_given(o, "--bucket-kib"))
            warn(o, "--bucket-kib has no effect without model replicas (--gems or "
                    "--data-parallel): there is no all-reduce");
    }
    if (train_given(o, "--keep") && !o->checkpoint_dir)
        warn(o, "--keep has no effect without --checkpoint-dir DIR");
    if (train_given(o, "--save-precision") && !o->save_path)
        warn(o, "--save-precision has no effect without --save FILE");
    if (o->mc.kind != MODEL_RESNET)
        for (const char *const *f = (const char *const[]){"--depth", "--resnet-version",
                                                          "--resnet-style", NULL}; *f; f++)
            if (train_given(o, *f)) warn(o, "%s has no effect: it is a ResNet flag (--model resnet)", *f);
    if (o->mc.kind != MODEL_AMOEBANET)
        for (const char *const *f = (const char *const[]){"--num-layers", "--num-filters", NULL};
             *f; f++)
            if (train_given(o, *f))
                warn(o, "%s has no effect: it is an AmoebaNet-D flag (--model amoebanet)", *f);
    /* The model's own rules (ResNet depths, L and F of AmoebaNet-D); the
     * image size is checked once the data set's is known. */
    char err[512];
    model_config mc = o->mc;
    mc.num_classes = 2;
    if (model_check(&mc, 3, MAX_IMAGE_SIDE, MAX_IMAGE_SIDE, err, sizeof err))
        return bad_usage("%s", err);
    return 0;
}

static int parse_all(int argc, char **argv, train_options *o)
{
    *o = (train_options){.batch_size = 64, .dataset = HYFI_DATA_SYNTHETIC,
                         .num_epochs = 1, .lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f,
                         .seed = 42, .device = HYFI_DEVICE_AUTO, .print_freq = 50,
                         .print_secs = 30,
                         .divergence = 1000, .keep = 3,
                         .mc = model_config_default(), .watchdog_s = TRAIN_DEFAULT_WATCHDOG_S};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            o->help = 1;
            return 1;
        }
    const char *wd = getenv("HYFI_WATCHDOG_S");
    if (wd && *wd && parse_int("HYFI_WATCHDOG_S", wd, 0, 1 << 24, &o->watchdog_s)) return -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
            o->verbose = 1;
            continue;
        }
        if (strcmp(arg, "--dry-run") == 0) {
            o->dry_run = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--compile-only") == 0) {
            o->compile_only = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--deterministic") == 0) {
            o->deterministic = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--eval-only") == 0) {
            o->eval_only = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--resume") == 0 || strncmp(arg, "--resume=", 9) == 0) {
            /* an optional value: --resume=PATH, or --resume PATH when PATH is
             * not a flag */
            o->resume = 1;
            mark_given(o, "--resume");
            if (arg[8] == '=') o->resume_path = arg + 9;
            else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                o->resume_path = argv[++i];
            if (o->resume_path && !*o->resume_path)
                return bad_usage("--resume= needs a folder or a checkpoint file");
            continue;
        }
        if (strcmp(arg, "--print-mpi4dl") == 0 || strcmp(arg, "--trace-lean") == 0) {
            *(arg[2] == 'p' ? &o->print_mpi4dl : &o->trace_lean) = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--explain") == 0) {
            o->explain = 1;
            mark_given(o, arg);
            continue;
        }
        if (strcmp(arg, "--halo-d2") == 0) {
            o->fused_layers = 2;
            mark_given(o, arg);
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            char hint[200] = "";
            if (arg[0] == '-') suggest(arg, hint, sizeof hint);
            return bad_usage("unexpected argument '%s': flags start with --%s", arg, hint);
        }
        if (parse_flag(argc, argv, &i, o)) return -1;
    }
    return check_options(o);
}

/* --watchdog (or HYFI_WATCHDOG_S) before anything else is parsed: the time
 * limit of MPI's start. A bad value gives the default here (the full parse
 * reports it). */
int train_early_watchdog(int argc, char **argv)
{
    int v = TRAIN_DEFAULT_WATCHDOG_S;
    const char *e = getenv("HYFI_WATCHDOG_S");
    char *end;
    if (e && *e) {
        long x = strtol(e, &end, 10);
        if (!*end && x >= 0 && x <= 1 << 24) v = (int)x;
    }
    for (int i = 1; i < argc; i++) {
        const char *val = NULL;
        if (!strcmp(argv[i], "--watchdog") && i + 1 < argc) val = argv[i + 1];
        else if (!strncmp(argv[i], "--watchdog=", 11)) val = argv[i] + 11;
        if (!val) continue;
        long x = strtol(val, &end, 10);
        if (end != val && !*end && x >= 0 && x <= 1 << 24) v = (int)x;
    }
    return v;
}

int train_parse_args(int argc, char **argv, train_options *o, char *err, size_t errlen)
{
    g_msg[0] = 0;
    if (err && errlen) err[0] = 0;
    const int rc = parse_all(argc, argv, o);
    if (rc < 0 && err && errlen) snprintf(err, errlen, "%s", g_msg);
    return rc;
}

/* ------------------------------------------------------- rank agreement */
__attribute__((format(printf, 4, 5)))
static void put(train_settings *ts, const char *name, uint64_t hash, const char *fmt, ...)
{
    if (ts->n >= TRAIN_MAX_SETTINGS) return;
    char *v = ts->text[ts->n];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof ts->text[0], fmt, ap);
    va_end(ap);
    ts->set[ts->n] = (hyfi_setting){.name = name, .value = v, .hash = hash};
    ts->n++;
}

static const char *str_or_none(const char *s) { return s ? s : "(none)"; }

void train_settings_fill(const train_options *o, train_settings *ts)
{
    static const char *const gems[] = {"none", "mast", "master"};
    static const char *const slice[] = {"square", "vertical", "horizontal"};
    static const char *const ar[] = {"auto", "ring", "tree"};
    static const char *const rc[] = {"none", "stage", "layer"};
    ts->n = 0;
    char model[200];
    model_describe(&o->mc, model, sizeof model);
    put(ts, "--model and its flags", 0, "%s", model);
    put(ts, "--dry-run", 0, "%d", o->dry_run);
    put(ts, "--compile-only", 0, "%d", o->compile_only);
    put(ts, "--batch-size", 0, "%d", o->batch_size);
    put(ts, "--image-size", 0, "%d", o->image_size);
    put(ts, "--num-classes", 0, "%d", o->num_classes);
    put(ts, "--steps", 0, "%lld", o->steps);
    put(ts, "--num-epochs", 0, "%d", o->num_epochs);
    put(ts, "--lr", 0, "%.9g", (double)o->lr);
    put(ts, "--lr-schedule", 0, "%s", o->cosine ? "cosine" : "constant");
    put(ts, "--momentum", 0, "%.9g", (double)o->momentum);
    put(ts, "--weight-decay", 0, "%.9g", (double)o->weight_decay);
    put(ts, "--seed", 0, "%llu", (unsigned long long)o->seed);
    put(ts, "--precision", 0, "%s", o->precision == HYFI_PRECISION_BF16 ? "bf16" : "fp32");
    put(ts, "--eval-batches", 0, "%lld", o->eval_batches);
    put(ts, "--divergence-ratio", 0, "%.9g", (double)o->divergence);
    put(ts, "--metrics", 0, "%s", str_or_none(o->metrics));
    put(ts, "--split-size", 0, "%d", o->split_size);
    char bal[96] = "";
    for (int i = 0; i < o->nbalance && strlen(bal) + 12 < sizeof bal; i++)
        snprintf(bal + strlen(bal), sizeof bal - strlen(bal), "%s%d", i ? "," : "", o->balance[i]);
    uint64_t bh = 0xcbf29ce484222325ull;
    for (int i = 0; i < o->nbalance; i++) bh = (bh ^ (uint64_t)o->balance[i]) * 0x100000001b3ull;
    put(ts, "--balance", o->nbalance ? bh : 0, "%s", o->nbalance ? bal : "(none)");
    put(ts, "--parts", 0, "%d", o->parts);
    put(ts, "--schedule", 0, "%s", o->schedule == HYFI_SCHEDULE_1F1B ? "1f1b" : "gpipe");
    put(ts, "--deterministic", 0, "%d", o->deterministic);
    put(ts, "--spatial-size", 0, "%d", o->spatial_size);
    put(ts, "--num-spatial-parts", 0, "%d", o->spatial_parts);
    put(ts, "--slice-method", 0, "%s", slice[o->slice % 3]);
    put(ts, "--fused-layers", 0, "%d", o->fused_layers);
    put(ts, "--gems", 0, "%s", gems[o->gems % 3]);
    put(ts, "--replications", 0, "%d", o->replications);
    put(ts, "--data-parallel", 0, "%d", o->data_parallel);
    put(ts, "--allreduce", 0, "%s", ar[o->allreduce % 3]);
    put(ts, "--bucket-kib", 0, "%d", o->bucket_kib);
    put(ts, "--recompute", 0, "%s", rc[o->recompute % 3]);
    put(ts, "--plan", 0, "%s%s", o->plan_auto ? "auto" : "manual", o->explain ? " --explain" : "");
    put(ts, "--mem-limit-mb", 0, "%d", o->mem_limit_mb);
    put(ts, "--trace", 0, "%s", str_or_none(o->trace));
    put(ts, "--trace-steps", 0, "%lld:%lld", o->trace_first, o->trace_last);
    put(ts, "--trace-lean", 0, "%d", o->trace_lean);
    put(ts, "--checkpoint-dir", 0, "%s", str_or_none(o->checkpoint_dir));
    put(ts, "--checkpoint-every", 0, "%lld", o->checkpoint_every);
    put(ts, "--keep", 0, "%d", o->keep);
    put(ts, "--resume", 0, "%s", o->resume ? str_or_none(o->resume_path) : "(no)");
    put(ts, "--save", 0, "%s", str_or_none(o->save_path));
    put(ts, "--save-precision", 0, "%s", o->save_bf16 ? "bf16" : "fp32");
    put(ts, "--load", 0, "%s", str_or_none(o->load_path));
    put(ts, "--eval-only", 0, "%d", o->eval_only);
    put(ts, "--stop-at-step", 0, "%lld", o->stop_at);
}
