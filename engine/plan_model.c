/* The predicted step time of a plan on a machine, for the automatic plans
 * (plan_search.c). Pure arithmetic over the graph and a plan built by
 * hyfi_plan_estimate: no StarPU call, no task.
 *
 * The model (docs/user-guide.md, "Automatic plans"):
 *   - a task takes a + b x flops + c x bytes seconds plus a run-time cost per
 *     task: the analytic fits of perfmodels/ (the same lines the simulation
 *     uses, HYFI_SIM_ANALYTIC), with each task's FLOPs as opdef.c counts them
 *     and the bytes of its buffers; a tile's task covers its share of the
 *     output and reads its assembled input (own tile plus halo);
 *   - a place runs its stage's tasks one after the other; a GPU runs its
 *     places, a CPU rank all of its places, one at a time (their sum);
 *   - a step is the longest of: the pipeline's critical path (the stages'
 *     forward + backward per micro-batch, summed, plus (M - 1) times the
 *     slowest: the bubble of GPipe and 1F1B alike), and the busiest device's
 *     work; then each stage's all-reduce, started with its last micro-batch's
 *     backward and sent bucket by bucket (ring or tree formulas), and the
 *     update;
 *   - on each replica's devices, the small tasks of the step's end across
 *     replicas (reduce_tasks: the buckets' packing, chunks and merges, the
 *     running statistics' saves, packs and merges), which at batch 1 per
 *     replica on 32 H100 take as long as the kernels; they wait for their
 *     stage's last backward, so each stage's come after it on its device
 *     (not hidden in the pipeline's bubble by the busiest device's sum);
 *   - on the critical path: halo strips (latency + bytes / bandwidth, per tile,
 *     forward and back), the batch-norm statistics of tiled stages (two
 *     messages each way), activations between stages and tiles gathered for
 *     untiled stages, and, on GPUs, the input images from the host.
 * Blind spots (none is modelled): kernels slower on small shapes than the
 *     fit says (and faster in cache), StarPU's scheduling and its MPI
 *     progression sharing cores with the workers, contention on shared links
 *     and memory bandwidth, overlap of communication with other places'
 *     compute beyond the pipeline, the extra parallelism of several CPU workers
 *     on independent tasks, the fusions' exact savings, the tiles' partial
 *     weight gradients crossing ranks, data loading. */
#include "plan_model.h"
#include "spatial_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const pm_symbol[PM_COUNT] = {
    [PM_CONV_F] = "hyfi_conv2d_forward", [PM_CONV_BD] = "hyfi_conv2d_backward_data",
    [PM_CONV_BW] = "hyfi_conv2d_backward_weight", [PM_BN_F] = "hyfi_batchnorm_forward_train",
    [PM_BN_B] = "hyfi_batchnorm_backward", [PM_RELU_F] = "hyfi_relu_forward",
    [PM_RELU_B] = "hyfi_relu_backward", [PM_ADD_F] = "hyfi_add_forward",
    [PM_MAXPOOL_F] = "hyfi_maxpool_forward", [PM_MAXPOOL_B] = "hyfi_maxpool_backward",
    [PM_AVGPOOL_F] = "hyfi_avgpool_forward", [PM_AVGPOOL_B] = "hyfi_avgpool_backward",
    [PM_GAP_F] = "hyfi_gap_forward", [PM_GAP_B] = "hyfi_gap_backward",
    [PM_CONCAT_F] = "hyfi_concat_forward", [PM_CONCAT_B] = "hyfi_concat_backward",
    [PM_FC_F] = "hyfi_fc_forward", [PM_FC_BD] = "hyfi_fc_backward_data",
    [PM_FC_BW] = "hyfi_fc_backward_weight", [PM_XENT_F] = "hyfi_xent_forward",
    [PM_XENT_B] = "hyfi_xent_backward", [PM_SGD] = "hyfi_sgd_update",
    [PM_ACC] = "hyfi_accumulate", [PM_BN_STATS] = "hyfi_bn_stats",
    [PM_BN_COMBINE] = "hyfi_bn_combine", [PM_BN_BWD_STATS] = "hyfi_bn_bwd_stats",
    [PM_BN_BWD_COMBINE] = "hyfi_bn_bwd_combine", [PM_BN_BWD_APPLY] = "hyfi_bn_bwd_apply",
    [PM_TILE_ASSEMBLE] = "hyfi_tile_assemble", [PM_COPY_SLICE] = "hyfi_copy_slice",
};

/* perfmodels/analytic-epyc2-r1.txt: one rank of 2 AMD EPYC cores (us, us/flop,
 * us/byte), fitted by bench/fit_perfmodels.py. */
