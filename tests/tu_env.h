/* tu_env.h: the environment variables the test scripts set, applied to a
 * test's context configuration as hyfi-train applies them
 * (apps/env_config.c). The library reads no environment of its own. */
#ifndef HYFI_TU_ENV_H
#define HYFI_TU_ENV_H

#include "../apps/env_config.h"

static inline void tu_ctx_env(hyfi_ctx_config *c) { hyfi_env_ctx_config(c); }

#endif
