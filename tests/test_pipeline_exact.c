/* Layer, pipeline and spatial parallelism compute the single-place step.
 *
 *   test_pipeline_exact ref DIR     one process, one stage: writes the reference
 *                                   runs (per model and micro-batch count M)
 *   [mpiexec -n R] test_pipeline_exact check DIR
 *                                   every plan with at least R stages: 3 training
 *                                   steps, compared with the reference run of the
 *                                   same model and M
 *
 * Compared after 3 steps of SGD (lr 0.05, momentum 0.9, weight decay 5e-4) on
 * seeded synthetic batches: the 3 losses, every parameter gradient of step 3,
 * every parameter and running statistic. Kernels run with one thread each and
 * no core lending (HYFI_CPU_THREADS=1, HYFI_LEND_MIN_BYTES=0, set by
 * pipeline_exact.sh), so that their round-off does not depend on timing; then
 *   - plans whose gradient sums have a fixed order (deterministic plans, and
 *     M <= 2 where a + b == b + a) must equal the reference bitwise;
 *   - the others (StarPU reductions over M > 2 micro-batches, added in run-time
 *     order) within float32 round-off:
 *         |got - want| <= 1e-5 + 1e-4 |want|   (losses: 1e-6 + 1e-5 |want|)
 *     These are ResNet plans only: AmoebaNet at test size turns round-off
 *     into visible differences (its max pools route a gradient to the first of
 *     near-equal maxima; its 2x2 late layers normalise over few values), so
 *     its M = 4 plans use deterministic sums;
 *   - spatial plans against the untiled run: the tiles' batch statistics are
 *     summed tile by tile, so the forward differs at round-off; where a value
 *     sits within round-off of a kink (a ReLU at 0, a max-pool tie) it may
 *     fall on the other side in one run, which moves the gradients that flow
 *     through it by O(1) (measured: ReLU masks flipping in ResNet-8 with one
 *     image per micro-batch, 0.1% norm-wise). So: losses within 1e-6 +
 *     1e-5 |x|; gradients and weights with at most 0.5% of the entries
 *     outside 1e-5 + 1e-4 |x| and ||got - want|| <= 1e-2 ||want|| (a missing
 *     halo or a wrong statistic moves whole tile borders or channels, far
 *     beyond that). ResNet's after 3 steps; AmoebaNet's after 1 (3 for the
 *     traffic): its max pools and few-value batch norms turn one flipped kink
 *     into a 0.5% change of every gradient after it (seen at 128x128), and
 *     after 3 steps into visibly different losses (2e-5 at 64x64). Its
 *     entries may be up to 5% outside: measured, K=2 P=2 vertical, 64x64, a
 *     batch-norm output of 3.4e-7 in the first normal cell (the tiled forward
 *     differs there by up to 4.9e-6, deeper by up to 9e-5) flips its ReLU,
 *     and every gradient upstream of it (the stems) moves by ~4e-4 relative:
 *     1.4% of the entries, 3.6e-4 norm-wise; the norm bound stays 1e-2.
 *     A deeper flip moves more (AVX2-only EPYC, ResNet-8 32x32 S=4 M=4 1F1B
 *     K=2 P=4: 10.7% of the gradients, all upstream, 3.2e-3 norm-wise): the
 *     gradients may have 15% of their entries outside; the norm bounds stay.
 * On R > 1 ranks it also checks the traffic: the bytes each rank sends to each
 * other rank in steps 2 and 3 (StarPU-MPI's counts) equal twice the plan's
 * prediction per step, and for the ResNet (a chain of blocks) the prediction
 * equals the closed form: per stage boundary between ranks, the boundary
 * activation forward and its gradient back, plus each micro-batch's loss to
 * every rank and the step's health sums (2 floats each way).
 *
 * HYFI_TEST_PRECISION=bf16 runs the reference and every plan in mixed
 * precision (hyfi_train_config.precision: activations and their gradients
 * rounded to bf16 as they are written). Rounding is elementwise and
 * deterministic, so every plan that is bitwise in fp32 is bitwise in bf16,
 * and the non-tiled plans summed at run time stay within the fp32 bounds
 * above (measured: the same worst differences). Tiled plans differ: their
 * batch statistics are summed tile by tile, so a value's fp32 forward moves
 * at round-off (1e-7 relative), and where it sits that close to a bf16
 * rounding boundary its bf16 value moves by a whole unit (2^-8 = 0.4%
 * relative), which then travels downstream: every later layer sums such
 * units into values that are themselves rounded, so the flips multiply with
 * depth (measured, ResNet-8 32x32, one forward: 10 of 65,536 values differ
 * after the first batch norm, 92 after the first block's second convolution,
 * 60% in the last stage, each by one or two units). That is bf16's own noise,
 * the pattern of its roundings, not a difference of computation: the step's
 * gradient, a difference of such noisy activations, moves most; the weights,
 * which take lr x gradient, little. Measured over the tiled plans (ResNet-8
 * 32x32 after 3 steps, AmoebaNet after 1): losses within 3.6e-4 relative,
 * gradients 0.8-7.4% norm-wise, weights at most 5.2e-4 norm-wise with 0.6%
 * of the entries beyond two bf16 units. Bounds: losses 1e-6 + 2e-3 |x|;
 * gradients 0.15 norm-wise; weights 2e-3 norm-wise (tighter than fp32's 1e-2
 * for tiles) with at most 2% of the entries outside 1e-4 + 8e-3 |x| (a
 * missing halo or statistic moves whole borders and channels of the weights'
 * gradients, far beyond).
 *
 * HYFI_TEST_DEVICE=cuda (CUDA workers only: every place on the GPUs) or mixed
 * (CPU and CUDA workers, dmda choosing) runs the plans of 'check' on the GPU
 * against the CPU reference: losses within 1e-4 + 1e-3 |x|; gradients and
 * weights norm-wise within 1e-3 (tiled plans 1e-2) with at most 0.1% of the
 * entries (tiled plans: 2%, AmoebaNet's 5%) outside 1e-4 + 1e-3 |x|; the
 * recompute plans against the same plan without recompute likewise (cuDNN's
 * algorithms need not be deterministic). AmoebaNet after 1 step: measured on
 * an H100, its plans on CUDA match the CPU after 1 and 2 steps but after 3 the
 * loss differs by 0.5-1.7% (the chaos described above: cuDNN's sums round
 * differently from oneDNN's), and two CUDA runs of the same plan differ too.
 * Without a CUDA worker it exits 77. scripts/gpu-run.sh runs it on a lent GPU.
 *
 * Models: ResNet v1-8 (CIFAR, 5 layers) on 8x8 images, batch 8, and on 32x32,
 * batch 4 (spatial plans); AmoebaNet-D (3, 16) (9 layers) on 64x64, batch 8. */
