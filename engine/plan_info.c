/* The plan's inspection: what hyfi_graph_compile decided, per stage and rank
 * (hyfi_plan_stage, hyfi_plan_describe, the predicted bytes between places).
 * The plan itself: plan.c. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layer_name(const hyfi_graph *g, int l)
{
    return g->nlayers ? g->layer_names[l] : g->nodes[l].name;
}


int hyfi_plan_stage_count(const hyfi_graph *g)
{
    return g && g->cc && g->cc->pl ? g->cc->pl->nstages : 0;
}
int hyfi_plan_parts(const hyfi_graph *g)
{
    return g && g->cc && g->cc->pl ? g->cc->pl->nmb : 0;
}

hyfi_status hyfi_plan_stage(const hyfi_graph *g, int s, hyfi_stage_info *info)
{
    if (!g || !info) return hyfi_fail(HYFI_ERR_ARG, "hyfi_plan_stage: graph or info is NULL");
    if (!g->cc || !g->cc->pl) return hyfi_fail(HYFI_ERR_STATE,
                                               "hyfi_plan_stage: compile the graph first");
    const hyfi_plan *pl = g->cc->pl;
    if (s < 0 || s >= pl->nstages)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_plan_stage: stage %d outside [0, %d)", s,
                         pl->nstages);
    memset(info, 0, sizeof *info);
    info->first_layer = -1;
    for (int l = 0; l < pl->nlayers; l++) {
        if (pl->layer_stage[l] != s) continue;
        if (info->first_layer < 0) info->first_layer = l;
        info->nlayers++;
    }
    info->first_layer_name = layer_name(g, info->first_layer);
    info->last_layer_name = layer_name(g, info->first_layer + info->nlayers - 1);
    info->rank = pl->stage_rank[s];
    info->worker = pl->stage_worker[s];
    info->inflight = pl->inflight[s];
    info->tiles = s < pl->K ? pl->P : 1;
    info->params = pl->stage_params[s];
    info->param_bytes = pl->stage_param_bytes[s];
    info->act_bytes = pl->stage_act_bytes[s];
    info->flops = pl->stage_flops[s];
    return HYFI_OK;
}

int hyfi_plan_rank_places(const hyfi_graph *g, int r)
{
    if (!g || !g->cc || !g->cc->pl) return 0;
    int n = 0;
    for (int q = 0; q < g->cc->pl->nplaces; q++) n += g->cc->pl->place_rank[q] == r;
    return n;
}

size_t hyfi_plan_step_bytes(const hyfi_graph *g, int from, int to)
{
    if (!g || !g->cc || !g->cc->pl) return 0;
    const int R = g->ctx->nranks, me = g->ctx->rank;
    if (from < 0 || to < 0 || from >= R || to >= R) return 0;
    return from == me ? g->cc->pl->pred_out[to] : to == me ? g->cc->pl->pred_in[from] : 0;
}

size_t hyfi_plan_step_halo_bytes(const hyfi_graph *g, int from, int to)
{
    if (!g || !g->cc || !g->cc->pl) return 0;
    const int R = g->ctx->nranks, me = g->ctx->rank;
    if (from < 0 || to < 0 || from >= R || to >= R) return 0;
    return from == me ? g->cc->pl->pred_halo_out[to]
           : to == me ? g->cc->pl->pred_halo_in[from]
                      : 0;
}

size_t hyfi_plan_step_total_bytes(const hyfi_graph *g)
{
    return g && g->cc && g->cc->pl ? g->cc->pl->pred_total : 0;
}

size_t hyfi_plan_step_total_halo_bytes(const hyfi_graph *g)
{
    return g && g->cc && g->cc->pl ? g->cc->pl->pred_halo_total : 0;
}

size_t hyfi_plan_halo_volume(const hyfi_graph *g)
{
    return g && g->cc && g->cc->pl ? g->cc->pl->halo_volume : 0;
}

size_t hyfi_plan_describe(const hyfi_graph *g, char *buf, size_t len)
{
    if (!g || !g->cc || !g->cc->pl) return 0;
    const hyfi_plan *pl = g->cc->pl;
    size_t n = 0;
#define OUT(...)                                                                          \
    do {                                                                                  \
        int k_ = snprintf(buf && n < len ? buf + n : NULL, buf && n < len ? len - n : 0, \
                          __VA_ARGS__);                                                   \
        if (k_ > 0) n += (size_t)k_;                                                      \
    } while (0)
    OUT("plan: %d stage%s x %d micro-batch%s of %d (schedule %s) on %d rank%s, %d layers%s\n",
        pl->nstages, pl->nstages == 1 ? "" : "s", pl->nmb, pl->nmb == 1 ? "" : "es",
        pl->batch / pl->nmb, pl->schedule == HYFI_SCHEDULE_1F1B ? "1f1b" : "gpipe",
        g->ctx->nranks, g->ctx->nranks == 1 ? "" : "s", pl->nlayers,
        pl->recompute == HYFI_RECOMPUTE_STAGE   ? ", recompute per stage"
        : pl->recompute == HYFI_RECOMPUTE_LAYER ? ", recompute per layer"
                                                : "");
    if (pl->one_cpu_worker)
        OUT("  a chain: one CPU worker runs every task on all %d cores (a worker per core "
            "instead: hyfi_plan_config.one_cpu_worker = -1, in hyfi-train "
            "HYFI_ONE_CPU_WORKER=0)\n", g->ctx->ncpu * g->ctx->cpu_threads);
    if (g->ctx->mem_limit_mb > 0)
        OUT("  memory limit %ld MB per rank%s\n", g->ctx->mem_limit_mb,
            g->ctx->swap_node >= 0 ? ", disk swap" : "");
    for (int s = 0; s < pl->nstages; s++) {
        hyfi_stage_info si;
        if (hyfi_plan_stage(g, s, &si) != HYFI_OK) break;
        char where[96];
        if (si.tiles > 1)
            snprintf(where, sizeof where, "%d tiles (%dx%d) on ranks %d-%d", si.tiles,
                     pl->grid_rows, pl->grid_cols, si.rank,
                     pl->place_rank[pl->stage_place0[s] + si.tiles - 1]);
        else
            snprintf(where, sizeof where, "rank %d%s", si.rank,
                     si.worker >= 0 ? " (pinned worker)" : "");
        OUT("  stage %d: layers %d-%d (%s .. %s), %s, %zu params (%.1f MB with grads "
            "and momentum), %.3g GFLOP fwd/step, activations ~%.1f MB%s (%d in flight)\n",
            s, si.first_layer, si.first_layer + si.nlayers - 1, si.first_layer_name,
            si.last_layer_name, where, si.params, (double)si.param_bytes / 1e6, si.flops / 1e9,
            (double)si.act_bytes / 1e6, si.tiles > 1 ? " per tile" : "", si.inflight);
    }
    if (pl->nrep > 1) {
        const hyfi_plan_config *c = &g->plan_cfg;
        OUT("  replicas: %d (%s%d data-parallel group%s), %d micro-batch%s each; gradients "
            "all-reduced by %s\n",
            pl->nrep,
            c->gems == HYFI_GEMS_MAST     ? "GEMS MAST: 2 copies x "
            : c->gems == HYFI_GEMS_MASTER ? "GEMS MASTER: "
                                          : "",
            pl->groups, pl->groups == 1 ? "" : "s", pl->mbr, pl->mbr == 1 ? "" : "es",
            c->allreduce == HYFI_ALLREDUCE_RING   ? "ring"
            : c->allreduce == HYFI_ALLREDUCE_TREE ? "tree"
                                                  : "tree (small) / ring (large)");
        if (c->gems == HYFI_GEMS_MASTER) OUT("    (%d copies per group)\n", pl->copies);
        for (int r = 0; r < pl->nrep; r++) {
            OUT("    replica %d (copy %d%s, group %d): stages on ranks", r, r % pl->copies,
                (r % pl->copies) & 1 ? ", mirrored" : "", r / pl->copies);
            for (int s = 0; s < pl->nstages; s++) OUT(" %d", hyfi_stage_rank(pl, r, s));
            OUT("\n");
        }
    }
    if (g->ctx->nranks > 1)
        OUT("  predicted traffic between ranks: %zu bytes per step\n", pl->pred_total);
    if (pl->K > 0) {
        int groups, fused, strips;
        hyfi_spatial_halo_counts(g, &groups, &fused, &strips);
        OUT("  spatial: stages 0-%d tiled into %d (%s), %d halo strips per micro-batch, halo "
            "exchange between ranks %zu bytes per step",
            pl->K - 1, pl->P,
            g->plan_cfg.slice == HYFI_SLICE_VERTICAL     ? "vertical"
            : g->plan_cfg.slice == HYFI_SLICE_HORIZONTAL ? "horizontal"
                                                         : "square",
            strips, pl->halo_volume);
        if (groups) OUT(", %d fused-halo groups of %d ops", groups, fused);
        OUT("\n");
    }
#undef OUT
    return n;
}
