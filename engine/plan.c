/* The parallel plan: layers -> stages (places) -> MPI ranks, micro-batches,
 * the pipeline schedule and the per-stage estimates (their inspection:
 * plan_info.c; the predicted traffic: traffic.c).
 *
 * The partitioning itself is plain C in partitioners/ (balance.c: layers per
 * stage by cost; pipeline.c: schedules and places on ranks); this file feeds
 * it the graph and records the result for compile.c. */
#include "internal.h"
#include "balance.h"
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ layers */

hyfi_status hyfi_layer_begin(hyfi_graph *g, const char *name)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "hyfi_layer_begin: graph is NULL");
    if (g->status != HYFI_OK) return g->status;
    if (g->cc)
        return hyfi_graph_fail(g, HYFI_ERR_STATE, "hyfi_layer_begin: the graph is compiled; "
                                                  "mark layers while building");
    char gen[32];
    if (!name) {
        snprintf(gen, sizeof gen, "layer%d", g->nlayers);
        name = gen;
    }
    /* Ops built before the first call become a layer of their own. */
    const int implicit = g->nlayers == 0 && g->nnodes > 0;
    int need = g->nlayers + 1 + implicit;
    if (need > g->cap_layers) {
        int nc = g->cap_layers ? g->cap_layers * 2 : 16;
        while (nc < need) nc *= 2;
        char **p = realloc(g->layer_names, (size_t)nc * sizeof *p);
        if (!p) return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "hyfi_layer_begin: out of memory");
        g->layer_names = p;
        g->cap_layers = nc;
    }
    if (implicit) {
        g->layer_names[0] = strdup(g->nodes[0].name);
        if (!g->layer_names[0])
            return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "hyfi_layer_begin: out of memory");
        for (int i = 0; i < g->nnodes; i++) g->nodes[i].layer = 0;
        g->nlayers = 1;
    }
    g->layer_names[g->nlayers] = strdup(name);
    if (!g->layer_names[g->nlayers])
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "hyfi_layer_begin: out of memory");
    g->nlayers++;
    return HYFI_OK;
}

int hyfi_layer_count(const hyfi_graph *g)
{
    if (!g) return 0;
    return g->nlayers ? g->nlayers : g->nnodes;
}

/* ------------------------------------------------------------------- plans */

hyfi_status hyfi_graph_set_plan(hyfi_graph *g, const hyfi_plan_config *p)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_set_plan: graph is NULL");
    if (g->cc)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_graph_set_plan: the graph is compiled; "
                                                 "set the plan before hyfi_graph_compile");
    free(g->plan_balance);
    g->plan_balance = NULL;
    memset(&g->plan_cfg, 0, sizeof g->plan_cfg);
    if (!p) return HYFI_OK;
    if (p->schedule != HYFI_SCHEDULE_GPIPE && p->schedule != HYFI_SCHEDULE_1F1B)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: unknown schedule %d; use "
                                               "HYFI_SCHEDULE_GPIPE or HYFI_SCHEDULE_1F1B",
                              (int)p->schedule);
    if (p->gems != HYFI_GEMS_NONE && p->gems != HYFI_GEMS_MAST && p->gems != HYFI_GEMS_MASTER)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: unknown GEMS mode %d; use "
                                               "HYFI_GEMS_NONE, HYFI_GEMS_MAST or "
                                               "HYFI_GEMS_MASTER", (int)p->gems);
    if (p->allreduce != HYFI_ALLREDUCE_AUTO && p->allreduce != HYFI_ALLREDUCE_RING &&
        p->allreduce != HYFI_ALLREDUCE_TREE)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: unknown all-reduce %d; use "
                                               "HYFI_ALLREDUCE_AUTO, _RING or _TREE",
                              (int)p->allreduce);
    if (p->recompute != HYFI_RECOMPUTE_NONE && p->recompute != HYFI_RECOMPUTE_STAGE &&
        p->recompute != HYFI_RECOMPUTE_LAYER)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: unknown recompute mode %d; "
                                               "use HYFI_RECOMPUTE_NONE, _STAGE or _LAYER",
                              (int)p->recompute);
    if (p->replications > 1 && p->gems != HYFI_GEMS_MASTER)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: %d replications need GEMS "
                                               "MASTER (--gems master); MAST has one pair of "
                                               "copies", p->replications);
    {
        /* in double: no overflow for any int counts */
        const double copies = p->gems == HYFI_GEMS_NONE     ? 1
                              : p->gems == HYFI_GEMS_MAST   ? 2
                              : 2.0 * (p->replications > 1 ? p->replications : 1);
        const double reps = copies * (p->data_parallel > 1 ? p->data_parallel : 1);
        if (reps > HYFI_MAX_REPLICAS)
            return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_set_plan: %.0f replicas (GEMS "
                                                   "copies x --data-parallel); at most %d: use "
                                                   "fewer data-parallel groups or GEMS copies",
                                  reps, HYFI_MAX_REPLICAS);
    }
    g->plan_cfg = *p;
    if (p->balance && p->stages > 0) {
        g->plan_balance = malloc((size_t)p->stages * sizeof(int));
        if (!g->plan_balance)
            return hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_graph_set_plan: out of memory");
        memcpy(g->plan_balance, p->balance, (size_t)p->stages * sizeof(int));
    }
    g->plan_cfg.balance = g->plan_balance;
    return HYFI_OK;
}