#include "hyfi.h"
#include "tu_env.h"
#include "models.h"
#include "testutil.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 3

/* HYFI_TEST_PRECISION=bf16: the reference and every plan in mixed precision
 * (hyfi_train_config.precision; see the header for the tolerances). */
static hyfi_precision test_precision(void)
{
    const char *p = getenv("HYFI_TEST_PRECISION");
    return p && !strcmp(p, "bf16") ? HYFI_PRECISION_BF16 : HYFI_PRECISION_FP32;
}

typedef struct {
    const char *name;
    model_config mc;
    int batch, image;
    /* activations NCHW (hyfi_plan_config.plain_layouts) in its reference and plans: the models
     * with tiled plans (AmoebaNet included), whose tiled stages are NCHW (engine/layout.c), so
     * that tiles are compared with the untiled run of the same kernels; the others keep the
     * default layouts, the same in every plan (bitwise checks included). In bf16 a blocked
     * reference differs from NCHW kernels by float32 round-off (batch norm's sums) that bf16
     * rounding turns into whole units, which AmoebaNet's cells amplify: measured on an
     * AVX2-only EPYC, the tiled plans against a blocked reference 47% gradients norm-wise, and
     * the untiled NCHW run against the blocked one as much; against an NCHW reference 0.9%. */
    int nchw;
} model_def;

typedef struct {
    int model;     /* index into MODELS */
    int stages;
    int parts;
    hyfi_schedule schedule;
    int det;       /* deterministic gradient sums */
    int balance[4]; /* {0}: by cost */
    int K, P;      /* spatial: tiled stages, tiles */
    hyfi_slice_method slice;
    int steps;     /* 0: STEPS; fewer steps measure no traffic */
    int traffic_only; /* 3 steps for the traffic check; numbers compared by another row */
    int fused;     /* fused halos: ops per exchange */
    hyfi_gems gems;    /* replicas: GEMS copies */
    int times;         /* MASTER: pairs of copies */
    int dp;            /* data-parallel groups */
    hyfi_allreduce ar;
    hyfi_recompute rc; /* re-materialisation: also bitwise against the plan without it */
} plan_def;

#define NMODELS 4
static model_def MODELS[NMODELS];
#define AMOEBA 1 /* MODELS[1] */