static const double cpu_fit[PM_COUNT][3] = {
    [PM_CONV_F] = {5.16747, 4.49006e-06, 6.4603e-05},
    [PM_CONV_BD] = {3.46192, 3.79452e-06, 0.000111059},
    [PM_CONV_BW] = {6.57496, 4.13182e-06, 7.83684e-05},
    [PM_BN_F] = {0, 0, 5.72194e-05}, [PM_BN_B] = {0, 8.47154e-05, 0},
    [PM_RELU_F] = {4.12224, 0, 1.04622e-05}, [PM_RELU_B] = {20.6767, 1.50868e-05, 0},
    [PM_ADD_F] = {2.58357, 0.000247859, 0},
    [PM_MAXPOOL_F] = {0.617964, 0.000284428, 7.21343e-05},
    [PM_MAXPOOL_B] = {0.742699, 0.000451908, 6.13477e-05},
    [PM_AVGPOOL_F] = {0.659821, 0, 0.000620667}, [PM_AVGPOOL_B] = {0.887333, 0, 0.000641872},
    [PM_GAP_F] = {0.329488, 0.000413843, 0}, [PM_GAP_B] = {1.14953, 6.5629e-05, 0},
    [PM_CONCAT_F] = {0.483912, 0, 7.15472e-06}, [PM_CONCAT_B] = {0.439687, 0, 4.31066e-06},
    [PM_FC_F] = {0, 0.00209132, 0}, [PM_FC_BD] = {0, 0.000273529, 0.00196026},
    [PM_FC_BW] = {4.42986, 0, 0.000272456},
    [PM_XENT_F] = {0.436581, 0.0104338, 0.0023655}, [PM_XENT_B] = {0.646115, 0, 0.00043145},
    [PM_SGD] = {0.556312, 0, 9.58971e-05}, [PM_ACC] = {0.889451, 0, 1.72993e-05},
    [PM_BN_STATS] = {0, 3.92973e-05, 0}, [PM_BN_COMBINE] = {0.268034, 0, 0.000612521},
    [PM_BN_BWD_STATS] = {1.79341, 0, 3.61587e-05},
    [PM_BN_BWD_COMBINE] = {0.308525, 0, 0.000680944},
    [PM_BN_BWD_APPLY] = {0.682541, 0, 1.63937e-05}, [PM_TILE_ASSEMBLE] = {1.6983, 0, 0},
    [PM_COPY_SLICE] = {0.409463, 0, 8.32228e-07},
};
#define CPU_FIT_CORES 2

/* A GPU's lines from its figures, as bench/fit_perfmodels.py --gpu writes
 * perfmodels/analytic-{v100,h100}.txt: 10 us per task, FP32 peak x 0.6 for
 * convolutions and fc, memory bandwidth x 0.7 for every codelet. */
static void gpu_fit(hyfi_pmodel *pm, double tflops, double gbps)
{
    for (int k = 0; k < PM_COUNT; k++) {
        const int dense = k == PM_CONV_F || k == PM_CONV_BD || k == PM_CONV_BW || k == PM_FC_F ||
                          k == PM_FC_BD || k == PM_FC_BW;
        pm->a[k] = 10e-6;
        pm->b[k] = dense ? 1.0 / (0.6 * tflops * 1e12) : 0;
        pm->c[k] = 1.0 / (0.7 * gbps * 1e9);
    }
}

/* The lines of `path` of the device's kind ("cpu" or "cuda") over the built-in
 * ones. */
static hyfi_status load_fits(const char *path, int gpu, double scale, hyfi_pmodel *pm)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return hyfi_fail(HYFI_ERR_IO, "hyfi_machine.model_file %s (hyfi-train --plan-model): "
                                      "cannot open it; give a file of lines 'SYMBOL cpu|cuda A B "
                                      "C' such as perfmodels/analytic-h100.txt", path);
    char line[512];
    int lineno = 0, used = 0;
    while (fgets(line, sizeof line, f)) {
        char sym[128], dev[16];
        double a, b, c;
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%127s %15s %lf %lf %lf", sym, dev, &a, &b, &c) != 5 ||
            (strcmp(dev, "cpu") && strcmp(dev, "cuda")) || !(a >= 0 && b >= 0 && c >= 0)) {
            fclose(f);
            return hyfi_fail(HYFI_ERR_IO, "hyfi_machine.model_file %s line %d (hyfi-train "
                                          "--plan-model): expected 'SYMBOL cpu|cuda A B C' with "
                                          "A, B, C >= 0 (microseconds = A + B x flops + C x "
                                          "bytes)", path, lineno);
        }
        if (strcmp(dev, gpu ? "cuda" : "cpu")) continue;
        for (int k = 0; k < PM_COUNT; k++)
            if (!strcmp(sym, pm_symbol[k])) {
                pm->a[k] = a * 1e-6 * scale, pm->b[k] = b * 1e-6 * scale;
                pm->c[k] = c * 1e-6 * scale;
                used++;
            }
    }
    fclose(f);
    if (!used)
        return hyfi_fail(HYFI_ERR_IO, "hyfi_machine.model_file %s (hyfi-train --plan-model): no "
                                      "'%s' line of hyfi's codelets; give a file with them (the "
                                      "device is %s)", path, gpu ? "cuda" : "cpu",
                         gpu ? "a GPU" : "the CPU");
    return HYFI_OK;
}