void hyfi_plan_free(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    if (!pl) return;
    hyfi_spatial_plan_free(g);
    free(pl->pred_halo_out);
    free(pl->pred_halo_in);
    free(pl->layer_of_node);
    free(pl->layer_stage);
    free(pl->stage_rank);
    free(pl->stage_worker);
    free(pl->place_rank);
    free(pl->place_worker);
    free(pl->place_stage);
    free(pl->stage_place0);
    free(pl->inflight);
    free(pl->events);
    free(pl->stage_flops);
    free(pl->stage_params);
    free(pl->stage_param_bytes);
    free(pl->stage_act_bytes);
    free(pl->stage_act_mode);
    free(pl->rc_seg);
    free(pl->rc_rerun);
    free(pl->rc_drop);
    free(pl->pred_out);
    free(pl->pred_in);
    free(pl);
    g->cc->pl = NULL;
}

/* Per-micro-batch tensors: everything that has a batch dimension. */
static int batch_tensor(const hyfi_tensor *t)
{
    return t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT || t->kind == T_SAVED;
}

static double node_cost(const hyfi_graph *g, int i)
{
    /* FLOPs, plus a memory-traffic term so that cheap ops are not free:
     * one FLOP per byte of output activation. */
    const node *nd = &g->nodes[i];
    return hyfi_op_flops(nd) + (double)(nd->out->numel * sizeof(float));
}

/* Host memory the ranks of one node can use: the physical memory, or the
 * cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) when lower.
 * hyfi_ctx_config.phys_mem_mb overrides it (tests; a node with memory
 * reserved for others). 0 when unknown. */
double hyfi_host_memory_bytes(const hyfi_ctx *ctx)
{
    if (ctx->phys_mem_mb > 0) return ctx->phys_mem_mb * 1e6;
    const long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    double mem = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
    static const char *const cg[] = {"/sys/fs/cgroup/memory.max",
                                     "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof cg / sizeof *cg; i++) {
        FILE *f = fopen(cg[i], "r");
        if (!f) continue;
        char line[64] = "";
        const int ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        const double v = ok ? strtod(line, NULL) : 0; /* "max": no limit */
        if (v > 0 && (mem <= 0 || v < mem)) mem = v;
    }
    return mem;
}

/* The estimate for rank r (parameters with gradients and momentum, the
 * activations, their gradients and saved tensors of the micro-batches in
 * flight): an upper bound of what was measured (docs/results.md). *worst: the
 * first stage it holds. */
/* act: per stage, the activation estimate (stage_act_bytes, or another
 * recompute mode's row of stage_act_mode). */
static double place_bytes_with(const hyfi_plan *pl, int q, const size_t *act)
{
    const int s = pl->place_stage[q];
    return (double)act[s] +
           (q % pl->nplaces1 == pl->stage_place0[s] ? (double)pl->stage_param_bytes[s] : 0);
}

double hyfi_plan_place_bytes(const hyfi_plan *pl, int q)
{
    return place_bytes_with(pl, q, pl->stage_act_bytes);
}

static double rank_need_with(const hyfi_plan *pl, int r, const size_t *act, int *worst)
{
    double need = 0;
    *worst = -1;
    for (int q = 0; q < pl->nplaces; q++) {
        if (pl->place_rank[q] != r) continue;
        need += place_bytes_with(pl, q, act);
        if (*worst < 0 || pl->place_stage[q] < *worst) *worst = pl->place_stage[q];
    }
    return need;
}

double hyfi_plan_rank_need(const hyfi_plan *pl, int r, int *worst)
{
    return rank_need_with(pl, r, pl->stage_act_bytes, worst);
}

#define MEMORY_FIXES                                                                        \
    "tile the big stages (--spatial-size, --num-spatial-parts), use more stages, ranks or "  \
    "micro-batches (--split-size, --parts), or a smaller batch or image"

/* This rank's places on its GPUs against their memory: StarPU moves data
 * that does not fit back to host memory between tasks, so a plan above a
 * GPU's memory runs (slowly) and is not refused; say so once. Places pinned
 * to a CUDA worker count on its GPU; with CUDA workers only (and in a
 * simulation, where the data of the places on simulated GPUs is what
 * matters), the others are spread over the GPUs. */
