/* hyfi_versions (hyfi_files.h): the versions of hyfi and of the libraries
 * this build uses, as text, for a program's --version and for bug reports.
 * It starts nothing (no StarPU, no MPI, no CUDA context): every library is
 * asked only for its version, which each answers without being initialised,
 * and a CUDA build on a machine without a GPU or driver says so instead of
 * failing. */
#include "hyfi_config.h"

#include <hyfi.h>

#include <starpu.h>
#include <stdarg.h>
#include <stdio.h>
#if !HYFI_SIMULATION
#include <oneapi/dnnl/dnnl.h>
#endif
#if HYFI_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#endif

/* Append to buf (len bytes) as snprintf would at offset *n; *n counts what
 * the whole text needs, also past len. */
__attribute__((format(printf, 4, 5)))
static void add(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(*n < len ? buf + *n : NULL, *n < len ? len - *n : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *n += (size_t)k;
}

#if HYFI_HAVE_CUDA
/* CUDA's version numbers: 1000 x major + 10 x minor (13000: 13.0). */
static void cuda_ver(char *out, size_t len, int v)
{
    snprintf(out, len, "%d.%d", v / 1000, v % 1000 / 10);
}

/* cuDNN 9's: 10000 x major + 100 x minor + patch (91900: 9.19.0); before 9,
 * 1000 x major + 100 x minor + patch (8902: 8.9.2). */
static void cudnn_ver(char *out, size_t len, size_t v)
{
    if (v >= 90000) snprintf(out, len, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
    else snprintf(out, len, "%zu.%zu.%zu", v / 1000, v % 1000 / 100, v % 100);
}
#endif

size_t hyfi_versions(char *buf, size_t len)
{
    size_t n = 0;
    if (buf && len) buf[0] = 0;
    else len = 0;
    add(buf, len, &n, "hyfi %s%s\n", hyfi_version(),
        HYFI_SIMULATION ? " (simulation build: StarPU on SimGrid, no kernels)" : "");
    int ma = 0, mi = 0, re = 0;
    starpu_get_version(&ma, &mi, &re);
    add(buf, len, &n, "StarPU %d.%d.%d", ma, mi, re);
    if (ma != STARPU_MAJOR_VERSION || mi != STARPU_MINOR_VERSION || re != STARPU_RELEASE_VERSION)
        add(buf, len, &n, " (built against %d.%d.%d)", STARPU_MAJOR_VERSION, STARPU_MINOR_VERSION,
            STARPU_RELEASE_VERSION);
    add(buf, len, &n, "\n");
#if !HYFI_SIMULATION
    const dnnl_version_t *d = dnnl_version();
    add(buf, len, &n, "oneDNN %d.%d.%d", d->major, d->minor, d->patch);
    if (d->hash && *d->hash && *d->hash != 'N') /* "N/A" when built outside git */
        add(buf, len, &n, " (git %.12s)", d->hash);
    if (d->major != DNNL_VERSION_MAJOR || d->minor != DNNL_VERSION_MINOR ||
        d->patch != DNNL_VERSION_PATCH)
        add(buf, len, &n, " (built against %d.%d.%d)", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR,
            DNNL_VERSION_PATCH);
    add(buf, len, &n, "\n");
#endif
#if HYFI_HAVE_CUDA
    /* Compiled against, then what is loaded: the runtime and cuDNN answer
     * without a device; the driver's version is 0 (or an error) without one. */
    char built[32], loaded[32];
    int rt = 0, drv = 0;
    cuda_ver(built, sizeof built, CUDART_VERSION);
    add(buf, len, &n, "CUDA runtime %s", built);
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess && rt > 0 && rt != CUDART_VERSION) {
        cuda_ver(loaded, sizeof loaded, rt);
        add(buf, len, &n, " (loaded %s)", loaded);
    }
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) {
        cuda_ver(loaded, sizeof loaded, drv);
        add(buf, len, &n, ", driver %s\n", loaded);
    } else {
        add(buf, len, &n, ", no CUDA driver found (no usable GPU: CPU workers only)\n");
    }
    cudnn_ver(built, sizeof built, (size_t)CUDNN_VERSION);
    cudnn_ver(loaded, sizeof loaded, cudnnGetVersion());
    add(buf, len, &n, "cuDNN %s", built);
    if (cudnnGetVersion() != (size_t)CUDNN_VERSION) add(buf, len, &n, " (loaded %s)", loaded);
    add(buf, len, &n, "\n");
#else
    add(buf, len, &n, "CUDA: not in this build (CPU workers only)\n");
#endif
    return n;
}
