/* hyfi-train: slides batches written region by region (train_regions.h). */
#include "train_regions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct train_regions {
    const hyfi_dataset *ds;
    int B, shuffle;
    uint64_t seed, spe;
    size_t *perm;     /* (n) the permutation of epoch perm_epoch */
    uint64_t perm_epoch;
    int have_perm;
    size_t *rows;     /* (B) image index of each row of the batch */
    int32_t *y;       /* (B) */
    char err[1024];
};

int train_regions_new(const hyfi_dataset *ds, int B, uint64_t seed, int shuffle,
                      train_regions **out, char *err, size_t errlen)
{
    const size_t n = hyfi_dataset_size(ds);
    train_regions *tr = calloc(1, sizeof *tr);
    if (tr) {
        tr->perm = malloc(n * sizeof *tr->perm);
        tr->rows = malloc((size_t)B * sizeof *tr->rows);
        tr->y = malloc((size_t)B * sizeof *tr->y);
    }
    if (!tr || !tr->perm || !tr->rows || !tr->y) {
        train_regions_free(tr);
        snprintf(err, errlen, "out of memory for the batch order of %zu images", n);
        return HYFI_DATA_ERR_NOMEM;
    }
    *tr = (train_regions){.ds = ds, .B = B, .shuffle = shuffle, .seed = seed,
                          .spe = hyfi_data_steps_per_epoch(n, B), .perm = tr->perm,
                          .rows = tr->rows, .y = tr->y};
    *out = tr;
    return 0;
}

void train_regions_free(train_regions *tr)
{
    if (!tr) return;
    free(tr->perm);
    free(tr->rows);
    free(tr->y);
    free(tr);
}

int train_regions_next(train_regions *tr, uint64_t step, hyfi_batch *b)
{
    const size_t n = hyfi_dataset_size(tr->ds);
    const uint64_t epoch = step / tr->spe;
    const size_t start = (size_t)(step % tr->spe) * (size_t)tr->B;
    if (!tr->have_perm || tr->perm_epoch != epoch) {
        if (tr->shuffle) hyfi_dataset_permutation(tr->seed, epoch, n, tr->perm);
        else
            for (size_t i = 0; i < n; i++) tr->perm[i] = i;
        tr->perm_epoch = epoch;
        tr->have_perm = 1;
    }
    for (int r = 0; r < tr->B; r++) {
        tr->rows[r] = tr->perm[(start + (size_t)r) % n];
        tr->y[r] = hyfi_dataset_label(tr->ds, tr->rows[r]);
    }
    *b = (hyfi_batch){.x = NULL, .y = tr->y, .batch = tr->B, .step = step, .epoch = epoch,
                      .start = start};
    return 0;
}

/* One region: each of its images read from its file. */
static int fill(void *user, const hyfi_input_region *r, float *out)
{
    train_regions *tr = user;
    const size_t per = (size_t)r->channels * r->h * r->w;
    for (int k = 0; k < r->count; k++) {
        const int rc = hyfi_dataset_region(tr->ds, tr->rows[r->first + k], r->y0, r->x0, r->h,
                                           r->w, out + (size_t)k * per, tr->err, sizeof tr->err);
        if (rc) return rc;
    }
    return 0;
}

hyfi_status train_regions_set_input(train_regions *tr, hyfi_graph *g, hyfi_tensor *x)
{
    tr->err[0] = 0;
    return hyfi_set_input_fn(g, x, fill, tr);
}

const char *train_regions_error(const train_regions *tr) { return tr->err; }
