/* hyfi data module: the prefetcher, a pthread that fills one of two batch
 * buffers while the caller uses the other (double buffering). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* pthreads */
#endif
#include "data_impl.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- prefetcher */
typedef struct pf_slot {
    float *x;       /* (B, C, H, W) */
    int32_t *y;     /* (B) */
    hyfi_batch info;
    int full;       /* filled and not yet given back by the consumer */
} pf_slot;

struct hyfi_prefetch {
    const hyfi_dataset *ds;
    hyfi_prefetch_config cfg;
    size_t spe;                 /* steps per epoch */
    size_t *perm;               /* (n) permutation of perm_epoch; NULL without shuffling */
    unsigned char *rows;        /* (B) the rows to decode (cfg.rows copied); NULL: all */
    uint64_t perm_epoch;
    int have_perm;
    hd_scratch s;               /* producer's working memory */
    pf_slot slot[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started;
    int stop;                   /* consumer asks the thread to finish */
    int done;                   /* thread finished: all batches produced, or failed */
    int status;                 /* thread's error, 0 if none */
    char errmsg[1024];          /* its message, written under mu with status */
    uint64_t consumed;          /* batches handed out */
    int held;                   /* the consumer holds slot (consumed - 1) % 2 */
};

static void *pf_main(void *arg)
{
    hyfi_prefetch *p = arg;
    const int B = p->cfg.batch;
    for (uint64_t k = 0;; k++) {
        if (p->cfg.num_steps && k >= p->cfg.num_steps) break;
        pf_slot *sl = &p->slot[k % 2];
        pthread_mutex_lock(&p->mu);
        while (sl->full && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        /* The slot is empty: the consumer does not touch it until it is full. */
        uint64_t step = p->cfg.first_step + k, epoch = step / p->spe;
        size_t start = (size_t)(step % p->spe) * (size_t)B;
        if (p->cfg.shuffle && (!p->have_perm || p->perm_epoch != epoch)) {
            hyfi_dataset_permutation(p->cfg.seed, epoch, p->ds->n, p->perm);
            p->perm_epoch = epoch;
            p->have_perm = 1;
        }
        char msg[sizeof p->errmsg] = "";
        int rc = hd_batch_into(p->ds, p->cfg.shuffle ? p->perm : NULL, start, B, p->rows, sl->x,
                               sl->y, &p->s, msg, sizeof msg);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->status = rc;
            if (msg[0])
                snprintf(p->errmsg, sizeof p->errmsg, "%s", msg);
            else
                snprintf(p->errmsg, sizeof p->errmsg, "prefetch: %s: batch %" PRIu64 " failed: %s",
                         p->ds->name, step, hyfi_data_status_name(rc));
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        sl->info = (hyfi_batch){.x = sl->x, .y = sl->y, .batch = B, .step = step, .epoch = epoch,
                                .start = start};
        sl->full = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pf_free(hyfi_prefetch *p)
{
    for (int i = 0; i < 2; i++) {
        free(p->slot[i].x);
        free(p->slot[i].y);
    }
    free(p->perm);
    free(p->rows);
    hd_scratch_free(&p->s);
    free(p);
}

int hyfi_prefetch_start(const hyfi_dataset *ds, const hyfi_prefetch_config *cfg,
                        hyfi_prefetch **out, char *err, size_t errlen)
{
    if (!ds || !cfg || !out)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "prefetch: dataset, config or out is NULL");
    *out = NULL;
    if (cfg->batch < 1 || ds->n == 0)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG,
                       "prefetch: %s: batch size %d with %zu images; need a batch size >= 1 and a "
                       "non-empty data set",
                       ds->name, cfg->batch, ds->n);
    hyfi_prefetch *p = calloc(1, sizeof *p);
    if (!p) return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "prefetch: out of memory");
    p->ds = ds;
    p->cfg = *cfg;
    p->spe = hyfi_data_steps_per_epoch(ds->n, cfg->batch);
    size_t numel = hyfi_dataset_image_numel(ds) * (size_t)cfg->batch;
    int bad = hd_scratch_init(&p->s, ds);
    for (int i = 0; i < 2; i++) {
#ifdef HYFI_SIM_LAZY
        /* simulation build (apps/sim_fold.h): mapped, never written */
        p->slot[i].x = HYFI_SIM_LAZY(numel * sizeof(float));
#else
        /* zeroed: rows left out by cfg->rows are never written */
        p->slot[i].x = cfg->rows ? calloc(numel, sizeof(float)) : malloc(numel * sizeof(float));
#endif
        p->slot[i].y = malloc((size_t)cfg->batch * sizeof(int32_t));
        bad |= !p->slot[i].x || !p->slot[i].y;
    }
    if (cfg->shuffle) {
        p->perm = malloc(ds->n * sizeof(size_t));
        bad |= !p->perm;
    }
    p->cfg.rows = NULL;
#ifdef HYFI_SIM_LAZY
    /* a simulation decodes no row, only the labels (it reads no pixel) */
    p->rows = calloc((size_t)cfg->batch, 1);
    bad |= !p->rows;
#else
    if (cfg->rows) {
        p->rows = malloc((size_t)cfg->batch);
        if (p->rows) memcpy(p->rows, cfg->rows, (size_t)cfg->batch);
        bad |= !p->rows;
    }
#endif
    if (bad) {
        pf_free(p);
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM,
                       "prefetch: %s: out of memory for two batches of %d images", ds->name,
                       cfg->batch);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int e = pthread_create(&p->thread, NULL, pf_main, p);
    if (e) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        pf_free(p);
        return hd_fail(err, errlen, HYFI_DATA_ERR_THREAD, "prefetch: cannot start a thread: %s",
                       strerror(e));
    }
    p->thread_started = 1;
    *out = p;
    return 0;
}

int hyfi_prefetch_next(hyfi_prefetch *p, hyfi_batch *b)
{
    if (!p || !b) return HYFI_DATA_ERR_ARG;
    pthread_mutex_lock(&p->mu);
    if (p->held) { /* give the previous batch back */
        p->slot[(p->consumed - 1) % 2].full = 0;
        p->held = 0;
        pthread_cond_broadcast(&p->cv);
    }
    pf_slot *sl = &p->slot[p->consumed % 2];
    while (!sl->full && !p->done) pthread_cond_wait(&p->cv, &p->mu);
    int rc;
    if (sl->full) {
        *b = sl->info;
        p->consumed++;
        p->held = 1;
        rc = 0;
    } else {
        rc = p->status ? p->status : HYFI_DATA_END;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

const char *hyfi_prefetch_error(hyfi_prefetch *p)
{
    if (!p) return "";
    pthread_mutex_lock(&p->mu); /* pairs with the thread's write of errmsg */
    const char *m = p->errmsg;
    pthread_mutex_unlock(&p->mu);
    return m;
}

void hyfi_prefetch_stop(hyfi_prefetch *p)
{
    if (!p) return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pf_free(p);
}