hyfi_status hyfi_pmodel_init(hyfi_graph *g, const hyfi_machine *m, hyfi_pmodel *pm)
{
    (void)g;
    memset(pm, 0, sizeof *pm);
    if (!m) return hyfi_fail(HYFI_ERR_ARG, "hyfi_plan_search: the machine is NULL");
#define BAD(...) return hyfi_fail(HYFI_ERR_ARG, __VA_ARGS__)
    if (m->device != HYFI_MACHINE_CPU && m->device != HYFI_MACHINE_V100 &&
        m->device != HYFI_MACHINE_H100)
        BAD("hyfi_machine.device %d is not known (hyfi-train --plan-device): use "
            "HYFI_MACHINE_CPU, _V100 or _H100 (cpu, v100, h100)", (int)m->device);
    if (m->ranks < 1 || m->ranks > 1 << 20)
        BAD("hyfi_machine.ranks %d (hyfi-train --plan-ranks): give the MPI ranks, 1 to %d",
            m->ranks, 1 << 20);
    if (m->places_per_rank < 0 || m->places_per_rank > 4096)
        BAD("hyfi_machine.places_per_rank %d (hyfi-train --plan-gpus-per-rank): give the GPUs "
            "of a rank (0: 4), at most 4096", m->places_per_rank);
    if (m->ranks_per_node < 0 || m->cores_per_rank < 0 || m->cores_per_rank > 1 << 16)
        BAD("hyfi_machine.%s %d (hyfi-train %s): give a count >= 1, or 0 for the default",
            m->ranks_per_node < 0 ? "ranks_per_node" : "cores_per_rank",
            m->ranks_per_node < 0 ? m->ranks_per_node : m->cores_per_rank,
            m->ranks_per_node < 0 ? "--plan-ranks-per-node" : "--plan-cores");
    const double v[] = {m->place_mem_bytes, m->rank_mem_bytes, m->link_gbs, m->link_us,
                        m->node_gbs, m->node_us};
    static const char *const vn[] = {"place_mem_bytes (hyfi-train --plan-mem-gb)",
                                     "rank_mem_bytes (hyfi-train --plan-mem-gb, --mem-limit-mb)",
                                     "link_gbs (hyfi-train --plan-link-gbs)",
                                     "link_us (hyfi-train --plan-link-us)", "node_gbs", "node_us"};
    for (int i = 0; i < 6; i++)
        if (!(v[i] >= 0) || v[i] > 1e18)
            BAD("hyfi_machine.%s is %g: give a positive value, or 0 for the default", vn[i],
                v[i]);
    if (!(m->task_us < 1e6))
        BAD("hyfi_machine.task_us %g: give microseconds per task below 1e6 (0: the default)",
            m->task_us);
#undef BAD
    pm->gpu = m->device != HYFI_MACHINE_CPU;
    pm->ranks = m->ranks;
    pm->places_per_rank = m->places_per_rank ? m->places_per_rank : pm->gpu ? 4 : 8;
    pm->ranks_per_node = m->ranks_per_node ? m->ranks_per_node : pm->gpu ? 1 : m->ranks;
    pm->place_mem = pm->gpu ? (m->place_mem_bytes > 0 ? m->place_mem_bytes
                               : m->device == HYFI_MACHINE_V100 ? 16e9 : 80e9)
                            : 0;
    pm->rank_mem = m->rank_mem_bytes;
    const double link_gbs = m->link_gbs > 0 ? m->link_gbs : pm->gpu ? 25 : 8;
    const double link_us = m->link_us > 0 ? m->link_us : pm->gpu ? 5 : 22;
    pm->link_Bps = link_gbs * 1e9, pm->link_s = link_us * 1e-6;
    pm->node_Bps = (m->node_gbs > 0 ? m->node_gbs
                    : !pm->gpu ? link_gbs
                    : m->device == HYFI_MACHINE_V100 ? 75 : 450) * 1e9;
    pm->node_s = (m->node_us > 0 ? m->node_us : pm->gpu ? 5 : link_us) * 1e-6;
    pm->task_s = m->task_us < 0 ? 0 : (m->task_us > 0 ? m->task_us : pm->gpu ? 10 : 20) * 1e-6;
    const double scale =
        pm->gpu ? 1.0 : (double)CPU_FIT_CORES / (m->cores_per_rank ? m->cores_per_rank : 2);
    if (pm->gpu) {
        if (m->device == HYFI_MACHINE_V100) gpu_fit(pm, 15.7, 900);
        else gpu_fit(pm, 67, 3350);
    } else {
        for (int k = 0; k < PM_COUNT; k++) {
            pm->a[k] = cpu_fit[k][0] * 1e-6 * scale, pm->b[k] = cpu_fit[k][1] * 1e-6 * scale;
            pm->c[k] = cpu_fit[k][2] * 1e-6 * scale;
        }
    }
    if (m->model_file && *m->model_file) return load_fits(m->model_file, pm->gpu, scale, pm);
    return HYFI_OK;
}

/* ------------------------------------------------------------- op costs */

/* A view of an op: its input and output extents (H x W) and whether its
 * fusions apply (CPU-only runs, untiled: layout.c's hyfi_fuse_plan). */
typedef struct {
    double in_hw, out_hw;
    int tiled;
} pm_view;

/* Task k of `flops` and `bytes` per image plus `fixed` bytes (weights) into l. */
static void task(const hyfi_pmodel *pm, pm_lin *l, double *ntasks, int k, double flops,
                 double bytes, double fixed)
{
    l->a += pm->a[k] + pm->c[k] * fixed + pm->task_s;
    l->b += pm->b[k] * flops + pm->c[k] * bytes;
    *ntasks += 1;
}

/* Readers of each tensor (by id). */
static int *consumers(const hyfi_graph *g)
{
    int *n = calloc((size_t)(g->ntensors ? g->ntensors : 1), sizeof *n);
    if (!n) return NULL;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) n[g->nodes[i].in[k]->id]++;
    return n;
}

/* The forward and backward of node nd on view v into f and b (per image and
 * fixed parts). */