static void warn_gpu_memory(const hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int ncuda = g->ctx->ncuda;
    if (ncuda <= 0) return;
    double spread = 0;
    for (int q = 0; q < pl->nplaces && (g->ctx->ncpu == 0 || HYFI_SIMULATION); q++)
        if (pl->place_rank[q] == g->ctx->rank && pl->place_worker[q] < 0)
            spread += hyfi_plan_place_bytes(pl, q);
    for (int k = 0; k < ncuda; k++) {
        const int w = g->ctx->cuda_worker[k];
        if (w < 0) continue;
        double need = spread / ncuda;
        for (int q = 0; q < pl->nplaces; q++)
            if (pl->place_rank[q] == g->ctx->rank && pl->place_worker[q] == w)
                need += hyfi_plan_place_bytes(pl, q);
        const double total = g->ctx->cuda_mem[k];
        const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){need, total}, 2, 0);
        if (total > 0 && need > total)
            hyfi_ctx_log(g->ctx, HYFI_LOG_WARNING,
                         "rank %d: the plan needs an estimated %.*f %s on CUDA device %d, "
                         "which has %.*f %s; StarPU will move data through host memory "
                         "between tasks (slow); " MEMORY_FIXES,
                    g->ctx->rank, HYFI_SIZE_ARGS(f, need), k, HYFI_SIZE_ARGS(f, total));
    }
}

/* A simulation (docs/simulation.md): every rank is a simulated node of its
 * own (scripts/simulate.sh), and this host's memory says nothing about it
 * (hyfi's host buffers and StarPU's copies in main memory are folded, see
 * handles.c: they cost this host no memory). With simulated GPUs the places'
 * data lives on them: warn_gpu_memory compared it with their memory. Without,
 * each rank against the simulated node's main memory, where StarPU knows it
 * (STARPU_LIMIT_CPU_MEM is handled with the real build's limit). */
static hyfi_status check_simulated_memory(hyfi_graph *g)
{
    if (g->ctx->ncuda > 0) return HYFI_OK;
    const starpu_ssize_t ram = starpu_memory_get_total(STARPU_MAIN_RAM);
    if (ram <= 0) return HYFI_OK;
    for (int r = 0; r < g->ctx->nranks; r++) {
        int worst;
        const double need = hyfi_plan_rank_need(g->cc->pl, r, &worst);
        const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){need, (double)ram}, 2, 0);
        if (need > (double)ram)
            return hyfi_call_fail(g, HYFI_ERR_NOMEM,
                                  "the plan needs an estimated %.*f %s of memory on simulated "
                                  "rank %d (from stage %d on), more than its simulated node's "
                                  "%.*f %s (machine STARPU_HOSTNAME's description); "
                                  MEMORY_FIXES, HYFI_SIZE_ARGS(f, need), r, worst, HYFI_SIZE_ARGS(f, ram));
    }
    return HYFI_OK;
}

/* Refuse, at compile, a plan whose places cannot fit, instead of a run that
 * waits for memory forever or is killed:
 *   - under StarPU's per-process limit (STARPU_LIMIT_CPU_MEM, MB), each rank
 *     against the limit;
 *   - without it, the ranks of each node together against the node's
 *     physical memory. Ranks are taken to be placed on nodes in blocks of
 *     MPI_LOCALNRANKS (mpiexec's default), on nodes like this one;
 *   - in a simulation, against the simulated devices (check_simulated_memory).
 * Every rank decides the same (the plan and the nodes are the same
 * everywhere), so that all fail together. */