/* rows without replicas leave the replica fields zero */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const plan_def PLANS[] = {
    {0, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},          /* layers only */
    {0, 2, 4, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},          /* layers + micro-batches */
    {0, 2, 4, HYFI_SCHEDULE_1F1B, 0, {2, 3}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},        /* 1F1B, explicit balance */
    {0, 2, 4, HYFI_SCHEDULE_GPIPE, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},          /* deterministic sums */
    {0, 3, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {0, 4, 4, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {0, 4, 2, HYFI_SCHEDULE_GPIPE, 0, {1, 1, 1, 2}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {1, 2, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {1, 2, 4, HYFI_SCHEDULE_1F1B, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {1, 4, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {1, 4, 1, HYFI_SCHEDULE_GPIPE, 0, {2, 2, 2, 3}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    {1, 4, 4, HYFI_SCHEDULE_GPIPE, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0},
    /* spatial */
    {2, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 0, 0},
    {2, 2, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 2, HYFI_SLICE_VERTICAL, 0, 0, 0},
    {2, 3, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 2, 4, HYFI_SLICE_HORIZONTAL, 0, 0, 0},
    {2, 4, 4, HYFI_SCHEDULE_1F1B, 1, {0}, 2, 4, HYFI_SLICE_SQUARE, 0, 0, 0},
    /* 16 and 64 tiles (64: the most a plan takes, tiles of 4x4 pixels): tasks
     * that read one buffer per tile (the batch-norm statistics combine: 4 + 16
     * or 4 + 64 buffers, past the ones a task holds in itself) */
    {2, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 16, HYFI_SLICE_VERTICAL, 0, 0, 0},
    {2, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 1, 16, HYFI_SLICE_SQUARE, 0, 0, 0},
    {2, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 1, 64, HYFI_SLICE_SQUARE, 0, 0, 0},
    /* AmoebaNet turns round-off into visible differences within 3 steps (see
     * the header): numbers after 1 step, traffic over 3 */
    {1, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 1, 0, 0},
    {1, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 1, 0},
    {1, 4, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 2, 2, HYFI_SLICE_VERTICAL, 1, 0, 0},
    {1, 4, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 2, 2, HYFI_SLICE_VERTICAL, 0, 1, 0},
    /* fused halos (one exchange for two convolutions) */
    {2, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 0, 2},
    {2, 3, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 2, 4, HYFI_SLICE_HORIZONTAL, 0, 0, 2},
    {2, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 16, HYFI_SLICE_SQUARE, 0, 0, 2},
    {1, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 1, 0, 2},
    {1, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 1, 2},
    /* replicas: compared with the one-place run of the global batch cut into
     * parts x replicas micro-batches */
    {0, 1, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 2, HYFI_ALLREDUCE_RING},                                      /* data parallel */
    {0, 1, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 4, HYFI_ALLREDUCE_RING},                                      /* 4 replicas */
    {0, 1, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 4, HYFI_ALLREDUCE_TREE},
    {0, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_MAST, 0, 1, HYFI_ALLREDUCE_TREE},                                      /* GEMS MAST */
    {0, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_MASTER, 2, 1, HYFI_ALLREDUCE_RING},                                    /* MASTER x 2 */
    {0, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_MAST, 0, 2, HYFI_ALLREDUCE_AUTO},                                      /* GEMS + DP */
    /* AmoebaNet: numbers after 1 step (see the header), traffic over 3 */
    {1, 2, 2, HYFI_SCHEDULE_GPIPE, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 1, 0, 0,
     HYFI_GEMS_MAST, 0, 1, HYFI_ALLREDUCE_AUTO},
    {1, 2, 2, HYFI_SCHEDULE_GPIPE, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 1, 0,
     HYFI_GEMS_MAST, 0, 1, HYFI_ALLREDUCE_AUTO},
    /* all five: 2 tiles x 2 stages x 2 micro-batches x GEMS x 2 data-parallel */
    {3, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 1, 2, HYFI_SLICE_VERTICAL, 0, 0, 0,
     HYFI_GEMS_MAST, 0, 2, HYFI_ALLREDUCE_AUTO},
    {3, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 0, 2,
     HYFI_GEMS_MAST, 0, 2, HYFI_ALLREDUCE_RING},
    /* re-materialisation: each also bitwise against the same plan without it
     * (gradient sums in a fixed order: deterministic or at most 2 micro-batches) */
    {0, 1, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_LAYER},               /* one place */
    {0, 2, 4, HYFI_SCHEDULE_GPIPE, 1, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_STAGE},
    {0, 3, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_LAYER},
    {1, 2, 2, HYFI_SCHEDULE_GPIPE, 0, {0}, 0, 0, HYFI_SLICE_SQUARE, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_LAYER},
    {2, 3, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 2, 4, HYFI_SLICE_HORIZONTAL, 0, 0, 0,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_LAYER},
    {2, 2, 1, HYFI_SCHEDULE_GPIPE, 0, {0}, 1, 4, HYFI_SLICE_SQUARE, 0, 0, 2,
     HYFI_GEMS_NONE, 0, 0, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_STAGE},                /* fused */
    {3, 2, 2, HYFI_SCHEDULE_1F1B, 0, {0}, 1, 2, HYFI_SLICE_VERTICAL, 0, 0, 0,
     HYFI_GEMS_MAST, 0, 2, HYFI_ALLREDUCE_AUTO, HYFI_RECOMPUTE_LAYER},                /* all five */
};
#pragma GCC diagnostic pop
#define NPLANS ((int)(sizeof PLANS / sizeof *PLANS))

typedef struct {
    int steps;
    float loss[STEPS];
    float *grad, *weight; /* concatenated over parameters / parameters and state */
    size_t ngrad, nweight;
    size_t sent[2][64];   /* bytes sent to each rank before step 2 and after step 3 */
} run_result;

static void init_models(void)
{
    model_config r = model_config_default();
    r.kind = MODEL_RESNET;
    r.depth = 8;
    r.resnet_version = 1;
    r.num_classes = 10;
    MODELS[0] = (model_def){"resnet8", r, 8, 8, 0};
    model_config a = model_config_default();
    a.kind = MODEL_AMOEBANET;
    a.num_layers = 3;
    a.num_filters = 16;
    a.num_classes = 10;
    MODELS[1] = (model_def){"amoebanet3x16", a, 8, 64, 1};
    MODELS[2] = (model_def){"resnet8_32px", r, 4, 32, 1};
    MODELS[3] = (model_def){"resnet8_32px_b8", r, 8, 32, 1};
}

static int plan_reps(const plan_def *pd)
{
    const int copies = pd->gems == HYFI_GEMS_NONE   ? 1
                       : pd->gems == HYFI_GEMS_MAST ? 2
                                                    : 2 * (pd->times > 1 ? pd->times : 1);
    return copies * (pd->dp > 1 ? pd->dp : 1);
}

/* The micro-batches of the one-place reference: parts x replicas. */
static int ref_parts(const plan_def *pd) { return pd->parts * plan_reps(pd); }

/* The plan can run on R ranks: every rank gets a place. */
static int plan_fits(const plan_def *pd, int R)
{
    const int places = pd->stages - pd->K + pd->K * (pd->P > 1 ? pd->P : 1);
    const int groups = pd->dp > 1 ? pd->dp : 1;
    if (R % groups && groups % R) return 0;
    return (R >= groups ? R / groups : 1) <= places;
}

static void batch_data(const model_def *m, int step, float *x, int32_t *y)
{
    uint64_t st = 1000 + (uint64_t)step;
    const size_t n = (size_t)m->batch * 3 * m->image * m->image;
    tu_fill(x, n, &st, -1.f, 1.f);
    for (int i = 0; i < m->batch; i++) y[i] = tu_randint(&st, 0, m->mc.num_classes - 1);
}

/* Train one plan for res->steps steps; fill res. Returns 0, or -1 (message printed). */
static int run_plan(hyfi_ctx *ctx, const model_def *m, const hyfi_plan_config *plan,
                    run_result *res, hyfi_graph **gout)
{
    hyfi_graph *g;
    char err[512];
    hyfi_plan_config pc = *plan;
    pc.plain_layouts = m->nchw;
    hyfi_graph_create(ctx, 7, &g);
    hyfi_tensor *x = hyfi_input(g, "image", m->batch, 3, m->image, m->image);
    hyfi_tensor *y = hyfi_labels(g, "label", m->batch);
    hyfi_tensor *logits = hyfi_model_build(g, &m->mc, x, err, sizeof err);
    hyfi_tensor *loss = logits ? hyfi_softmax_cross_entropy(g, "loss", logits, y) : NULL;
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f,
                            .precision = test_precision()};
    if (!loss || hyfi_graph_set_plan(g, &pc) != HYFI_OK ||
        hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
        printf("%s: build/compile failed: %s %s\n", m->name, err, hyfi_graph_error(g));
        hyfi_graph_destroy(g);
        return -1;
    }
    const size_t nx = (size_t)m->batch * 3 * m->image * m->image;
    float *xb = malloc(nx * sizeof *xb);
    int32_t *yb = malloc((size_t)m->batch * sizeof *yb);
    const int R = hyfi_ctx_nranks(ctx);
    int rc = 0;
    for (int s = 0; s < res->steps && !rc; s++) {
        if (s == 1 && R > 1) hyfi_ctx_comm_bytes(ctx, res->sent[0], R);
        batch_data(m, s, xb, yb);
        if (hyfi_set_input(g, x, xb, nx) != HYFI_OK ||
            hyfi_set_labels(g, y, yb, (size_t)m->batch) != HYFI_OK ||
            hyfi_train_step(g, &res->loss[s]) != HYFI_OK) {
            printf("%s: step %d failed: %s\n", m->name, s + 1, hyfi_last_error());
            rc = -1;
        }
    }
    if (R > 1) hyfi_ctx_comm_bytes(ctx, res->sent[1], R);
    free(xb);
    free(yb);
    /* gradients of step 3 and the weights after it (collective reads) */
    res->ngrad = hyfi_param_numel(g);
    res->grad = malloc(res->ngrad * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < hyfi_param_count(g) && !rc; i++) {
        hyfi_tensor *p = hyfi_param(g, i);
        if (hyfi_grad_read(g, p, res->grad + off, hyfi_tensor_numel(p)) != HYFI_OK) {
            printf("%s: reading the gradient of %s failed: %s\n", m->name, hyfi_tensor_name(p),
                   hyfi_last_error());
            rc = -1;
        }
        off += hyfi_tensor_numel(p);
    }
    res->nweight = 0;
    for (int i = 0; i < hyfi_graph_op_count(g); i++) {
        hyfi_op_info oi;
        hyfi_graph_op_info(g, i, &oi);
        if (strcmp(oi.kind, "batchnorm") == 0) res->nweight += 2 * (size_t)oi.out_dims[1];
    }
    res->nweight += res->ngrad;
    res->weight = malloc(res->nweight * sizeof(float));
    off = 0;
    for (int i = 0; i < hyfi_param_count(g) && !rc; i++) {
        hyfi_tensor *p = hyfi_param(g, i);
        hyfi_tensor_read(g, p, res->weight + off, hyfi_tensor_numel(p));
        off += hyfi_tensor_numel(p);
    }
    for (int i = 0; i < hyfi_graph_op_count(g) && !rc; i++) {
        hyfi_op_info oi;
        hyfi_graph_op_info(g, i, &oi);
        if (strcmp(oi.kind, "batchnorm") != 0) continue;
        char nm[256];
        for (int k = 0; k < 2; k++) {
            snprintf(nm, sizeof nm, "%s.%s", oi.name, k ? "running_var" : "running_mean");
            hyfi_tensor *t = hyfi_tensor_find(g, nm);
            hyfi_tensor_read(g, t, res->weight + off, hyfi_tensor_numel(t));
            off += hyfi_tensor_numel(t);
        }
    }
    if (gout) *gout = g;
    else hyfi_graph_destroy(g);
    return rc;
}

static void ref_path(char *buf, size_t len, const char *dir, const model_def *m, int parts,
                     int det, int steps)
{
    snprintf(buf, len, "%s/ref_%s_p%d%s_s%d.bin", dir, m->name, parts, det ? "_det" : "", steps);
}

static int save_ref(const char *path, const run_result *r)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(r->loss, sizeof r->loss, 1, f) == 1 &&
             fwrite(&r->ngrad, sizeof r->ngrad, 1, f) == 1 &&
             fwrite(r->grad, sizeof(float), r->ngrad, f) == r->ngrad &&
             fwrite(&r->nweight, sizeof r->nweight, 1, f) == 1 &&
             fwrite(r->weight, sizeof(float), r->nweight, f) == r->nweight;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int load_ref(const char *path, run_result *r)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int ok = fread(r->loss, sizeof r->loss, 1, f) == 1 && fread(&r->ngrad, sizeof r->ngrad, 1, f) == 1;
    if (ok) {
        r->grad = malloc(r->ngrad * sizeof(float));
        ok = fread(r->grad, sizeof(float), r->ngrad, f) == r->ngrad &&
             fread(&r->nweight, sizeof r->nweight, 1, f) == 1;
    }
    if (ok) {
        r->weight = malloc(r->nweight * sizeof(float));
        ok = fread(r->weight, sizeof(float), r->nweight, f) == r->nweight;
    }
    fclose(f);
    return ok ? 0 : -1;
}

/* For tiled plans: at most a fraction `frac` of the entries outside atol +
 * rtol |want|, and ||got - want|| <= nrtol ||want||. Records the worst
 * fraction and norm ratio. */
static int compare_kinks(const char *what, const float *got, const float *want, size_t n,
                         double atol, double rtol, double frac, double nrtol,
                         double *worst_frac, double *worst_ratio)
{
    double d2 = 0, w2 = 0;
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        d2 += d * d;
        w2 += (double)want[i] * want[i];
        out += !(fabs(d) <= atol + rtol * fabs((double)want[i]));
    }
    const double r = w2 > 0 ? sqrt(d2 / w2) : sqrt(d2), f = n ? (double)out / (double)n : 0;
    if (r > *worst_ratio) *worst_ratio = r;
    if (f > *worst_frac) *worst_frac = f;
    if (!(r <= nrtol) || !(f <= frac)) {
        printf("  %s: %zu of %zu entries (%.3g%%) outside tolerance, ||diff|| / ||want|| = "
               "%.3g\n", what, out, n, 100 * f, r);
        return 1;
    }
    return 0;
}

static void free_result(run_result *r)
{
    free(r->grad);
    free(r->weight);
}

static int do_ref(const char *dir)
{
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = 0};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    int fails = 0;
    for (int mi = 0; mi < NMODELS; mi++)
        for (int parts = 1; parts <= 8; parts *= 2)
            for (int k = 0; k < 4; k++) {
                const int det = k & 1, steps = k & 2 ? 1 : STEPS;
                /* only the references some plan compares with */
                int used = 0;
                for (int p = 0; p < NPLANS; p++)
                    used |= PLANS[p].model == mi && ref_parts(&PLANS[p]) == parts &&
                            PLANS[p].det == det &&
                            ((PLANS[p].steps ? PLANS[p].steps : STEPS) == steps ||
                             (mi == AMOEBA && steps == 1)); /* HYFI_TEST_DEVICE: 1 step */
                if (!used) continue;
                run_result r = {.steps = steps};
                hyfi_plan_config plan = {.stages = 1, .parts = parts, .deterministic = det};
                char path[1024];
                ref_path(path, sizeof path, dir, &MODELS[mi], parts, det, steps);
                if (run_plan(ctx, &MODELS[mi], &plan, &r, NULL) || save_ref(path, &r)) {
                    printf("reference %s M=%d failed\n", MODELS[mi].name, parts);
                    fails++;
                } else {
                    printf("reference %s M=%d%s, %d steps: losses %.6f ... %.6f\n",
                           MODELS[mi].name, parts, det ? " (deterministic)" : "", steps,
                           r.loss[0], r.loss[steps - 1]);
                }
                free_result(&r);
            }
    hyfi_ctx_destroy(ctx);
    return fails ? 1 : 0;
}

/* Closed-form traffic of a chain (ResNet): per stage boundary on different
 * ranks, the activation leaving the stage goes forward and its gradient comes
 * back; each micro-batch's loss goes from the last stage's rank to every rank. */
static size_t chain_bytes(hyfi_graph *g, int from, int to, int R)
{
    const int S = hyfi_plan_stage_count(g), M = hyfi_plan_parts(g);
    size_t b = 0;
    /* the losses: M floats each way on an edge of the ranks' binomial tree
     * (r and r - lowest bit of r) */
    if ((to > 0 && from == to - (to & -to)) || (from > 0 && to == from - (from & -from)))
        b += (size_t)M * sizeof(float);
    for (int s = 0; s + 1 < S; s++) {
        hyfi_stage_info a, c;
        hyfi_plan_stage(g, s, &a);
        hyfi_plan_stage(g, s + 1, &c);
        if (a.rank == c.rank) continue;
        /* the output of the stage's last op */
        size_t act = 0;
        for (int i = 0; i < hyfi_graph_op_count(g); i++) {
            hyfi_op_info oi;
            hyfi_graph_op_info(g, i, &oi);
            if (oi.stage == s) act = oi.act_bytes;
        }
        if (from == a.rank && to == c.rank) b += act;
        if (from == c.rank && to == a.rank) b += act;
    }
    /* the step's health sums (2 floats): from every other rank holding
     * parameters to the first stage's rank, the total from it to every rank */
    hyfi_stage_info first;
    hyfi_plan_stage(g, 0, &first);
    int holds = 0;
    for (int s = 0; s < S; s++) {
        hyfi_stage_info a;
        hyfi_plan_stage(g, s, &a);
        holds |= a.rank == from && a.params > 0;
    }
    if (to != from && to == first.rank && holds) b += 2 * sizeof(float);
    if (to != from && from == first.rank) b += 2 * sizeof(float);
    (void)R;
    return b;
}

/* Plans that cannot work are refused at compile with a message naming the fix. */
static void check_errors(hyfi_ctx *ctx)
{
    static const int b22[] = {2, 2}, b50[] = {5, 0};
    const struct {
        hyfi_plan_config plan;
        const char *want;
    } BAD[] = {
        {{.stages = 9}, "use at most 5 stages"},
        {{.stages = 2, .balance = b22}, "add up to 5"},
        {{.stages = 2, .balance = b50}, "needs at least one"},
        {{.parts = 3}, "multiple of 3"},
    };
    for (size_t k = 0; k < sizeof BAD / sizeof *BAD; k++) {
        const model_def *m = &MODELS[0];
        hyfi_graph *g;
        char err[256], what[128];
        hyfi_graph_create(ctx, 7, &g);
        hyfi_tensor *x = hyfi_input(g, "image", m->batch, 3, m->image, m->image);
        hyfi_tensor *y = hyfi_labels(g, "label", m->batch);
        hyfi_tensor *loss = hyfi_softmax_cross_entropy(
            g, "loss", hyfi_model_build(g, &m->mc, x, err, sizeof err), y);
        hyfi_graph_set_plan(g, &BAD[k].plan);
        hyfi_status st = hyfi_graph_compile(g, loss, NULL);
        snprintf(what, sizeof what, "bad plan %zu refused with \"%s\"", k, BAD[k].want);
        if (hyfi_ctx_rank(ctx) == 0) printf("%s: %s\n", what, hyfi_graph_error(g));
        tu_check(st == HYFI_OK || !strstr(hyfi_graph_error(g), BAD[k].want), what);
        hyfi_graph_destroy(g);
    }
    hyfi_graph *g;
    hyfi_graph_create(ctx, 7, &g);
    tu_check(hyfi_graph_set_plan(g, &(hyfi_plan_config){.schedule = (hyfi_schedule)7}) !=
                 HYFI_ERR_ARG, "unknown schedule refused");
    hyfi_graph_destroy(g);
}

static int do_check(const char *dir, int use_mpi)
{
    /* HYFI_TEST_DEVICE: the plans on CUDA workers only (cuda) or on CPU and
     * CUDA workers together (mixed), against the CPU reference */
    const char *tdev = getenv("HYFI_TEST_DEVICE");
    const int on_gpu = tdev && *tdev && strcmp(tdev, "cpu");
    if (on_gpu && strcmp(tdev, "cuda") && strcmp(tdev, "mixed")) {
        printf("HYFI_TEST_DEVICE=%s: use cpu, cuda or mixed\n", tdev);
        return 2;
    }
    hyfi_ctx_config cfg = {.device = !on_gpu                ? HYFI_DEVICE_CPU
                                     : !strcmp(tdev, "cuda") ? HYFI_DEVICE_CUDA
                                                             : HYFI_DEVICE_AUTO,
                           .ncpus = -1, .ncuda = -1, .mpi = use_mpi, .comm_stats = 1};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    const hyfi_status cs = hyfi_ctx_create(&cfg, &ctx);
    if (on_gpu && (cs == HYFI_ERR_UNSUPPORTED || (cs == HYFI_OK && !hyfi_ctx_ncuda_workers(ctx)))) {
        printf("skip: HYFI_TEST_DEVICE=%s and no CUDA worker (%s)\n", tdev,
               cs == HYFI_OK ? "none found" : hyfi_last_error());
        if (cs == HYFI_OK) hyfi_ctx_destroy(ctx);
        return 77;
    }
    if (cs != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    if (on_gpu && hyfi_ctx_rank(ctx) == 0)
        printf("plans on %s: %d CUDA worker%s%s, against the CPU reference within the CUDA "
               "tolerance\n", tdev, hyfi_ctx_ncuda_workers(ctx),
               hyfi_ctx_ncuda_workers(ctx) > 1 ? "s" : "",
               strcmp(tdev, "mixed") ? "" : " and the CPU workers");
    const int rank = hyfi_ctx_rank(ctx), R = hyfi_ctx_nranks(ctx);
    if (R == 1) check_errors(ctx);
    double worst_loss = 0, worst_grad = 0, worst_w = 0, worst_exact = 0, worst_norm = 0;
    double worst_frac = 0;
    int nplans = 0;
    for (int k = 0; k < NPLANS; k++) {
        const plan_def *pd = &PLANS[k];
        if (!plan_fits(pd, R)) continue;
        const model_def *m = &MODELS[pd->model];
        const char *filter = getenv("HYFI_TEST_FILTER");
        hyfi_plan_config plan = {.stages = pd->stages, .parts = pd->parts,
                                 .schedule = pd->schedule, .deterministic = pd->det,
                                 .balance = pd->balance[0] ? pd->balance : NULL,
                                 .spatial_stages = pd->K, .spatial_parts = pd->P,
                                 .slice = pd->slice, .fused_layers = pd->fused,
                                 .gems = pd->gems, .replications = pd->times,
                                 .data_parallel = pd->dp, .allreduce = pd->ar,
                                 .recompute = pd->rc};
        const int reps = plan_reps(pd);
        /* Bitwise where the gradient sums have a fixed order: deterministic
         * plans, and at most two micro-batches (a + b == b + a). */
        const int exact = !on_gpu && !pd->K && reps == 1 && (pd->det || pd->parts <= 2);
        char what[160], path[1024];
        char sp[48] = "";
        if (pd->K)
            snprintf(sp, sizeof sp, " tiled K=%d P=%d %s%s", pd->K, pd->P,
                     pd->slice == HYFI_SLICE_SQUARE ? "square"
                     : pd->slice == HYFI_SLICE_VERTICAL ? "vertical" : "horizontal",
                     pd->fused > 1 ? " fused" : "");
        char rp[80] = "";
        if (reps > 1)
            snprintf(rp, sizeof rp, "%s%s%s%.0d (%d replicas, %s)",
                     pd->gems == HYFI_GEMS_MAST     ? " GEMS MAST"
                     : pd->gems == HYFI_GEMS_MASTER ? " GEMS MASTER"
                                                    : "",
                     pd->gems == HYFI_GEMS_MASTER && pd->times > 1 ? " x2" : "",
                     pd->dp > 1 ? " data-parallel " : "", pd->dp > 1 ? pd->dp : 0, reps,
                     pd->ar == HYFI_ALLREDUCE_RING   ? "ring"
                     : pd->ar == HYFI_ALLREDUCE_TREE ? "tree"
                                                     : "auto");
        snprintf(what, sizeof what, "%s S=%d M=%d %s%s%s%s%s%s on %d rank%s%s", m->name,
                 pd->stages, pd->parts, pd->schedule == HYFI_SCHEDULE_1F1B ? "1f1b" : "gpipe",
                 plan.balance ? " (balance given)" : "", pd->det ? " deterministic" : "", sp, rp,
                 pd->rc == HYFI_RECOMPUTE_STAGE   ? " recompute stage"
                 : pd->rc == HYFI_RECOMPUTE_LAYER ? " recompute layer"
                                                  : "",
                 R, R > 1 ? "s" : "", use_mpi ? "" : " (no MPI)");
        if (filter && !strstr(what, filter)) continue;
        /* AmoebaNet on the GPU: 1 step (see the header) */
        const int steps = on_gpu && pd->model == AMOEBA ? 1 : pd->steps ? pd->steps : STEPS;
        run_result got = {.steps = steps}, want = {.steps = steps};
        hyfi_graph *g = NULL;
        ref_path(path, sizeof path, dir, m, ref_parts(pd), pd->det, steps);
        if (load_ref(path, &want)) {
            printf("%s: cannot read the reference %s (run 'ref' first)\n", what, path);
            tu_check(1, what);
            continue;
        }
        if (run_plan(ctx, m, &plan, &got, &g)) {
            tu_check(1, what);
            free_result(&got);
            free_result(&want);
            continue;
        }
        nplans++;
        int bad = 0;
        if (pd->rc) {
            /* re-materialisation: bitwise the same plan without it */
            hyfi_plan_config p0 = plan;
            p0.recompute = HYFI_RECOMPUTE_NONE;
            run_result base = {.steps = steps};
            double worst = 0;
            int rbad = run_plan(ctx, m, &p0, &base, NULL) != 0;
            if (!rbad && on_gpu) {
                /* other workers may take the recomputed forwards: CUDA tolerance */
                double wf = 0, wn = 0;
                rbad += tu_count_outside("loss (no recompute)", got.loss, base.loss, steps, 1e-4,
                                         1e-3, &worst);
                rbad += compare_kinks("grad (no recompute)", got.grad, base.grad, got.ngrad, 1e-4,
                                      1e-3, 1e-3, 1e-3, &wf, &wn);
                rbad += compare_kinks("weight (no recompute)", got.weight, base.weight,
                                      got.nweight, 1e-4, 1e-3, 1e-3, 1e-3, &wf, &wn);
            } else if (!rbad) {
                rbad += tu_count_outside("loss (no recompute)", got.loss, base.loss, steps, 0,
                                         0, &worst);
                rbad += tu_count_outside("grad (no recompute)", got.grad, base.grad, got.ngrad,
                                         0, 0, &worst);
                rbad += tu_count_outside("weight (no recompute)", got.weight, base.weight,
                                         got.nweight, 0, 0, &worst);
            }
            if (rank == 0)
                printf("%s: against the plan without recompute: %s\n", what,
                       rbad ? "MISMATCH" : on_gpu ? "within tolerance" : "bitwise");
            bad += rbad;
            free_result(&base);
        }
        if (!pd->traffic_only) {
            const double k = exact ? 0 : 1;
            double *wl = exact ? &worst_exact : &worst_loss, *wg = exact ? &worst_exact : &worst_grad;
            double *ww = exact ? &worst_exact : &worst_w;
            /* bf16 tiles: see the header */
            const int bft = test_precision() == HYFI_PRECISION_BF16 && pd->K;
            const double latol = on_gpu ? 1e-4 : 1e-6 * k,
                         lrtol = on_gpu ? 1e-3 : bft ? 2e-3 : 1e-5 * k;
            bad += tu_count_outside("loss", got.loss, want.loss, got.steps, latol, lrtol, wl);
            bad += got.ngrad != want.ngrad || got.nweight != want.nweight;
            if (!bad && on_gpu) {
                /* the CUDA tolerance (cuDNN's algorithms sum in other orders), norm-wise
                 * with a few entries allowed out; tiles as on the CPU, 10x wider */
                const double frac = pd->K ? (pd->model == AMOEBA ? 5e-2 : 2e-2) : 1e-3;
                const double nrtol = pd->K ? 1e-2 : 1e-3;
                bad += compare_kinks("grad", got.grad, want.grad, got.ngrad, 1e-4, 1e-3, frac,
                                     nrtol, &worst_frac, &worst_norm);
                bad += compare_kinks("weight", got.weight, want.weight, got.nweight, 1e-4, 1e-3,
                                     frac, nrtol, &worst_frac, &worst_norm);
            } else if (!bad && pd->K) {
                /* tiles: a few entries may sit at a kink (see the header; a flip moves
                 * every gradient upstream of it: gfrac); in bf16 at a rounding
                 * boundary too: two bf16 units per entry, norm-wise 3e-2 */
                const double frac = pd->model == 1 ? 5e-2 : 5e-3;
                const double gfrac = 0.15;
                const double eatol = bft ? 1e-4 : 1e-5, ertol = bft ? 8e-3 : 1e-4;
                double gf = 0, gn = 0, wf = 0, wn = 0;
                bad += compare_kinks("grad", got.grad, want.grad, got.ngrad, eatol, ertol,
                                     bft ? 1.0 : gfrac, bft ? 0.15 : 1e-2, &gf, &gn);
                bad += compare_kinks("weight", got.weight, want.weight, got.nweight, eatol,
                                     ertol, bft ? 2e-2 : frac, bft ? 2e-3 : 1e-2, &wf, &wn);
                if (bft && rank == 0)
                    printf("  bf16 tiles: grad %.3g norm-wise, %.3g%% outside; weight %.3g "
                           "norm-wise, %.3g%% outside\n", gn, 100 * gf, wn, 100 * wf);
                if (gf > worst_frac && !bft) worst_frac = gf; /* (bf16: the weights' only) */
                if (wf > worst_frac) worst_frac = wf;
                if (gn > worst_norm) worst_norm = gn;
                if (wn > worst_norm) worst_norm = wn;
            } else if (!bad) {
                bad += tu_count_outside("grad", got.grad, want.grad, got.ngrad, 1e-5 * k,
                                        1e-4 * k, wg);
                bad += tu_count_outside("weight", got.weight, want.weight, got.nweight,
                                        1e-5 * k, 1e-4 * k, ww);
            }
            if (rank == 0)
                printf("%s, %d step%s: losses %.6f .. %.6f (reference %.6f .. %.6f)%s%s\n", what,
                       steps, steps > 1 ? "s" : "", got.loss[0], got.loss[steps - 1], want.loss[0],
                       want.loss[steps - 1], exact ? ", bitwise" : ", within tolerance",
                       bad ? " MISMATCH" : "");
            tu_check(bad, what);
        }
        if (R > 1 && steps >= 3) {
            /* traffic of steps 2 and 3 vs the prediction */
            int tbad = 0;
            for (int to = 0; to < R; to++) {
                const size_t meas = got.sent[1][to] - got.sent[0][to];
                const size_t pred = hyfi_plan_step_bytes(g, rank, to);
                const size_t closed =
                    pd->model == 0 && reps == 1 ? chain_bytes(g, rank, to, R) : pred;
                if (meas != 2 * pred || pred != closed) {
                    printf("  rank %d -> %d: %zu bytes sent in 2 steps, predicted 2 x %zu%s%zu\n",
                           rank, to, meas, pred,
                           pd->model == 0 && reps == 1 ? ", closed form " : ", ", closed);
                    tbad++;
                }
                if (rank == 0 && to == 1)
                    printf("  rank 0 -> 1: %zu bytes per step measured, %zu predicted\n",
                           meas / 2, pred);
            }
            if (pd->K) {
                /* only strips move between tiles: the walk's halo part is the volume the
                 * tile geometry gives */
                /* the ranks' own rows, summed over the ranks by the library */
                const size_t halo = hyfi_plan_step_total_halo_bytes(g);
                if (halo != hyfi_plan_halo_volume(g)) {
                    printf("  halo bytes per step: walk %zu, geometry %zu\n", halo,
                           hyfi_plan_halo_volume(g));
                    tbad++;
                } else if (rank == 0) {
                    printf("  halo strips between ranks: %zu bytes per step (walk = geometry)\n",
                           halo);
                }
            }
            snprintf(what + strlen(what), sizeof what - strlen(what), ": traffic");
            tu_check(tbad, what);
        }
        hyfi_graph_destroy(g);
        free_result(&got);
        free_result(&want);
    }
    if (rank == 0)
        printf("%d plans on %d rank%s: bitwise plans worst |diff| %.3g; others: loss %.3g, "
               "gradients %.3g, weights %.3g; %s: worst ||diff|| / ||reference|| %.3g, "
               "entries outside %s %.3g%%\n",
               nplans, R, R > 1 ? "s" : "", worst_exact, worst_loss, worst_grad, worst_w,
               on_gpu ? "all (CUDA)" : "tiled", worst_norm,
               on_gpu ? "1e-4 + 1e-3|x|"
               : test_precision() == HYFI_PRECISION_BF16 ? "1e-4 + 8e-3|x| (bf16)"
                                                          : "1e-5 + 1e-4|x|",
               100 * worst_frac);
    tu_check(nplans == 0, "at least one plan ran");
    hyfi_ctx_destroy(ctx);
    return tu_finish();
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "ref") && strcmp(argv[1], "check") &&
                     strcmp(argv[1], "check-nompi"))) {
        fprintf(stderr, "usage: %s ref|check|check-nompi DIR\n", argv[0]);
        return 2;
    }
    init_models();
    if (!strcmp(argv[1], "ref")) return do_ref(argv[2]);
    return do_check(argv[2], strcmp(argv[1], "check") == 0 ? -1 : 0);
}