static void node_cost(const hyfi_graph *g, const hyfi_pmodel *pm, const int *ncons,
                      const node *nd, const pm_view *v, pm_lin *f, pm_lin *b, double *ntasks)
{
    const hyfi_tensor *y = nd->out, *x = nd->in[0];
    const double N = y->dims[0] > 0 ? y->dims[0] : 1;
    const double Ho = y->dims[2] > 0 ? y->dims[2] : 1, Wo = y->dims[3] > 0 ? y->dims[3] : 1;
    const double share = v->out_hw / (Ho * Wo);
    const double fl = hyfi_op_flops(nd) / N * share;
    const double ey = (double)hyfi_tensor_elem(g, y);
    const double yb = (double)y->dims[1] * v->out_hw * ey;
    double xb = 0;
    for (int k = 0; k < nd->nin; k++)
        if (!nd->in[k]->is_int)
            xb += (double)nd->in[k]->dims[1] * (nd->op == OP_CONCAT || nd->op == OP_ADD
                                                     ? v->out_hw : v->in_hw) *
                  (double)hyfi_tensor_elem(g, nd->in[k]);
    double wb = 0;
    for (int k = 0; k < 2; k++)
        if (nd->p[k] && nd->p[k]->kind == T_PARAM) wb += 4.0 * (double)nd->p[k]->numel;
    const int cpu = !pm->gpu && !v->tiled;
    const int dx = x->requires_grad;
    switch (nd->op) {
    case OP_CONV2D: {
        /* a convolution whose output only an add reads writes the add's */
        const int fuse_add = cpu && ncons[y->id] == 1;
        task(pm, f, ntasks, PM_CONV_F, fl, xb + yb * (fuse_add ? 2 : 1), wb);
        if (dx) task(pm, b, ntasks, PM_CONV_BD, fl, xb + yb, wb);
        task(pm, b, ntasks, PM_CONV_BW, fl, xb + yb, wb);
        break;
    }
    case OP_BATCHNORM:
        if (v->tiled) {
            task(pm, f, ntasks, PM_BN_STATS, fl, xb, 0);
            task(pm, f, ntasks, PM_BN_F, fl, xb + yb, 0);
            task(pm, b, ntasks, PM_BN_BWD_STATS, 0, xb + yb, 0);
            task(pm, b, ntasks, PM_BN_BWD_APPLY, 0, 2 * xb + yb, 0);
        } else {
            task(pm, f, ntasks, PM_BN_F, fl, xb + yb, 0);
            task(pm, b, ntasks, PM_BN_B, fl, 2 * xb + 2 * yb, 0);
        }
        break;
    case OP_RELU: {
        /* fused into the batch norm before it when that is its only reader */
        const int p = x->producer;
        if (cpu && p >= 0 && g->nodes[p].op == OP_BATCHNORM && ncons[x->id] == 1 &&
            g->nodes[p].stage == nd->stage)
            break;
        task(pm, f, ntasks, PM_RELU_F, fl, xb + yb, 0);
        task(pm, b, ntasks, PM_RELU_B, fl, 2 * yb, 0);
        break;
    }
    case OP_ADD: {
        int fused = 0;
        for (int k = 0; k < nd->nin && cpu; k++) {
            const int p = nd->in[k]->producer;
            fused |= p >= 0 && g->nodes[p].op == OP_CONV2D && ncons[nd->in[k]->id] == 1 &&
                     g->nodes[p].stage == nd->stage;
        }
        if (!fused) task(pm, f, ntasks, PM_ADD_F, fl, xb + yb, 0);
        break; /* backward: the gradient forwarded (grad_forward.c) */
    }
    case OP_MAXPOOL:
    case OP_AVGPOOL: {
        const int mx = nd->op == OP_MAXPOOL;
        task(pm, f, ntasks, mx ? PM_MAXPOOL_F : PM_AVGPOOL_F, fl, xb + yb, 0);
        if (dx) task(pm, b, ntasks, mx ? PM_MAXPOOL_B : PM_AVGPOOL_B, fl, 2 * xb + 2 * yb, 0);
        break;
    }
    case OP_GAP:
        task(pm, f, ntasks, PM_GAP_F, fl, xb + yb, 0);
        task(pm, b, ntasks, PM_GAP_B, fl, xb + yb, 0);
        break;
    case OP_CONCAT:
        task(pm, f, ntasks, PM_CONCAT_F, 0, xb + yb, 0);
        task(pm, b, ntasks, PM_CONCAT_B, 0, xb + yb, 0);
        break;
    case OP_FC:
        task(pm, f, ntasks, PM_FC_F, fl, xb + yb, wb);
        if (dx) task(pm, b, ntasks, PM_FC_BD, fl, xb + yb, wb);
        task(pm, b, ntasks, PM_FC_BW, 0, xb + yb, wb);
        break;
    case OP_XENT:
        task(pm, f, ntasks, PM_XENT_F, fl, 2 * xb, 0);
        task(pm, b, ntasks, PM_XENT_B, 0, 2 * xb, 0);
        break;
    case OP_COUNT:
        break;
    }
}

void hyfi_pmodel_layer_costs(const hyfi_graph *g, const hyfi_pmodel *pm, double n, double *cost)
{
    const int nl = hyfi_layer_count(g);
    int *nc = consumers(g);
    for (int l = 0; l < nl; l++) cost[l] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const int l = g->nlayers ? (nd->layer < 0 ? 0 : nd->layer) : i;
        pm_view v = {(double)nd->in[0]->dims[2] * nd->in[0]->dims[3],
                     (double)nd->out->dims[2] * nd->out->dims[3], 0};
        pm_lin f = {0, 0}, b = {0, 0};
        double t = 0;
        int one = 1;
        node_cost(g, pm, nc ? nc : &one, nd, &v, &f, &b, &t);
        if (l < nl) cost[l] += f.a + b.a + (f.b + b.b) * n;
    }
    free(nc);
}

/* ------------------------------------------------------------ structure */

static int place_dev(const hyfi_pstruct *ps, int q) { return ps->place_dev[q]; }

