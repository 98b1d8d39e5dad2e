/* Simulation build only: see sim_fold.h (not included here: this file uses
 * the real malloc and free). */
#include <starpu.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

void *hyfi_sim_malloc(size_t n);
void *hyfi_sim_calloc(size_t n, size_t size);
void hyfi_sim_free(void *p);
void *hyfi_sim_lazy(size_t n);

#define HYFI_SIM_FOLD_MIN ((size_t)4 << 20)

/* The folded buffers (few and large), for free; the process's main thread,
 * on which SimGrid runs every simulated rank. */
typedef struct folded {
    void *p;
    size_t n;
    int lazy; /* hyfi_sim_lazy's: munmap */
    struct folded *next;
} folded;
static folded *g_folded;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t g_main_tid;

__attribute__((constructor)) static void sim_fold_init(void)
{
    g_main_tid = (pid_t)syscall(SYS_gettid);
}

void *hyfi_sim_malloc(size_t n)
{
    if (n < HYFI_SIM_FOLD_MIN || (pid_t)syscall(SYS_gettid) != g_main_tid) return malloc(n);
    folded *f = malloc(sizeof *f);
    void *p = NULL;
    if (!f || starpu_malloc_flags(&p, n, STARPU_MALLOC_SIMULATION_FOLDED) != 0 || !p) {
        free(f);
        return malloc(n);
    }
    pthread_mutex_lock(&g_mu);
    *f = (folded){.p = p, .n = n, .next = g_folded};
    g_folded = f;
    pthread_mutex_unlock(&g_mu);
    return p;
}

void *hyfi_sim_lazy(size_t n)
{
    if (!n) n = 1;
    folded *f = malloc(sizeof *f);
    void *p = f ? mmap(NULL, n, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(f);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    *f = (folded){.p = p, .n = n, .lazy = 1, .next = g_folded};
    g_folded = f;
    pthread_mutex_unlock(&g_mu);
    return p;
}

/* Folded as malloc: its contents are then garbage, not zeros (a simulation
 * reads no pixel). */
void *hyfi_sim_calloc(size_t n, size_t size)
{
    if (size && n > (size_t)-1 / size) return NULL;
    if (n * size < HYFI_SIM_FOLD_MIN || (pid_t)syscall(SYS_gettid) != g_main_tid)
        return calloc(n, size);
    return hyfi_sim_malloc(n * size);
}

void hyfi_sim_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    folded **q = &g_folded;
    while (*q && (*q)->p != p) q = &(*q)->next;
    folded *f = *q;
    if (f) *q = f->next;
    pthread_mutex_unlock(&g_mu);
    if (!f) {
        free(p);
        return;
    }
    if (f->lazy) munmap(f->p, f->n);
    else starpu_free_flags(f->p, f->n, STARPU_MALLOC_SIMULATION_FOLDED);
    free(f);
}