static hyfi_status check_memory_limit(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int R = g->ctx->nranks;
    const long limit = g->ctx->mem_limit_mb;
    int worst;
    if (limit > 0) {
        for (int r = 0; r < R; r++) {
            const double need = hyfi_plan_rank_need(pl, r, &worst);
            const int wstage = worst;
            const double lim = (double)limit * 1e6;
            if (need <= lim) continue;
            if (g->ctx->swap_node >= 0) {
                /* out-of-core: StarPU evicts to the disk what is above the limit */
                const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){need, lim}, 2, 1e6);
                if (g->ctx->rank == r && g->ctx->verbose)
                    hyfi_ctx_log(g->ctx, HYFI_LOG_INFO,
                                 "rank %d: the plan needs an estimated %.*f MB, above the "
                                 "memory limit of %ld MB: StarPU will swap about %.*f MB to "
                                 "disk (slower)",
                            r, f.digits, need / 1e6, limit, f.digits, (need - lim) / 1e6);
                continue;
            }
            /* The fixes that lower this rank's estimate by 1% or more (not
             * --recompute stage of one stage, nor one place per rank where it
             * holds one), with their estimates, "fits" where within the limit. */
            static const char *const mode[] = {"none", "stage", "layer"};
            double e[3] = {need, need, need}, place = 0, place_layer = 0;
            for (int m = HYFI_RECOMPUTE_STAGE; m <= HYFI_RECOMPUTE_LAYER; m++) {
                const size_t *act = pl->stage_act_mode + (size_t)m * pl->nstages;
                const double x = rank_need_with(pl, r, act, &worst);
                if (m != (int)pl->recompute && x < 0.99 * need) e[m] = x;
            }
            for (int q = 0; q < pl->nplaces; q++) {
                const double b = hyfi_plan_place_bytes(pl, q),
                             bl = place_bytes_with(pl, q, pl->stage_act_mode +
                                                              2 * (size_t)pl->nstages);
                if (b > place) place = b;
                if (bl > place_layer) place_layer = bl;
            }
            if (place >= 0.99 * need) place = place_layer = need;
            if (place_layer >= 0.99 * place) place_layer = place;
            const hyfi_size_fmt f =
                hyfi_sizes_fmt((const double[]){need, lim, e[1], e[2], place, place_layer}, 6, 1e6);
            char fixes[320] = ""; /* (the message fits 512 bytes) */
            size_t n = 0;
#define FIX_ADD(...)                                                                        \
    (n += (size_t)snprintf(fixes + n, n < sizeof fixes ? sizeof fixes - n : 0, __VA_ARGS__))
#define FITS(x) ((x) <= lim ? " (fits)" : "")
            for (int m = HYFI_RECOMPUTE_LAYER; m >= HYFI_RECOMPUTE_STAGE; m--)
                if (e[m] < need)
                    FIX_ADD("--recompute %s %.*f%s; ", mode[m], f.digits, e[m] / 1e6, FITS(e[m]));
            if (place < need)
                FIX_ADD("one place per rank (stages, tiles on more ranks) %.*f%s for the largest",
                        f.digits, place / 1e6, FITS(place));
            if (place_layer < place)
                FIX_ADD(", %.*f%s with --recompute layer", f.digits, place_layer / 1e6,
                        FITS(place_layer));
            FIX_ADD("%s--swap-dir DIR trains, ~%.*f swapped to disk", place < need ? "; " : "",
                    f.digits, (need - lim) / 1e6);
#undef FIX_ADD
#undef FITS
            return hyfi_call_fail(g, HYFI_ERR_NOMEM,
                                  "the plan needs an estimated %.*f MB on rank %d (stage %d on), "
                                  "above the memory limit of %ld MB per process (--mem-limit-mb, "
                                  "STARPU_LIMIT_CPU_MEM): StarPU would wait forever. Fixes, MB "
                                  "on rank %d: %s",
                                  f.digits, need / 1e6, r, wstage, limit, r, fixes);
        }
        return HYFI_OK;
    }
    warn_gpu_memory(g);
    if (HYFI_SIMULATION) return check_simulated_memory(g);
    const double phys = hyfi_host_memory_bytes(g->ctx);
    if (phys <= 0) return HYFI_OK;
    int per_node = g->ctx->local_ranks > 0 ? g->ctx->local_ranks : R;
    if (per_node > R) per_node = R;
    for (int r0 = 0; r0 < R; r0 += per_node) {
        double need = 0;
        int first = -1;
        for (int r = r0; r < R && r < r0 + per_node; r++) {
            const double n = hyfi_plan_rank_need(pl, r, &worst);
            if (n > 0 && first < 0) first = worst;
            need += n;
        }
        if (need > phys) {
            const int r1 = (r0 + per_node < R ? r0 + per_node : R) - 1;
            char who[64];
            if (r0 == r1) snprintf(who, sizeof who, "rank %d", r0);
            else snprintf(who, sizeof who, "ranks %d-%d (one node)", r0, r1);
            const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){need, phys}, 2, 0);
            return hyfi_call_fail(g, HYFI_ERR_NOMEM,
                                  "the plan needs an estimated %.*f %s of host memory on %s "
                                  "(from stage %d on), more than the node's %.*f %s; it would "
                                  "wait for memory or be killed; " MEMORY_FIXES
                                  " (with swap space, STARPU_LIMIT_CPU_MEM=MB per process lets "
                                  "it run past physical memory)",
                                  HYFI_SIZE_ARGS(f, need), who, first, HYFI_SIZE_ARGS(f, phys));
        }
    }
    return HYFI_OK;
}

/* Re-materialisation under `mode`: each node's segment (its stage, or its
 * layer), the tensors dropped after their segment's forward (activations
 * only its own segment reads; not the loss, not a tiled tensor gathered
 * whole) and the nodes re-run before the segment's backward (those that make
 * them; fused-halo groups whole or not at all). */
static void recompute_classify(const hyfi_graph *g, hyfi_recompute mode, int *seg,
                               unsigned char *rerun, unsigned char *drop)
{
    const hyfi_plan *pl = g->cc->pl;
    for (int i = 0; i < g->nnodes; i++)
        seg[i] = mode == HYFI_RECOMPUTE_LAYER ? pl->layer_of_node[i] : g->nodes[i].stage;
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        drop[i] = mode != HYFI_RECOMPUTE_NONE && t->kind == T_ACT && t != g->loss &&
                  t != hyfi_loss_logits(g) && t->producer >= 0 && !(t->tl && t->tl->full);
    }
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            const hyfi_tensor *x = nd->in[k];
            if (x->producer >= 0 && seg[x->producer] != seg[i]) drop[x->id] = 0;
        }
    }
    for (int i = 0; i < g->nnodes; i++) rerun[i] = drop[g->nodes[i].out->id];
    if (pl->K > 0) hyfi_spatial_recompute_groups(g, seg, rerun, drop);
}

