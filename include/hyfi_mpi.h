/* hyfi_mpi.h: the calls of hyfi.h for programs that run on several MPI
 * ranks. Part of hyfi.h, which includes it after the context's types:
 * include <hyfi.h>, not this file. */
#ifndef HYFI_MPI_H
#define HYFI_MPI_H

#ifndef HYFI_H
#error "include <hyfi.h>: hyfi_mpi.h is a part of it"
#endif

/* ---------------------------------------------------------------- MPI runs */
/* Collective calls for programs that run on several MPI ranks: every rank
 * calls them, in the same order. Without MPI, or on one rank, they
 * communicate nothing. */

/* Make an outcome that each rank reached alone common to every rank, so that
 * all stop together instead of the others waiting forever for one that
 * stopped (e.g. rank 0 opening a file that only it writes). Each rank passes
 * its own status and message (msg NULL: hyfi_last_error()). Returns HYFI_OK on
 * every rank when every rank passed HYFI_OK; otherwise a failure on every
 * rank: on a rank that failed, its own; on the others, the status of the
 * lowest failing rank, with the message "rank k: <its message>"
 * (hyfi_last_error()), or just "<message>" when every rank failed with the
 * same status and message. hyfi_save_params and hyfi_load_params report their
 * outcome the same way. */
hyfi_status hyfi_ctx_agree(hyfi_ctx *ctx, hyfi_status local, const char *msg);
/* True on every rank when `local` is true on at least one (a logical or over
 * the ranks: e.g. "a signal arrived, stop after this step"). */
hyfi_status hyfi_ctx_any(hyfi_ctx *ctx, bool local, bool *any);
/* Both in one round (the check of every training step: a rank that cannot go
 * on, and a stop signal on any rank): returns as hyfi_ctx_agree, and *any
 * (may be NULL) as hyfi_ctx_any, also when the call fails. */
hyfi_status hyfi_ctx_agree_any(hyfi_ctx *ctx, hyfi_status local, const char *msg, bool flag,
                               bool *any);

/* Each rank's n floats (mine) to every rank: all (hyfi_ctx_nranks() * n
 * floats) holds rank r's at all[r * n], bit for bit; e.g. each rank's own
 * step time or peak memory, which differ between ranks. Without MPI, or on
 * one rank: mine copied. */
hyfi_status hyfi_ctx_gather_floats(hyfi_ctx *ctx, const float *mine, int n, float *all);

/* A setting that every rank must have alike: a name ("--steps") and its value
 * as text ("100"). hash: 0, or a hash of everything the setting stands for
 * (e.g. a data set's contents), compared instead of the text, which is then
 * only shown in the message (two paths to the same data agree). */
typedef struct hyfi_setting {
    const char *name;
    const char *value;
    uint64_t hash;
} hyfi_setting;
/* Compare n settings (at most 64, the same names in the same order on every
 * rank) across the ranks, by a 64-bit hash of each. HYFI_OK on every rank when
 * they agree; otherwise HYFI_ERR_MISMATCH on every rank, with the message "the
 * ranks were started with different <what>: rank k differs from rank 0 in
 * NAME (rank k: VALUE; rank 0: VALUE)...; start every rank with the same
 * <what>". hyfi_graph_compile makes the same
 * check by itself for the graph, the plan and the training settings. */
hyfi_status hyfi_ctx_check_same(hyfi_ctx *ctx, const char *what, const hyfi_setting *settings,
                                int n);

/* ------------------------------------------------- start-up of MPI programs */
/* Under mpiexec a program's own start-up (its arguments, its input files, its
 * output folders) comes before any context, and a rank that stops there
 * leaves the others waiting forever: in MPI's start, which waits for every
 * rank, or in the first collective call. These calls make the start-up
 * collective, so that no rank waits for one that failed:
 *
 *     int rank, nranks;
 *     hyfi_launch_config lc = hyfi_launch_config_default();
 *     hyfi_launch_begin(&lc, &rank, &nranks);     // first thing in main
 *     ... parse arguments, open files: local status and message ...
 *     hyfi_setting set[] = {{"--steps", steps_text}, ...};
 *     bool alike;
 *     if (hyfi_launch_agree(local, msg, "arguments", set, n, &alike) != HYFI_OK) {
 *         if (local != HYFI_OK ? !alike || rank == 0 : true)
 *             fprintf(stderr, "%s\n", hyfi_last_error());
 *         return 1;                               // MPI is already finalised
 *     }
 *     hyfi_ctx_create(&cc, &ctx);                 // takes MPI over
 *
 * Without MPI (not launched by mpiexec, or mpi = 0) they start nothing and
 * hyfi_launch_agree returns the local outcome. */