/* Seconds to move `bytes` (a + b x images) from place p to place q. */
static pm_lin move(const hyfi_plan *pl, const hyfi_pmodel *pm, const hyfi_pstruct *ps, int p,
                   int q, double bytes)
{
    pm_lin t = {0, 0};
    if (place_dev(ps, p) == place_dev(ps, q)) return t;
    const int rp = pl->place_rank[p], rq = pl->place_rank[q];
    const int near = rp == rq || rp / pm->ranks_per_node == rq / pm->ranks_per_node;
    t.a = near ? pm->node_s : pm->link_s;
    t.b = bytes / (near ? pm->node_Bps : pm->link_Bps);
    return t;
}

static void lin_add(pm_lin *d, pm_lin s) { d->a += s.a, d->b += s.b; }

/* The all-reduce of `bytes` of gradients over the replicas of stage s. */
static void allreduce(const hyfi_graph *g, const hyfi_pmodel *pm, const hyfi_plan *pl, int s,
                      double bytes, int nparams, double *whole, double *bucket)
{
    const int n = pl->nrep;
    int spread = 0, far = 0;
    const int r0 = hyfi_stage_rank(pl, 0, s);
    for (int k = 1; k < n; k++) {
        const int r = hyfi_stage_rank(pl, k, s);
        spread |= r != r0;
        far |= r / pm->ranks_per_node != r0 / pm->ranks_per_node;
    }
    if (!spread) { /* summed where they are */
        *whole = (n - 1) * (pm->a[PM_ACC] * nparams + pm->c[PM_ACC] * 2 * bytes);
        *bucket = *whole / (nparams ? nparams : 1);
        return;
    }
    const double lat = far ? pm->link_s : pm->node_s, bw = far ? pm->link_Bps : pm->node_Bps;
    const int kib = g->plan_cfg.bucket_kib;
    const double cap = kib < 0 ? bytes / (nparams ? nparams : 1)
                               : (double)(kib ? kib : HYFI_BUCKET_KIB) * 1024;
    const double nb = ceil(bytes / (cap > 0 ? cap : 1)), per = bytes / (nb > 0 ? nb : 1);
    const hyfi_allreduce how = g->plan_cfg.allreduce;
    const int ring = how == HYFI_ALLREDUCE_RING ||
                     (how == HYFI_ALLREDUCE_AUTO && n > 2 && per / n >= HYFI_RING_MIN_CHUNK);
    const double steps = ring ? 2.0 * (n - 1) : 2.0 * ceil(log2((double)n));
    const double chunk = ring ? per / n : per;
    *bucket = steps * (lat + chunk / bw + pm->a[PM_ACC] + pm->c[PM_ACC] * 2 * chunk);
    *whole = nb * *bucket;
}

void hyfi_pstruct_free(hyfi_pstruct *ps)
{
    free(ps->place_dev);
    free(ps->fwd);
    free(ps->bwd);
    free(ps->ntasks);
    free(ps->xf);
    free(ps->xb);
    free(ps->upd);
    free(ps->ar);
    free(ps->ar_bucket);
    free(ps->acc);
    free(ps->red);
    free(ps->red_tasks);
    memset(ps, 0, sizeof *ps);
}

/* The tasks of the step's end across R replicas that one replica's first
 * place of each stage runs, as reduce.c emits them (the busiest replica's:
 * replica 0 merges at every level of a tree): each bucket of a stage's
 * gradients (parameters from the last, up to the bucket size) packed and
 * unpacked a parameter at a time (on CPUs 32 at a time), then split into R
 * chunks, R - 1 reduce and R - 1 gather steps and joined (ring), or one add
 * per level (tree); each running statistic saved (and, packed in groups of 16
 * beyond 4 replicas or on CPUs, packed and unpacked: on CPUs a task per
 * group), merged per level and group or statistic. Each is a small task: on
 * GPUs their fixed costs, thousands a step at 32 replicas, are what a
 * replica's device spends beyond its kernels. */
static void reduce_tasks(const hyfi_graph *g, const hyfi_pmodel *pm, const hyfi_plan *pl,
                         hyfi_pstruct *ps)
{
    const int R = pl->nrep;
    /* copies into and out of packed buffers share tasks on CPUs (reduce.c) */
    const int grouped = !pm->gpu;
    int lv = 0;
    while ((1 << lv) < R) lv++;
    const double cs = pm->a[PM_COPY_SLICE] + pm->task_s, ca = pm->a[PM_ACC] + pm->task_s;
    const int kib = g->plan_cfg.bucket_kib;
    const double cap = kib < 0 ? 0 : (double)(kib ? kib : HYFI_BUCKET_KIB) * 1024;
    int bs = -1, bnp = 0;
    double bn = 0;
    for (int i = g->nparams - 1; i >= -1; i--) {
        const hyfi_tensor *p = i >= 0 ? g->params[i] : NULL;
        if (p && bs == p->stage && (bn + (double)p->numel) * 4 <= cap) {
            bn += (double)p->numel, bnp++;
            continue;
        }
        if (bs >= 0) { /* the bucket so far */
            const int ring = hyfi_use_ring(g, (size_t)bn);
            if (bnp > 1) {
                const int nt = grouped ? (bnp + HYFI_SLICES_GROUP - 1) / HYFI_SLICES_GROUP : bnp;
                ps->red[bs] += 2 * nt * cs + pm->c[PM_COPY_SLICE] * 16 * bn;
                ps->red_tasks[bs] += 2 * nt;
            }
            if (ring) {
                ps->red[bs] += 2 * R * cs + 2 * (R - 1) * ca + pm->c[PM_COPY_SLICE] * 16 * bn +
                               pm->c[PM_ACC] * 16 * bn * (R - 1) / R;
                ps->red_tasks[bs] += 2 * R + 2 * (R - 1);
            } else {
                ps->red[bs] += lv * (ca + pm->c[PM_ACC] * 8 * bn);
                ps->red_tasks[bs] += lv;
            }
        }
        if (p) bs = p->stage, bn = (double)p->numel, bnp = 1;
    }
    const int packed = hyfi_stats_packed_on(g, grouped);
    for (int s = 0; s < pl->nstages; s++) {
        int nst = 0;
        for (int i = 0; i < g->nnodes; i++)
            nst += g->nodes[i].stage == s && hyfi_op_batch_statistics(&g->nodes[i]) ? 2 : 0;
        const int merged = packed ? (nst + HYFI_STATS_GROUP - 1) / HYFI_STATS_GROUP : nst;
        const int copies = !packed ? nst : 3 * (grouped ? merged : nst);
        ps->red[s] += copies * cs + merged * lv * ca;
        ps->red_tasks[s] += copies + merged * lv;
    }
}

