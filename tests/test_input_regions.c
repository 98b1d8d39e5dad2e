/* Region input (hyfi_input_regions, hyfi_set_input_fn) against the whole-batch
 * path (hyfi_set_input), for an untiled plan and for tiled plans (square,
 * vertical, horizontal; with micro-batches), in one process and on several
 * MPI ranks (the same binary under mpiexec):
 *   - the regions of all ranks together cover every pixel of every image of
 *     every micro-batch exactly once per handle kind, and a rank's fill calls
 *     are exactly its hyfi_input_regions list, in order;
 *   - with the regions filled from the same batch, the input read back
 *     (hyfi_tensor_read), the eval loss and a tiled activation are bitwise
 *     those of the whole-batch path;
 *   - a fill that fails on one rank fails the call on every rank
 *     (HYFI_ERR_DATA, naming the region); a NULL fill and a label tensor are
 *     refused (HYFI_ERR_ARG).
 * On 2 ranks the tiles of a 4-tile plan are split between the ranks, so each
 * rank is asked for fewer regions than there are. */
#include "hyfi.h"
#include "tu_env.h"
#include "testutil.h"

#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 4
#define C 3
#define H 16
#define W 16
#define K 3

typedef struct {
    const float *batch;   /* (B, C, H, W) */
    const hyfi_input_region *want;
    int nwant, calls, order_bad, fail_at;
    int *cover;           /* (B, H, W) hits of tile regions, then of whole regions */
} fill_ctx;

static int fill(void *user, const hyfi_input_region *r, float *out)
{
    fill_ctx *f = user;
    if (f->calls == f->fail_at) {
        f->calls++;
        return 7;
    }
    if (f->calls >= f->nwant || memcmp(&f->want[f->calls], r, sizeof *r)) f->order_bad++;
    f->calls++;
    for (int n = 0; n < r->count; n++)
        for (int c = 0; c < r->channels; c++)
            for (int y = 0; y < r->h; y++) {
                const int img = r->first + n;
                memcpy(out + (((size_t)n * r->channels + c) * r->h + y) * r->w,
                       f->batch + (((size_t)img * C + c) * H + r->y0 + y) * W + r->x0,
                       (size_t)r->w * sizeof(float));
                if (c == 0)
                    for (int x = 0; x < r->w; x++)
                        f->cover[(r->tile < 0) * B * H * W +
                                 ((size_t)img * H + r->y0 + y) * W + r->x0 + x]++;
            }
    return 0;
}

static hyfi_tensor *build(hyfi_graph *g, hyfi_tensor **x, hyfi_tensor **y, hyfi_tensor **act)
{
    *x = hyfi_input(g, "x", B, C, H, W);
    *y = hyfi_labels(g, "y", B);
    hyfi_layer_begin(g, "stem");
    hyfi_tensor *h = hyfi_conv2d(g, "c1", *x, (hyfi_conv2d_params){
        .out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1});
    h = hyfi_relu(g, "r1", h);
    *act = h = hyfi_conv2d(g, "c2", h, (hyfi_conv2d_params){
        .out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1, .bias = true});
    hyfi_layer_begin(g, "head");
    h = hyfi_global_avgpool(g, "gap", h);
    h = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = K, .bias = true});
    return hyfi_softmax_cross_entropy(g, "loss", h, *y);
}

/* Sum (max: the maximum) of v[0..n-1] over the ranks, on every rank, through
 * StarPU-MPI (its thread owns MPI: no MPI call of our own). */
