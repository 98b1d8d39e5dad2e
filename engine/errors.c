/* Status names and error messages: a per-thread "last error" for every call,
 * a sticky first error per graph for the builders. */
#include "internal.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char t_last_error[512];

const char *hyfi_status_name(hyfi_status s)
{
    switch (s) {
    case HYFI_OK: return "HYFI_OK";
    case HYFI_ERR_ARG: return "HYFI_ERR_ARG";
    case HYFI_ERR_SHAPE: return "HYFI_ERR_SHAPE";
    case HYFI_ERR_STATE: return "HYFI_ERR_STATE";
    case HYFI_ERR_NOMEM: return "HYFI_ERR_NOMEM";
    case HYFI_ERR_IO: return "HYFI_ERR_IO";
    case HYFI_ERR_RUNTIME: return "HYFI_ERR_RUNTIME";
    case HYFI_ERR_UNSUPPORTED: return "HYFI_ERR_UNSUPPORTED";
    case HYFI_ERR_DATA: return "HYFI_ERR_DATA";
    case HYFI_ERR_MISMATCH: return "HYFI_ERR_MISMATCH";
    }
    return "HYFI_ERR_UNKNOWN";
}

const char *hyfi_last_error(void) { return t_last_error; }

const char *hyfi_version(void) { return HYFI_VERSION; }

hyfi_status hyfi_fail(hyfi_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* Format into the thread's last error; on g, keep the message too (sticky:
 * also set the graph's status when it is the first builder error). */
static hyfi_status record(hyfi_graph *g, int sticky, hyfi_status s, const char *fmt, va_list ap)
{
    vsnprintf(t_last_error, sizeof t_last_error, fmt, ap);
    if (g && g->status == HYFI_OK) {
        if (sticky) g->status = s;
        snprintf(g->error, sizeof g->error, "%s", t_last_error);
    }
    return s;
}

hyfi_status hyfi_graph_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(g, 1, s, fmt, ap);
    va_end(ap);
    return s;
}

hyfi_status hyfi_call_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(g, 0, s, fmt, ap);
    va_end(ap);
    return s;
}

void hyfi_logf(hyfi_log_fn log, void *user, hyfi_log_level level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log) {
        log(user, level, msg);
        return;
    }
    fprintf(stderr, "hyfi: %s%s\n", level == HYFI_LOG_WARNING ? "warning: " : "", msg);
    fflush(stderr);
}

/* HYFI_OK when g is compiled, else the call's error (who: its name). */
hyfi_status hyfi_need_compiled(hyfi_graph *g, const char *who)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "%s: graph is NULL", who);
    if (!g->cc)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "%s: compile the graph first "
                                                 "(hyfi_graph_compile)", who);
    return HYFI_OK;
}

hyfi_size_fmt hyfi_sizes_fmt(const double *v, int n, double unit)
{
    double most = 0;
    for (int i = 0; i < n; i++) most = v[i] > most ? v[i] : most;
    if (unit <= 0) unit = most >= 1e9 ? 1e9 : 1e6;
    hyfi_size_fmt f = {unit, unit == 1e9 ? "GB" : "MB", unit == 1e6 && most >= 100e6 ? 0 : 1};
    for (bool alike = true; alike && f.digits < 6; f.digits += alike) {
        alike = false;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n && !alike; j++) {
                char a[48], b[48];
                snprintf(a, sizeof a, "%.*f", f.digits, v[i] / unit);
                snprintf(b, sizeof b, "%.*f", f.digits, v[j] / unit);
                alike = v[i] != v[j] && !strcmp(a, b);
            }
    }
    return f;
}
