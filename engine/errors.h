/* The thread's last error (engine/errors.c) and the failures the engine keeps
 * for later calls, for library code that needs neither StarPU nor the graph
 * internals (the trace tooling in trace/). */
#ifndef HYFI_ENGINE_ERRORS_H
#define HYFI_ENGINE_ERRORS_H

#include "hyfi.h"

/* Format the message into hyfi_last_error() and return s. */
hyfi_status hyfi_fail(hyfi_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A message to log (user's callback, or stderr as hyfi_ctx_config.log says). */
void hyfi_logf(hyfi_log_fn log, void *user, hyfi_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sizes side by side in one message: one unit (unit 0: GB from 1 GB, else MB;
 * decimal, as --mem-limit-mb) and the fewest decimals (1, or 0 for MB from
 * 100 MB; at most 6) that print any two of v[0..n-1] that differ differently:
 * never "needs 1 MB, above the limit of 1 MB". */
typedef struct hyfi_size_fmt {
    double unit;
    const char *name;
    int digits;
} hyfi_size_fmt;
hyfi_size_fmt hyfi_sizes_fmt(const double *v, int n, double unit);
/* The arguments of "%.*f %s" for bytes in format f. */
#define HYFI_SIZE_ARGS(f, bytes) (f).digits, (bytes) / (f).unit, (f).name

/* engine/trace.c: errno of the last failure to write the notes of a run
 * traced into dir (hyfi_handles.tsv, hyfi_ops.tsv, hyfi_plan.tsv; *file: which),
 * kept by hyfi_ctx_destroy on rank 0 for hyfi_trace_merge; 0: none. */
int hyfi_trace_note_error(const char *dir, const char **file);

#endif