/* The activation estimate of each stage under each recompute mode
 * (stage_act_mode) and the plan's own (stage_act_bytes), with the plan's
 * segments and dropped tensors (rc_*). Per micro-batch in flight: the tensors
 * kept (all without recompute), the saved ones; plus the values of the largest
 * segment being recomputed, and the gradients of one micro-batch's backward
 * (with layer segments: of the kept tensors and one segment's). Tiled stages:
 * per tile. */
static hyfi_status estimate_memory(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    const int S = pl->nstages, M = pl->nmb, nseg = pl->nlayers + S;
    const hyfi_recompute own = g->plan_cfg.recompute;
    pl->recompute = own;
    pl->stage_act_mode = calloc((size_t)3 * S, sizeof(size_t));
    pl->rc_seg = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(int));
    pl->rc_rerun = calloc((size_t)(g->nnodes ? g->nnodes : 1), 1);
    pl->rc_drop = calloc((size_t)(g->ntensors ? g->ntensors : 1), 1);
    size_t *kept = calloc((size_t)S, sizeof(size_t)), *kgrad = calloc((size_t)S, sizeof(size_t));
    size_t *sdrop = calloc((size_t)S, sizeof(size_t)), *maxseg = calloc((size_t)S, sizeof(size_t));
    size_t *segb = calloc((size_t)nseg, sizeof(size_t));
    int *segs = malloc((size_t)(g->nnodes ? g->nnodes : 1) * sizeof(int));
    unsigned char *rerun = calloc((size_t)(g->nnodes ? g->nnodes : 1), 1);
    unsigned char *drop = calloc((size_t)(g->ntensors ? g->ntensors : 1), 1);
    hyfi_status st = HYFI_OK;
    if (!pl->stage_act_mode || !pl->rc_seg || !pl->rc_rerun || !pl->rc_drop || !kept || !kgrad ||
        !sdrop || !maxseg || !segb || !segs || !rerun || !drop) {
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory building the plan");
        goto done;
    }
    for (int i = 0; i < g->nnodes; i++)
        pl->stage_flops[g->nodes[i].stage] += hyfi_op_flops(&g->nodes[i]);
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        const size_t b = t->numel * 4;
        if (t->kind == T_PARAM) {
            pl->stage_params[t->stage] += t->numel;
            pl->stage_param_bytes[t->stage] += 3 * b;
        } else if (t->kind == T_STATE) {
            pl->stage_param_bytes[t->stage] += b;
        }
    }
    for (int mode = HYFI_RECOMPUTE_NONE; mode <= HYFI_RECOMPUTE_LAYER; mode++) {
        recompute_classify(g, (hyfi_recompute)mode, segs, rerun, drop);
        memset(kept, 0, (size_t)S * sizeof *kept);
        memset(kgrad, 0, (size_t)S * sizeof *kgrad);
        memset(sdrop, 0, (size_t)S * sizeof *sdrop);
        memset(maxseg, 0, (size_t)S * sizeof *maxseg);
        memset(segb, 0, (size_t)nseg * sizeof *segb);
        for (int i = 0; i < g->ntensors; i++) {
            const hyfi_tensor *t = g->tensors[i];
            if (t->kind != T_ACT && t->kind != T_SAVED) continue;
            /* bf16 runs store activations (and their gradients) in 2 bytes */
            const size_t b = t->numel * hyfi_tensor_elem(g, t);
            const size_t per_mb = t->batched ? b / (size_t)M : b;
            if (drop[i]) {
                segb[segs[t->producer]] += per_mb;
                sdrop[t->stage] += per_mb;
            } else {
                kept[t->stage] += per_mb;
                if (t->kind == T_ACT) kgrad[t->stage] += b / (size_t)M;
            }
        }
        for (int i = 0; i < g->nnodes; i++) {
            const int s = g->nodes[i].stage;
            if (segb[segs[i]] > maxseg[s]) maxseg[s] = segb[segs[i]];
        }
        for (int s = 0; s < S; s++) {
            const size_t grads = kgrad[s] + (mode == HYFI_RECOMPUTE_LAYER ? maxseg[s] : sdrop[s]);
            pl->stage_act_mode[(size_t)mode * S + s] =
                (kept[s] * (size_t)pl->inflight[s] + maxseg[s] + grads) /
                (size_t)(s < pl->K ? pl->P : 1);
        }
        if (mode != (int)own) continue;
        memcpy(pl->rc_seg, segs, (size_t)g->nnodes * sizeof *segs);
        memcpy(pl->rc_rerun, rerun, (size_t)g->nnodes);
        memcpy(pl->rc_drop, drop, (size_t)g->ntensors);
        for (int s = 0; s < S; s++)
            pl->stage_act_bytes[s] = pl->stage_act_mode[(size_t)mode * S + s];
    }
