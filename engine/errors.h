/* The thread's last error (engine/errors.c), for library code that needs
 * neither StarPU nor the graph internals (the trace tooling in trace/). */
#ifndef HYFI_ENGINE_ERRORS_H
#define HYFI_ENGINE_ERRORS_H

#include "hyfi.h"

/* Format the message into hyfi_last_error() and return s. */
hyfi_status hyfi_fail(hyfi_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
