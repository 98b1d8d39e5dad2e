/* hyfi-train's command line: the options, their defaults, parsing and
 * validation (apps/train_options.c), and the --help text (apps/train_usage.c).
 * The driver (apps/hyfi_train.c) runs what they describe. */
#ifndef HYFI_APPS_TRAIN_OPTIONS_H
#define HYFI_APPS_TRAIN_OPTIONS_H

#include "data.h"
#include "models.h"

#include <hyfi.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct train_options {
    model_config mc;           /* --model and its flags (num_classes set in main) */
    int dry_run;               /* --dry-run: summary of the graph, no training */
    int compile_only;          /* --compile-only: compile, per-rank counts, no training */
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
    hyfi_precision precision;  /* --precision fp32|bf16 */
    const char *metrics;       /* NULL: none */
    int print_freq;
    float print_secs;          /* --print-secs: a line at least every N s; 0: --print-freq only */
    int print_mpi4dl;          /* --print-mpi4dl: MPI4DL's "Epoch: e images per sec:X" lines */
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
    hyfi_recompute recompute;  /* --recompute none|stage|layer */
    int mem_limit_mb;          /* --mem-limit-mb: StarPU's memory per rank; 0: none */
    const char *swap_dir;      /* --swap-dir DIR: StarPU's out-of-core disk swap; NULL: none */
    int swap_mb;               /* --swap-mb: its size; 0: 90% of the free space there */
    int submit_window;         /* --submit-window N: tasks in flight per rank; 0: a step */
    const char *trace;         /* --trace DIR */
    long long trace_first;     /* --trace-steps A:B: record steps A..B only (1-based); */
    long long trace_last;      /*   0: from the start / to the end of the run */
    int trace_lean;            /* --trace-lean: only the events hyfi's summary reads */
    int watchdog_s;            /* --watchdog, HYFI_WATCHDOG_S; 0: off */
    /* long runs */
    const char *checkpoint_dir; /* --checkpoint-dir DIR: NULL: no checkpoints */
    long long checkpoint_every; /* --checkpoint-every N steps; 0: only at the end and on a
                                   signal */
    int keep;                  /* --keep K newest checkpoints; 0: all */
    int resume;                /* --resume [PATH] */
    const char *resume_path;   /* its folder or file; NULL: --checkpoint-dir */
    const char *save_path;     /* --save FILE.safetensors: the model at the end */
    int save_bf16;             /* --save-precision bf16: that file in BF16 */
    const char *load_path;     /* --load FILE: parameters before training */
    int eval_only;             /* --eval-only: no training */
    long long stop_at;         /* --stop-at-step K: stop after step K as a preemption would;
                                  0: never */
    /* automatic plans (apps/train_autoplan.c) */
    int plan_auto;             /* --plan auto */
    int explain;               /* --explain: print the best plans, exit 0 */
    int plan_top;              /* --plan-top: plans printed */
    hyfi_machine plan_machine; /* --plan-ranks, --plan-gpus-per-rank, ...: a machine to plan */
    int plan_device_set;       /* --plan-device given */
    double plan_mem_gb;        /* --plan-mem-gb: per GPU, or per CPU rank */
    int help;                  /* -h, --help */
    char given[1024];          /* the flags on the command line: " --lr --seed " */
    char warnings[1024];       /* flags without effect, one line each ("" if none) */
} train_options;

/* --watchdog's default: far above a step of the models this driver trains on
 * a node's CPUs, far below "forever". */
#define TRAIN_DEFAULT_WATCHDOG_S 120

/* Model replicas: GEMS copies x data-parallel groups. */
int train_replicas(const train_options *o);

/* The --help text (apps/train_usage.c). */
void train_usage(FILE *f);
/* --version anywhere on the command line: print the versions of hyfi and of
 * its libraries (hyfi_versions) to f on the first rank (the launcher's, as MPI
 * is not started) and return 1; else 0. */
int train_version(int argc, char **argv, FILE *f);

/* Fill *o from the defaults, HYFI_WATCHDOG_S and argv, then check the flags
 * together. Returns 0: parsed (o->warnings may name flags without effect);
 * 1: --help asked for (nothing else parsed); -1: bad command line, the
 * message (naming the flag and the fix) in err. Nothing is printed: under
 * MPI every rank reports its outcome to the others first. o->balance is
 * malloc'd (also on -1). */
int train_parse_args(int argc, char **argv, train_options *o, char *err, size_t errlen);

/* Append one line (printf format) to the text buf of len bytes (dropped when
 * full), and print such a text's lines, each after prefix. */
void train_add_line(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void train_print_lines(FILE *f, const char *prefix, const char *lines);

/* Whether flag (its canonical name: --lr, --replications, --fused-layers)
 * was given on the command line. */
bool train_given(const train_options *o, const char *flag);

/* --watchdog or HYFI_WATCHDOG_S, or the default, read before the full parse
 * (the time limit of MPI's start). */
int train_early_watchdog(int argc, char **argv);

/* The settings every rank must have alike (hyfi_launch_agree): every flag
 * but those a rank may choose alone (--device, --watchdog, -v, --print-freq,
 * --print-secs, --print-mpi4dl, --swap-dir, --swap-mb: the node's own). The driver appends what it derives
 * (the data's contents, the checkpoint resumed). */
#define TRAIN_MAX_SETTINGS 60
typedef struct train_settings {
    int n;
    hyfi_setting set[TRAIN_MAX_SETTINGS];
    char text[TRAIN_MAX_SETTINGS][96];
} train_settings;
void train_settings_fill(const train_options *o, train_settings *ts);

/* apps/train_autoplan.c: a --plan* flag's value (0; -1 bad, the message in
 * msg; 1 not one of them), and the --plan* and --explain flags together. */
int train_autoplan_flag(const char *flag, const char *val, train_options *o, char *msg,
                        size_t len);
int train_autoplan_check(const train_options *o, char *msg, size_t len);


#endif