done:
    free(kept);
    free(kgrad);
    free(sdrop);
    free(maxseg);
    free(segb);
    free(segs);
    free(rerun);
    free(drop);
    return st;
}

/* One CPU worker for a chain (docs/architecture.md, "One CPU worker for a
 * chain"). A plan of one place and one micro-batch on CPU workers only, whose
 * graph is a chain (its longest path holds at least 80% of its nodes: ResNets
 * and plain CNNs; an AmoebaNet cell's branches make it about a third) has no
 * two big kernels to run side by side, only the next layer's tasks and the
 * previous layers' weight gradients and updates. On two cores that overlap ran
 * each kernel about 1.5x slower than alone (cache and memory contention), and
 * lending the idle cores happens only while nothing else is ready, so the chain
 * measured faster with every task on one worker that owns every core: ResNet-110
 * v2 +33%, the CNN +40%, ResNet-50 at 128^2 +9%, ResNet-18 and ResNet-50 at 64^2
 * within noise; AmoebaNet-D -20-29% (docs/bench-cpu.md, "One CPU worker for
 * chains"). Off where the threads per kernel are set (hyfi_ctx_config.cpu_threads)
 * or lending is (lend_min_bytes < 0), so the exactness tests keep one thread per
 * kernel; hyfi_plan_config.one_cpu_worker -1 turns it off, 1 drops the chain test
 * (the other conditions stay). */
static void one_cpu_worker(hyfi_graph *g, hyfi_plan *pl, int MB)
{
    hyfi_ctx *ctx = g->ctx;
    const int total = ctx->ncpu * ctx->cpu_threads;
    const int mode = g->plan_cfg.one_cpu_worker > 0 ? 1 : g->plan_cfg.one_cpu_worker < 0 ? 0 : -1;
    int on = mode != 0 && ctx->ncpu > 1 && ctx->ncuda == 0 && pl->nplaces == 1 && MB == 1 &&
             pl->place_rank[0] == ctx->rank && !ctx->cpu_threads_set && ctx->lend_min_bytes > 0;
    if (on && mode < 0) {
        /* longest path, in nodes, of the graph (nodes are in topological order) */
        int *depth = calloc((size_t)(g->nnodes > 0 ? g->nnodes : 1), sizeof *depth);
        int longest = 0;
        if (!depth) on = 0;
        for (int i = 0; depth && i < g->nnodes; i++) {
            int d = 0;
            for (int k = 0; k < g->nodes[i].nin; k++) {
                const int pi = g->nodes[i].in[k]->producer;
                if (pi >= 0 && depth[pi] > d) d = depth[pi];
            }
            depth[i] = d + 1;
            if (depth[i] > longest) longest = depth[i];
        }
        free(depth);
        on = on && 5 * longest >= 4 * g->nnodes;
    }
    int w = -1;
    if (on && starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, &w, 1) < 1) on = 0;
    if (on) {
        pl->place_worker[0] = w;
        hyfi_ops_cores_init(1, total, ctx->lend_min_bytes);
    } else {
        hyfi_ops_cores_init(ctx->ncpu, ctx->cpu_threads, ctx->lend_min_bytes);
    }
    pl->one_cpu_worker = on;
}

/* The plan of g->plan_cfg on R ranks. real: this run's (pins places to
 * workers, splits the cores, checks the memory); else an estimate only, for
 * any R and without touching StarPU (hyfi_plan_estimate). */
