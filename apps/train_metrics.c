/* hyfi-train's --metrics lines and the step's training accuracy
 * (train_metrics.h says what the lines hold). */
#include "train_metrics.h"
#include "train_progress.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double step_accuracy(run *r, const int32_t *labels)
{
#ifdef HYFI_APPS_SIM_SHIMS_H
    (void)r, (void)labels;
    return NAN; /* a simulation runs no kernel: its logits mean nothing */
#else
    const size_t B = (size_t)r->B, K = (size_t)r->K;
    if (!labels || K == 0) return NAN;
    if (!r->logits_buf && !(r->logits_buf = malloc(B * K * sizeof *r->logits_buf))) return NAN;
    if (hyfi_tensor_read(r->g, r->tlogits, r->logits_buf, B * K) != HYFI_OK) return NAN;
    size_t correct = 0;
    for (size_t row = 0; row < B; row++) {
        const float *z = r->logits_buf + row * K; /* (K) */
        size_t best = 0;
        for (size_t c = 1; c < K; c++)
            if (z[c] > z[best]) best = c;
        correct += (int32_t)best == labels[row];
    }
    return (double)correct / (double)B;
#endif
}

/* ", "KEY":[v0,v1,...] (0 or less: null) */
static void json_ranks(FILE *f, const char *key, const float *v, int n)
{
    fprintf(f, ",\"%s\":[", key);
    for (int k = 0; k < n; k++) {
        if (k) fputc(',', f);
        json_num(f, v[k] > 0, v[k]);
    }
    fputc(']', f);
}

/* Each rank's n figures into all (nranks x n; NULL when not gathered: one
 * rank, or no --metrics). 1: the exchange failed (printed). */
static int gather(run *r, const float *mine, int n, float **all)
{
    *all = NULL;
    if (!r->o.metrics || r->nranks < 2) return 0;
    float *a = calloc((size_t)r->nranks * (size_t)n, sizeof *a);
    if (!a) return 0; /* (out of memory: every rank alike, the lists left out) */
    const hyfi_status st = hyfi_ctx_gather_floats(r->ctx, mine, n, a);
    if (st != HYFI_OK) {
        free(a);
        return lib_fail("gathering the ranks' figures (hyfi_ctx_gather_floats)", st, NULL);
    }
    *all = a;
    return 0;
}

/* This rank's peak resident memory so far (MB), 0: unknown. */
static double peak_mb(const run *r)
{
    hyfi_memory_stats ms;
    return hyfi_memory_stats_get(r->ctx, r->g, &ms) == HYFI_OK && ms.peak_mb > 0 ? ms.peak_mb : 0;
}

int metrics_step(run *r, long long s, float l, double gnorm, double wnorm, double acc)
{
    float *all = NULL;
    const float mine[2] = {(float)r->rates[s], r->o.metrics && r->nranks > 1 ? (float)peak_mb(r) : 0};
    if (gather(r, mine, 2, &all)) return 1;
    FILE *mf = r->mf;
    if (mf) {
        fprintf(mf, "{\"step\":%lld,\"loss\":", s + 1);
        json_num(mf, true, l);
        fputs(",\"images_per_sec\":", mf);
        json_num(mf, true, r->rates[s]);
        fputs(",\"grad_norm\":", mf);
        json_num(mf, true, gnorm);
        fputs(",\"weight_norm\":", mf);
        json_num(mf, true, wnorm);
        fputs(",\"train_accuracy\":", mf);
        json_num(mf, true, acc);
        if (all) {
            float *v = malloc((size_t)r->nranks * sizeof *v);
            if (v) {
                for (int k = 0; k < r->nranks; k++) v[k] = all[2 * k];
                json_ranks(mf, "rank_images_per_sec", v, r->nranks);
                for (int k = 0; k < r->nranks; k++) v[k] = all[2 * k + 1];
                json_ranks(mf, "rank_peak_memory_mb", v, r->nranks);
            }
            free(v);
        }
        fputs("}\n", mf);
    }
    free(all);
    return 0;
}

void metrics_summary(run *r, bool have_rss, double peak)
{
    float *all = NULL;
    const float mine = have_rss ? (float)peak : 0;
    if (gather(r, &mine, 1, &all)) return; /* (printed; the line without the list) */
    FILE *mf = r->mf;
    if (mf) {
        fputs("{\"summary\":true,\"peak_memory_mb_rank0\":", mf);
        json_num(mf, have_rss, have_rss ? peak : 0);
        fputs(",\"mean_images_per_sec\":", mf);
        json_num(mf, r->nmeas > 0, r->mean);
        fputs(",\"median_images_per_sec\":", mf);
        json_num(mf, r->nmeas > 0, r->median);
        fputs(",\"test_accuracy\":", mf);
        json_num(mf, r->have_acc, r->acc);
        if (all) json_ranks(mf, "peak_memory_mb_ranks", all, r->nranks);
        fputs("}\n", mf);
    }
    free(all);
}

hyfi_status metrics_status(run *r, char *msg, size_t len)
{
    if (!r->mf) return HYFI_OK;
    if (!r->metrics_errno && (fflush(r->mf) != 0 || ferror(r->mf)))
        r->metrics_errno = errno ? errno : EIO;
    if (!r->metrics_errno) return HYFI_OK;
    snprintf(msg, len, "--metrics %s: write failed: %s; the file is incomplete (free some space "
                       "or give another path)", r->o.metrics, strerror(r->metrics_errno));
    return HYFI_ERR_IO;
}
