/* Status names and error messages: a per-thread "last error" for every call,
 * a sticky first error per graph for the builders. */
#include "internal.h"

#include <stdio.h>

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

hyfi_status hyfi_graph_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t_last_error, sizeof t_last_error, "%s", msg);
    if (g && g->status == HYFI_OK) {
        g->status = s;
        snprintf(g->error, sizeof g->error, "%s", msg);
    }
    return s;
}

hyfi_status hyfi_call_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t_last_error, sizeof t_last_error, "%s", msg);
    if (g && g->status == HYFI_OK) snprintf(g->error, sizeof g->error, "%s", msg);
    return s;
}