/* The devices of the places, as the engine pins them (plan.c): a GPU rank's
 * places of copy 0 of each data-parallel group take its GPUs in turn, and a
 * GEMS copy's place runs on the GPU of the place whose devices it shares
 * (hyfi_copy_place: the mirrored stage's); a CPU rank is one device. */
static void map_devices(const hyfi_plan *pl, const hyfi_pmodel *pm, hyfi_pstruct *ps)
{
    const int G = pm->gpu ? pm->places_per_rank : 1;
    int *seen = calloc((size_t)pm->ranks, sizeof *seen);
    for (int q = 0; q < pl->nplaces; q++) {
        const int r = pl->place_rank[q], home = hyfi_place_home(pl, q);
        ps->place_dev[q] = home < q ? ps->place_dev[home]
                                    : r * G + (seen ? seen[r]++ % G : 0);
    }
    free(seen);
    ps->ndev = pm->ranks * G;
}

/* Halo strips of tiled op nd (forward; its gradient back) into the stage's
 * critical path (the slowest tile) and the copies into the places' work. */
static void halos(const hyfi_graph *g, const hyfi_pmodel *pm, hyfi_pstruct *ps, const node *nd)
{
    const hyfi_plan *pl = g->cc->pl;
    const hyfi_tnode *tn = nd->tn;
    const hyfi_tensor *x = nd->in[0];
    const int s = nd->stage, q0 = pl->stage_place0[s];
    const double ex = (double)hyfi_tensor_elem(g, x);
    pm_lin worst = {0, 0};
    for (int q = 0; q < pl->P; q++) {
        if (!tn->use_buf[q]) continue;
        pm_lin t = {0, 0};
        for (int k = 1; k < tn->npieces[q]; k++) {
            const double bytes = (double)x->dims[1] * tn->piece[q][k].h * tn->piece[q][k].w * ex;
            const pm_lin m = move(pl, pm, ps, q0 + tn->from[q][k], q0 + q, bytes);
            if (m.a == 0 && m.b == 0) { /* a copy on the same device */
                task(pm, &ps->fwd[q0 + q], &ps->ntasks[q0 + q], PM_COPY_SLICE, 0, bytes, 0);
                if (x->requires_grad)
                    task(pm, &ps->bwd[q0 + q], &ps->ntasks[q0 + q], PM_ACC, 0, 2 * bytes, 0);
            }
            t.a = m.a > t.a ? m.a : t.a; /* the strips travel side by side */
            t.b += m.b;
        }
        task(pm, &ps->fwd[q0 + q], &ps->ntasks[q0 + q], PM_TILE_ASSEMBLE, 0, 0, 0);
        if (t.a + t.b > worst.a + worst.b) worst = t;
    }
    lin_add(&ps->xf[s], worst);
    if (x->requires_grad) lin_add(&ps->xb[s], worst);
}