static hyfi_status plan_make(hyfi_graph *g, int R, int real)
{
    hyfi_plan_free(g);
    hyfi_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory building the plan");
    g->cc->pl = pl;
    const hyfi_plan_config *cfg = &g->plan_cfg;
    const int nl = hyfi_layer_count(g), S = cfg->stages > 1 ? cfg->stages : 1;
    const int MB = cfg->parts > 1 ? cfg->parts : 1;
    pl->copies = cfg->gems == HYFI_GEMS_NONE   ? 1
                 : cfg->gems == HYFI_GEMS_MAST ? 2
                                               : 2 * (cfg->replications > 1 ? cfg->replications : 1);
    pl->groups = cfg->data_parallel > 1 ? cfg->data_parallel : 1;
    pl->nrep = pl->copies * pl->groups;
    const int M = MB * pl->nrep;
    char err[400];
    pl->nlayers = nl;
    pl->nstages = S;
    pl->nmb = M;
    pl->mbr = MB;
    pl->schedule = cfg->schedule;
    pl->layer_of_node = malloc((size_t)g->nnodes * sizeof(int));
    pl->layer_stage = malloc((size_t)nl * sizeof(int));
    pl->stage_rank = malloc((size_t)S * sizeof(int));
    pl->stage_worker = malloc((size_t)S * sizeof(int));
    pl->inflight = calloc((size_t)S, sizeof(int));
    pl->events = malloc((size_t)2 * S * M * sizeof *pl->events);
    pl->stage_flops = calloc((size_t)S, sizeof(double));
    pl->stage_params = calloc((size_t)S, sizeof(size_t));
    pl->stage_param_bytes = calloc((size_t)S, sizeof(size_t));
    pl->stage_act_bytes = calloc((size_t)S, sizeof(size_t));
    pl->pred_out = calloc((size_t)R, sizeof(size_t));
    pl->pred_in = calloc((size_t)R, sizeof(size_t));
    pl->pred_halo_out = calloc((size_t)R, sizeof(size_t));
    pl->pred_halo_in = calloc((size_t)R, sizeof(size_t));
    int *counts = malloc((size_t)S * sizeof(int));
    double *cost = calloc((size_t)nl, sizeof(double));
    hyfi_status st = HYFI_OK;
    if (!pl->layer_of_node || !pl->layer_stage || !pl->stage_rank || !pl->stage_worker ||
        !pl->inflight || !pl->events || !pl->stage_flops || !pl->stage_params ||
        !pl->stage_param_bytes || !pl->stage_act_bytes || !pl->pred_out || !pl->pred_in ||
        !pl->pred_halo_out || !pl->pred_halo_in ||
        !counts || !cost) {
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory building the plan");
        goto out;
    }
    for (int i = 0; i < g->nnodes; i++)
        pl->layer_of_node[i] = g->nlayers ? (g->nodes[i].layer < 0 ? 0 : g->nodes[i].layer) : i;

    /* stages: layers per stage */
    if (S > nl) {
        st = hyfi_call_fail(g, HYFI_ERR_ARG, "the plan asks for %d stages (--split-size) but "
                                              "the model has only %d layers; use at most %d "
                                              "stages", S, nl, nl);
        goto out;
    }
    if (cfg->balance) {
        if (hyfi_balance_check(cfg->balance, S, nl, err, sizeof err)) {
            st = hyfi_call_fail(g, HYFI_ERR_ARG, "--balance: %s", err);
            goto out;
        }
        memcpy(counts, cfg->balance, (size_t)S * sizeof(int));
    } else {
        for (int i = 0; i < g->nnodes; i++) cost[pl->layer_of_node[i]] += node_cost(g, i);
        if (hyfi_balance_by_cost(cost, nl, S, counts)) {
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "balancing %d layers over %d stages failed",
                                 nl, S);
            goto out;
        }
    }
    for (int s = 0, l = 0; s < S; s++)
        for (int k = 0; k < counts[s]; k++) pl->layer_stage[l++] = s;
    for (int i = 0; i < g->nnodes; i++) g->nodes[i].stage = pl->layer_stage[pl->layer_of_node[i]];

    /* micro-batches */
    pl->batch = -1;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!batch_tensor(t) || !t->batched) continue;
        if (pl->batch < 0) pl->batch = t->dims[0];
    }
    if (pl->batch < 0) pl->batch = 1;
    if (pl->batch % M != 0) {
        if (pl->nrep > 1)
            st = hyfi_call_fail(g, HYFI_ERR_ARG, "the global batch of %d images cannot be cut "
                                                  "into %d replicas x %d micro-batches (--parts "
                                                  "%d); use a global batch that is a multiple of "
                                                  "%d (--batch-size per replica a multiple of "
                                                  "--parts)", pl->batch, pl->nrep, MB, MB, M);
        else
            st = hyfi_call_fail(g, HYFI_ERR_ARG, "the batch of %d images cannot be cut into %d "
                                                  "equal micro-batches (--parts %d); use a batch "
                                                  "that is a multiple of %d, or --parts dividing "
                                                  "%d", pl->batch, M, M, M, pl->batch);
        goto out;
    }

    /* places on ranks: a tiled stage has one place per tile */
    pl->K = 0;
    pl->P = pl->grid_rows = pl->grid_cols = 1;
    if (cfg->spatial_stages > 0 && cfg->spatial_parts > 1) {
        if ((st = hyfi_spatial_plan_grid(g)) != HYFI_OK) goto out;
    }
    pl->nplaces1 = pl->K * pl->P + (S - pl->K);
    pl->nplaces = pl->nplaces1 * pl->nrep;
    pl->place_rank = malloc((size_t)pl->nplaces * sizeof(int));
    pl->place_worker = malloc((size_t)pl->nplaces * sizeof(int));
    pl->place_stage = malloc((size_t)pl->nplaces * sizeof(int));
    pl->stage_place0 = malloc((size_t)S * sizeof(int));
    if (!pl->place_rank || !pl->place_worker || !pl->place_stage || !pl->stage_place0) {
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory building the plan");
        goto out;
    }
    for (int s = 0, q = 0; s < S; s++) {
        pl->stage_place0[s] = q;
        for (int t = 0; t < (s < pl->K ? pl->P : 1); t++) pl->place_stage[q++] = s;
    }
    for (int q = pl->nplaces1; q < pl->nplaces; q++)
        pl->place_stage[q] = pl->place_stage[q % pl->nplaces1];
    if (hyfi_replicas_to_ranks(pl->nplaces1, pl->place_stage, pl->copies, pl->groups, R,
                               pl->place_rank, err, sizeof err)) {
        st = hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
        goto out;
    }
    /* A rank with a CUDA worker for each of its devices pins each place to
     * one. A device is a place of copy 0 of a data-parallel group: GEMS's
     * mirrored copy runs on its original's devices (stage s on those of stage
     * S-1-s, as on the ranks), so with GEMS a rank of 8 places needs 4 GPUs.
     * One device is pinned too: left to the scheduler, its small tasks (SGD,
     * ReLU) went to CPU workers, and their parameters and activations crossed
     * the host link every step (docs/results.md, "One GPU per rank: pinned"). */
    {
        int ndev = 0;
        for (int q = 0; q < pl->nplaces; q++)
            ndev += pl->place_rank[q] == g->ctx->rank && hyfi_place_home(pl, q) == q;
        for (int q = 0, k = 0; q < pl->nplaces; q++) {
            pl->place_worker[q] = -1;
            if (!real || pl->place_rank[q] != g->ctx->rank || g->ctx->ncuda < ndev)
                continue;
            const int home = hyfi_place_home(pl, q);
            pl->place_worker[q] = home == q ? g->ctx->cuda_worker[k++] : pl->place_worker[home];
        }
    }
    if (real) one_cpu_worker(g, pl, MB);
    for (int s = 0; s < S; s++) {
        pl->stage_rank[s] = pl->place_rank[pl->stage_place0[s]];
        pl->stage_worker[s] = pl->place_worker[pl->stage_place0[s]];
    }

    /* schedule */
    /* schedule: every replica runs the schedule of its own micro-batches; the
     * replicas' events are merged by tick (each replica's order kept) */
    pl->nticks = hyfi_pipe_schedule(S, MB, cfg->schedule == HYFI_SCHEDULE_1F1B ? HYFI_PIPE_1F1B
                                                                               : HYFI_PIPE_GPIPE,
                                    pl->events, pl->inflight);
    if (pl->nticks < 0) {
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "building the pipeline schedule failed");
        goto out;
    }
    pl->nevents = 2 * S * M;
    if (pl->nrep > 1) {
        const int n1 = 2 * S * MB;
        hyfi_pipe_event *one = malloc((size_t)n1 * sizeof *one);
        if (!one) {
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory building the plan");
            goto out;
        }
        memcpy(one, pl->events, (size_t)n1 * sizeof *one);
        int k = 0;
        for (int tick = 0, i = 0; i < n1; tick++) {
            int j = i;
            while (j < n1 && one[j].tick == tick) j++;
            for (int r = 0; r < pl->nrep; r++)
                for (int x = i; x < j; x++) {
                    pl->events[k] = one[x];
                    pl->events[k++].mb += r * MB;
                }
            i = j;
        }
        free(one);
    }
    pl->trivial = S == 1 && M == 1;

    /* Owners: a tensor lives on the stage of the op that produces (activations,
     * saved tensors) or owns it (parameters, state), inputs and labels on the
     * stage of their first consumer. */
    for (int i = 0; i < g->ntensors; i++) g->tensors[i]->stage = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        nd->out->stage = nd->stage;
        for (int k = 0; k < 4; k++)
            if (nd->p[k]) nd->p[k]->stage = nd->stage;
        for (int k = 0; k < 2; k++)
            if (nd->s[k]) nd->s[k]->stage = nd->stage;
        for (int k = 0; k < nd->nin; k++)
            if (nd->in[k]->producer < 0 && nd->in[k]->stage < 0) nd->in[k]->stage = nd->stage;
    }
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->stage < 0) t->stage = 0; /* unused input */
        t->rank = pl->stage_rank[t->stage];
    }
    if ((st = hyfi_spatial_plan(g)) != HYFI_OK) goto out;

    /* estimates per stage, under each recompute mode */
    if ((st = estimate_memory(g)) != HYFI_OK) goto out;
    if (real) st = check_memory_limit(g);
out:
    free(counts);
    free(cost);
    if (st != HYFI_OK) hyfi_plan_free(g);
    return st;
}

int hyfi_place_home(const hyfi_plan *pl, int q)
{
    const int k = q / pl->nplaces1, d = k / pl->copies, c = k % pl->copies;
    return d * pl->copies * pl->nplaces1 +
           hyfi_copy_place(pl->nplaces1, pl->place_stage, c, q % pl->nplaces1);
}

hyfi_status hyfi_plan_build(hyfi_graph *g) { return plan_make(g, g->ctx->nranks, 1); }

hyfi_status hyfi_plan_estimate(hyfi_graph *g, int nranks) { return plan_make(g, nranks, 0); }

double hyfi_plan_rank_bytes(const hyfi_graph *g, int r)
{
    if (!g || !g->cc || !g->cc->pl) return 0;
    int worst;
    return hyfi_plan_rank_need(g->cc->pl, r, &worst);
}