typedef struct hyfi_launch_config {
    int mpi;               /* 1: MPI; 0: a single process; -1: MPI when launched by mpiexec */
    int timeout_s;         /* > 0: the longest this rank waits for the others, in MPI's start
                              and in hyfi_launch_agree (from its own arrival there): past it,
                              a line on stderr names the ranks missing and the likely causes
                              (a rank stopped, hung or started with other arguments) and the
                              job ends (MPI_Abort; before MPI runs, exit status 1, after
                              which mpiexec ends the others). It also bounds
                              hyfi_launch_end's MPI_Finalize, after a barrier of every rank:
                              past it (30 s at most), a line on stderr and the exit status of
                              hyfi_launch_exit_status, 0 by default (the work is done).
                              0: wait forever */
    int end_with_launcher; /* 1: the kernel kills this process when the process that started
                              it (mpiexec's proxy) ends, so that no rank, not even a stopped
                              one, outlives its job (Linux PR_SET_PDEATHSIG); 0: not */
    bool death_notice;     /* the watcher process of hyfi_ctx_config.death_notice, started
                              here before MPI; off by default */
    hyfi_log_fn log;       /* where the start-up's and MPI_Finalize's time-limit lines go;
                              NULL: stderr (as hyfi_ctx_config.log) */
    void *log_user;
} hyfi_launch_config;
/* mpi -1, timeout_s 120, end_with_launcher 1. */
hyfi_launch_config hyfi_launch_config_default(void);
/* Under MPI: start the death notice (the line that names a rank that dies
 * without shutting down), then MPI itself (MPI_THREAD_SERIALIZED, unless the
 * application started it), and give this rank and the rank count (0 and 1
 * without MPI). cfg NULL: the default. */
hyfi_status hyfi_launch_begin(const hyfi_launch_config *cfg, int *rank, int *nranks);
/* Collective, once, after hyfi_launch_begin and before hyfi_ctx_create: this
 * rank's start-up outcome (local, msg; msg NULL: hyfi_last_error()) and n
 * settings every rank must have alike (as hyfi_ctx_check_same; what names them
 * in the message, e.g. "arguments"). HYFI_OK on every rank when every rank
 * succeeded with the same settings. Otherwise a failure on every rank, after
 * which MPI is finalised (return from main): a rank that failed gets its own
 * status and message; the others the lowest failing rank's status with "rank
 * k: <message>", or HYFI_ERR_MISMATCH naming the settings that differ.
 * *alike (may be NULL): every rank failed with the same status and message
 * (print it once). */
hyfi_status hyfi_launch_agree(hyfi_status local, const char *msg, const char *what,
                              const hyfi_setting *settings, int n, bool *alike);
/* Finalise MPI where hyfi_launch_begin started it and no context took it over
 * (a program that ends without creating one); nothing otherwise. */
void hyfi_launch_end(void);
/* The exit status this process ends with should MPI_Finalize hang after every
 * rank has finished (hyfi_ctx_destroy, hyfi_launch_end: see watchdog_s and
 * timeout_s): the program's own, given before either; 0 by default, 1 after a
 * failed hyfi_launch_agree. */
void hyfi_launch_exit_status(int status);

/* What one rank built of a compiled graph, its share of the plan. With
 * StarPU-MPI's STARPU_MPI_FAKE_SIZE / STARPU_MPI_FAKE_RANK one process compiles
 * rank r of a plan of any size (nothing runs: hyfi-train --compile-only), so
 * per-rank costs of plans far larger than a host can be measured on it. */
typedef struct hyfi_rank_stats {
    int rank, nranks;
    long handles;         /* StarPU data handles registered on this rank */
    long tasks_built;     /* tasks of this rank's training-step program */
    long tasks_far;       /* tasks of tiles far from its own that it never built (their
                             lowering ran; the records were dropped at once) */
    long tasks_submitted; /* of those, the ones it submits each step */
    double graph_mb;      /* what the compile grew the process by, less StarPU's data */
    double largest_task_mb; /* the most data one task of this rank's step holds at once
                               (its buffers; MB of 10^6 bytes, as the memory checks) */
} hyfi_rank_stats;
typedef struct hyfi_graph hyfi_graph;
hyfi_status hyfi_graph_rank_stats(hyfi_graph *g, hyfi_rank_stats *out);

#endif