static void over_ranks(hyfi_ctx *ctx, int *v, int n, int max)
{
    static int64_t tag = INT64_C(0x5e5e0000);
    const int R = hyfi_ctx_nranks(ctx), me = hyfi_ctx_rank(ctx);
    if (R < 2) return;
    int *tmp = calloc((size_t)n, sizeof *tmp);
    starpu_data_handle_t h, t;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)v, (uint32_t)n, sizeof *v);
    starpu_vector_data_register(&t, STARPU_MAIN_RAM, (uintptr_t)tmp, (uint32_t)n, sizeof *v);
    if (me == 0) {
        for (int r = 1; r < R; r++) {
            MPI_Status st;
            starpu_mpi_recv(t, r, tag, MPI_COMM_WORLD, &st);
            starpu_data_acquire(t, STARPU_R);
            for (int i = 0; i < n; i++)
                v[i] = max ? (tmp[i] > v[i] ? tmp[i] : v[i]) : v[i] + tmp[i];
            starpu_data_release(t);
        }
        for (int r = 1; r < R; r++) starpu_mpi_send(h, r, tag + 1, MPI_COMM_WORLD);
    } else {
        MPI_Status st;
        starpu_mpi_send(h, 0, tag, MPI_COMM_WORLD);
        starpu_mpi_recv(h, 0, tag + 1, MPI_COMM_WORLD, &st);
    }
    starpu_data_unregister(h);
    starpu_data_unregister(t);
    free(tmp);
    tag += 2;
}

static int total_regions(hyfi_ctx *ctx, int local)
{
    over_ranks(ctx, &local, 1, 0);
    return local;
}