int hyfi_pstruct_make(const hyfi_graph *g, const hyfi_pmodel *pm, hyfi_pstruct *ps)
{
    const hyfi_plan *pl = g->cc->pl;
    memset(ps, 0, sizeof *ps);
    const int S = pl->nstages, n1 = pl->nplaces1;
    ps->S = S, ps->K = pl->K, ps->P = pl->P, ps->nrep = pl->nrep;
    ps->nplaces1 = n1, ps->nplaces = pl->nplaces, ps->batch = pl->batch;
    ps->place_dev = malloc((size_t)pl->nplaces * sizeof *ps->place_dev);
    ps->fwd = calloc((size_t)n1, sizeof *ps->fwd);
    ps->bwd = calloc((size_t)n1, sizeof *ps->bwd);
    ps->ntasks = calloc((size_t)n1, sizeof *ps->ntasks);
    ps->acc = calloc((size_t)n1, sizeof *ps->acc);
    ps->xf = calloc((size_t)S, sizeof *ps->xf);
    ps->xb = calloc((size_t)S, sizeof *ps->xb);
    ps->upd = calloc((size_t)S, sizeof *ps->upd);
    ps->ar = calloc((size_t)S, sizeof *ps->ar);
    ps->ar_bucket = calloc((size_t)S, sizeof *ps->ar_bucket);
    ps->red = calloc((size_t)S, sizeof *ps->red);
    ps->red_tasks = calloc((size_t)S, sizeof *ps->red_tasks);
    int *nc = consumers(g), *last = malloc((size_t)(g->ntensors + 1) * sizeof *last);
    double *gbytes = calloc((size_t)S, sizeof *gbytes);
    int *nparams = calloc((size_t)S, sizeof *nparams);
    if (!ps->place_dev || !ps->fwd || !ps->bwd || !ps->ntasks || !ps->acc || !ps->xf ||
        !ps->xb || !ps->upd || !ps->ar || !ps->ar_bucket || !ps->red || !ps->red_tasks || !nc ||
        !last || !gbytes ||
        !nparams) {
        free(nc), free(last), free(gbytes), free(nparams);
        hyfi_pstruct_free(ps);
        return -1;
    }
    map_devices(pl, pm, ps);
    for (int i = 0; i < g->ntensors; i++) last[i] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const int s = nd->stage, tiled = s < pl->K, q0 = pl->stage_place0[s];
        for (int t = 0; t < (tiled ? pl->P : 1); t++) {
            pm_view v = {(double)nd->in[0]->dims[2] * nd->in[0]->dims[3],
                         (double)nd->out->dims[2] * nd->out->dims[3], tiled};
            if (tiled && nd->out->tl) {
                const hyfi_tnode *tn = nd->tn;
                const hyfi_tiles *xt = nd->in[0]->tl;
                v.out_hw = (double)tile_h(nd->out->tl, t) * tile_w(nd->out->tl, t);
                if (tn && tn->fg && tn->fg_pos < tn->fg->n - 1)
                    v.out_hw = (double)fg_rows(tn->fg, tn->fg_pos, t) *
                               fg_cols(tn->fg, tn->fg_pos, t);
                v.in_hw = tn && tn->use_buf[t] ? (double)tn->buf_h[t] * tn->buf_w[t]
                          : xt ? (double)tile_h(xt, t) * tile_w(xt, t) : v.out_hw;
            }
            node_cost(g, pm, nc, nd, &v, &ps->fwd[q0 + t], &ps->bwd[q0 + t], &ps->ntasks[q0 + t]);
            /* parameter gradients summed over micro-batches (per tile for convolutions) */
            for (int k = 0; k < 2 && hyfi_op_param_grads(nd); k++)
                if (nd->p[k] && (t == 0 || hyfi_op_sums_weights_over_tiles(nd)))
                    ps->acc[q0 + t] += pm->a[PM_ACC] + pm->c[PM_ACC] * 8.0 * nd->p[k]->numel;
        }
        if (tiled && nd->tn && nd->tn->windowed && !(nd->tn->fg && nd->tn->fg_pos > 0))
            halos(g, pm, ps, nd);
        if (tiled && nd->op == OP_BATCHNORM) {
            /* statistics of the tiles gathered, combined and sent back, each way */
            const pm_lin m = move(pl, pm, ps, q0 + pl->P - 1, q0, 0);
            ps->xf[s].a += 2 * m.a, ps->xb[s].a += 2 * m.a;
            double t = 0;
            task(pm, &ps->fwd[q0], &t, PM_BN_COMBINE, 0, 0, 0);
            task(pm, &ps->bwd[q0], &t, PM_BN_BWD_COMBINE, 0, 0, 0);
            ps->ntasks[q0] += t;
        }
        /* activations from other stages (gathered from tiles), once per stage */
        for (int k = 0; k < nd->nin; k++) {
            const hyfi_tensor *x = nd->in[k];
            if (x->is_int || last[x->id] == s) continue;
            last[x->id] = s;
            const int sp = x->producer >= 0 ? g->nodes[x->producer].stage : -1;
            if (sp == s && !(x->tl && !tiled)) continue;
            const double N = x->dims[0] > 0 ? x->dims[0] : 1;
            const double bytes = (double)x->numel / N * (double)hyfi_tensor_elem(g, x);
            const int src_tiles = x->tl ? pl->P : 1, src0 = sp >= 0 ? pl->stage_place0[sp] : q0;
            pm_lin t = {0, 0};
            for (int u = 0; u < src_tiles; u++) {
                const int dst = tiled ? q0 + u : q0;
                pm_lin m = move(pl, pm, ps, sp >= 0 ? src0 + u : pl->stage_place0[0], dst,
                                bytes / src_tiles);
                if (sp < 0 && pm->gpu) { /* the images, host to GPU */
                    m.a += pm->node_s;
                    m.b += bytes / src_tiles / pm->node_Bps;
                }
                t.a = m.a > t.a ? m.a : t.a;
                t.b = tiled ? (m.b > t.b ? m.b : t.b) : t.b + m.b;
            }
            lin_add(&ps->xf[s], t);
            if (sp >= 0 && x->requires_grad) lin_add(&ps->xb[sp], t);
        }
    }
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        if (t->kind != T_PARAM) continue;
        ps->upd[t->stage] += pm->a[PM_SGD] + pm->c[PM_SGD] * 12.0 * t->numel;
        gbytes[t->stage] += 4.0 * t->numel;
        nparams[t->stage]++;
    }
    for (int s = 0; s < S && pl->nrep > 1; s++)
        allreduce(g, pm, pl, s, gbytes[s], nparams[s], &ps->ar[s], &ps->ar_bucket[s]);
    if (pl->nrep > 1) reduce_tasks(g, pm, pl, ps);
    free(nc), free(last), free(gbytes), free(nparams);
    return 0;
}

/* --------------------------------------------------------------- a step */