static void one_plan(hyfi_ctx *ctx, const char *name, int stages, int parts, int tiles,
                     hyfi_slice_method slice, int dp)
{
    const int me = hyfi_ctx_rank(ctx), R = hyfi_ctx_nranks(ctx);
    char what[160];
    hyfi_graph *g;
    hyfi_graph_create(ctx, 5, &g);
    hyfi_tensor *x, *y, *act;
    hyfi_tensor *loss = build(g, &x, &y, &act);
    hyfi_plan_config pc = {.stages = stages, .parts = parts, .spatial_stages = tiles > 1,
                           .spatial_parts = tiles, .slice = slice, .deterministic = true,
                           .data_parallel = dp};
    hyfi_graph_set_plan(g, &pc);
    if (hyfi_graph_status(g) || hyfi_graph_compile(g, loss, NULL)) {
        printf("%s: %s\n", name, hyfi_graph_error(g));
        tu_check(1, name);
        hyfi_graph_destroy(g);
        return;
    }
    float *batch = tu_alloc((size_t)B * C * H * W), *back = tu_alloc((size_t)B * C * H * W);
    float *act1 = tu_alloc((size_t)B * 4 * H * W), *act2 = tu_alloc((size_t)B * 4 * H * W);
    uint64_t st = 99;
    tu_fill(batch, (size_t)B * C * H * W, &st, -2.f, 2.f);
    const int32_t labels[B] = {0, 2, 1, 2};
    float l1 = 0, l2 = 0;
    hyfi_set_input(g, x, batch, (size_t)B * C * H * W);
    hyfi_set_labels(g, y, labels, B);
    hyfi_infer(g, &l1);
    hyfi_tensor_read(g, act, act1, (size_t)B * 4 * H * W);

    /* the regions of this rank */
    int n = -1;
    tu_check(hyfi_input_regions(g, x, NULL, 0, &n) != HYFI_OK || n < 0, "regions: count");
    hyfi_input_region *reg = calloc((size_t)(n > 0 ? n : 1), sizeof *reg);
    int n2 = 0;
    hyfi_input_regions(g, x, reg, n, &n2);
    tu_check(n2 != n, "regions: the same count twice");
    const int all = total_regions(ctx, n);
    tu_check(all < 1, "regions: some rank owns some");
    printf("%s: rank %d fills %d of the %d regions\n", name, me, n, all);
    fill_ctx f = {.batch = batch, .want = reg, .nwant = n, .fail_at = -1,
                  .cover = calloc(2 * (size_t)B * H * W, sizeof(int))};
    memset(back, 0, (size_t)B * C * H * W * sizeof(float));
    hyfi_set_input(g, x, back, (size_t)B * C * H * W); /* zeros: the fill must restore all */
    hyfi_status s = hyfi_set_input_fn(g, x, fill, &f);
    snprintf(what, sizeof what, "%s: hyfi_set_input_fn ok and called once per region in order "
             "(%d of %d regions on rank %d)", name, n, all, me);
    tu_check(s != HYFI_OK || f.calls != n || f.order_bad, what);
    /* every pixel once per handle kind, summed over the ranks */
    over_ranks(ctx, f.cover, 2 * B * H * W, 0);
    int tiled_bad = 0, whole_bad = 0, has_tiles = 0, has_whole = 0;
    for (int i = 0; i < B * H * W; i++) {
        has_tiles |= f.cover[i] != 0;
        has_whole |= f.cover[B * H * W + i] != 0;
    }
    for (int i = 0; i < B * H * W; i++) {
        tiled_bad += has_tiles && f.cover[i] != 1;
        whole_bad += has_whole && f.cover[B * H * W + i] != 1;
    }
    snprintf(what, sizeof what, "%s: the ranks' regions cover each pixel once (tiles %d, whole "
             "images %d)", name, has_tiles, has_whole);
    tu_check(tiled_bad || whole_bad || has_tiles != (tiles > 1) || (!has_tiles && !has_whole),
             what);
    if (tiles == 4 && R == 2) {
        snprintf(what, sizeof what, "%s: rank %d owns %d of the %d regions", name, me, n, all);
        tu_check(n >= all || n < 1, what);
    }
    hyfi_set_labels(g, y, labels, B);
    hyfi_infer(g, &l2);
    hyfi_tensor_read(g, x, back, (size_t)B * C * H * W);
    hyfi_tensor_read(g, act, act2, (size_t)B * 4 * H * W);
    snprintf(what, sizeof what, "%s: input, activation and loss bitwise as hyfi_set_input's "
             "(loss %.7f vs %.7f)", name, (double)l2, (double)l1);
    tu_check(memcmp(back, batch, (size_t)B * C * H * W * sizeof(float)) ||
                 memcmp(act1, act2, (size_t)B * 4 * H * W * sizeof(float)) ||
                 memcmp(&l1, &l2, sizeof l1),
             what);

    /* a fill failing on the last rank with regions only: every rank fails alike */
    int last = n > 0 ? me : -1;
    over_ranks(ctx, &last, 1, 1);
    f.calls = 0;
    f.fail_at = me == last ? 0 : -1;
    s = hyfi_set_input_fn(g, x, fill, &f);
    snprintf(what, sizeof what, "%s: a fill failing on rank %d fails everywhere: %s", name, last,
             hyfi_last_error());
    tu_check(s != HYFI_ERR_DATA || !strstr(hyfi_last_error(), "micro-batch"), what);
    if (me == 0 && strcmp(name, "untiled") == 0) printf("message: %s\n", hyfi_last_error());
    tu_check(hyfi_set_input_fn(g, x, NULL, NULL) != HYFI_ERR_ARG, "NULL fill refused");
    tu_check(hyfi_set_input_fn(g, y, fill, &f) != HYFI_ERR_ARG, "labels refused");
    tu_check(hyfi_input_regions(g, y, NULL, 0, &n) != HYFI_ERR_ARG, "labels have no regions");
    free(f.cover);
    free(reg);
    free(batch);
    free(back);
    free(act1);
    free(act2);
    hyfi_graph_destroy(g);
}

int main(void)
{
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU;
    hyfi_ctx *ctx;
    tu_ctx_env(&cc);
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        printf("%s\n", hyfi_last_error());
        return 1;
    }
    tu_check(hyfi_input_regions(NULL, NULL, NULL, 0, NULL) != HYFI_ERR_ARG, "NULL graph");
    const int R = hyfi_ctx_nranks(ctx);
    /* data parallel over the ranks: each rank fills its replica's micro-batches */
    one_plan(ctx, "untiled", 1, 1, 1, HYFI_SLICE_SQUARE, R);
    one_plan(ctx, "untiled 2 stages x 2 parts", 2, 2, 1, HYFI_SLICE_SQUARE, 1);
    one_plan(ctx, "square 4 tiles", 2, 1, 4, HYFI_SLICE_SQUARE, 1);
    one_plan(ctx, "vertical 4 tiles x 2 parts", 2, 2, 4, HYFI_SLICE_VERTICAL, 1);
    one_plan(ctx, "horizontal 2 tiles", 2, 1, 2, HYFI_SLICE_HORIZONTAL, 1);
    const int rc = tu_finish();
    hyfi_ctx_destroy(ctx);
    return rc;
}