void hyfi_pmodel_step(const hyfi_pstruct *ps, const hyfi_pmodel *pm, int M, int recompute,
                      pm_step *out)
{
    memset(out, 0, sizeof *out);
    const int S = ps->S, n1 = ps->nplaces1;
    const double n = (double)ps->batch / ((double)ps->nrep * M);
    double *dev = calloc((size_t)ps->ndev, sizeof *dev), *devt = calloc((size_t)ps->ndev, sizeof *devt);
    double sumX = 0, maxX = 0, maxXc = 0, sumc = 0, sumB_before = 0, used = 0, work = 0;
    /* per place, per micro-batch: kernels (+ re-run forward, + gradient sums) */
    for (int q = 0; q < ps->nplaces && dev && devt; q++) {
        const int q1 = q % n1;
        const double f = ps->fwd[q1].a + ps->fwd[q1].b * n, b = ps->bwd[q1].a + ps->bwd[q1].b * n;
        const double w = f + b + (recompute ? f : 0) + (M > 1 ? ps->acc[q1] : 0);
        dev[ps->place_dev[q]] += M * w;
        devt[ps->place_dev[q]] += M * ps->ntasks[q1] * (recompute ? 1.5 : 1);
        work += M * w;
    }
    /* the step's end across replicas: each replica's stage on its first place's
     * device, also kept apart per device (redd) */
    double *redd = calloc((size_t)ps->ndev, sizeof *redd);
    for (int k = 0; k < ps->nrep && dev && devt; k++)
        for (int s = 0, q = 0; s < S; q += s < ps->K ? ps->P : 1, s++) {
            const int d = ps->place_dev[k * n1 + q];
            dev[d] += ps->red[s];
            devt[d] += ps->red_tasks[s];
            if (redd) redd[d] += ps->red[s];
            work += ps->red[s];
        }
    /* the updates: each replica's stage on its first place's device */
    double *upd = calloc((size_t)ps->ndev, sizeof *upd);
    for (int k = 0; k < ps->nrep && upd; k++)
        for (int s = 0, q = 0; s < S; q += s < ps->K ? ps->P : 1, s++)
            upd[ps->place_dev[k * n1 + q]] += ps->upd[s];
    double busiest = 0, tasks = 0, busiest_upd = 0, busiest_k = 0;
    for (int d = 0; d < ps->ndev && dev; d++) {
        if (dev[d] > busiest) busiest = dev[d], tasks = devt[d];
        if (upd && dev[d] + upd[d] > busiest_upd) busiest_upd = dev[d] + upd[d];
        used += dev[d] > 0;
    }
    /* the devices' kernels alone */
    for (int d = 0; d < ps->ndev && dev && redd; d++)
        if (dev[d] - redd[d] > busiest_k) busiest_k = dev[d] - redd[d];
    free(upd);
    /* the pipeline of one replica: stage s per micro-batch, its slowest tile */
    double *B = S > 0 ? calloc((size_t)S, sizeof *B) : NULL;
    for (int s = 0; s < S && B; s++) {
        double X = 0, Bs = 0;
        const int tiles = s < ps->K ? ps->P : 1;
        /* stage s's first place in replica 0: places are in stage order */
        int q0 = 0;
        for (int r = 0; r < s; r++) q0 += r < ps->K ? ps->P : 1;
        for (int t = 0; t < tiles; t++) {
            const int q = q0 + t;
            const double f = ps->fwd[q].a + ps->fwd[q].b * n, b = ps->bwd[q].a + ps->bwd[q].b * n;
            const double r = recompute ? f : 0, a = M > 1 ? ps->acc[q] : 0;
            if (f + b + r + a > X) X = f + b + r + a;
            if (b + r + a > Bs) Bs = b + r + a;
        }
        const double c = ps->xf[s].a + ps->xf[s].b * n + ps->xb[s].a + ps->xb[s].b * n;
        B[s] = Bs + ps->xb[s].a + ps->xb[s].b * n;
        sumX += X + c;
        sumc += c;
        if (X + c > maxX) maxX = X + c, maxXc = c;
    }
    const double pipe = sumX + (M - 1) * maxX;
    const double end = pipe > busiest_k ? pipe : busiest_k;
    double step = end, upd_max = 0;
    for (int s = 0, q = 0; s < S && B; q += s < ps->K ? ps->P : 1, s++) {
        const double e = end - sumB_before;
        sumB_before += B[s];
        /* the stage's step-end tasks on its device, after its last backward */
        const double r = redd ? redd[ps->place_dev[q]] : 0;
        double fin = e + r;
        if (ps->nrep > 1) {
            const double a = e + r + ps->ar_bucket[s], b2 = e - B[s] + ps->ar[s];
            fin = a > b2 ? a : b2;
            if (fin < e + r) fin = e + r;
        }
        if (fin + ps->upd[s] > step) step = fin + ps->upd[s];
        if (ps->upd[s] > upd_max) upd_max = ps->upd[s];
    }
    if (step < end + upd_max) step = end + upd_max;
    if (step < busiest + upd_max) step = busiest + upd_max;
    free(redd);
    if (step < busiest_upd) step = busiest_upd; /* the updates of one device's places */
    out->step = step;
    out->compute = busiest;
    out->overhead = tasks * pm->task_s;
    out->allreduce = step - end - upd_max > 0 ? step - end - upd_max : 0;
    /* the pipeline's time beyond the busiest device's work: its fill and drain
     * and the communication on its path, in proportion */
    const double raw_b = sumX - maxX, raw_c = sumc - maxXc + M * maxXc;
    const double excess = pipe > busiest ? pipe - busiest : 0;
    if (raw_b + raw_c > 0) {
        out->bubble = excess * raw_b / (raw_b + raw_c);
        out->comm = excess * raw_c / (raw_b + raw_c);
    }
    out->imbalance = used > 0 && busiest > work / used ? busiest - work / used : 0;
    free(B);
    free(dev);
    free(devt);
}
