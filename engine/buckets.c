/* The step end's data across replicas, formed from the plan before any
 * lowering (compile.c: plan -> keys -> lowerings -> programs): the packed
 * running statistics' groups, and the all-reduce's buckets of the parameters
 * that receive a gradient, with their keys registered. reduce.c emits the
 * step end's tasks over them.
 *
 * Which parameters receive a gradient is a pure function of the graph
 * (grad_flow): the loss's reach backwards through the ops, by the rule the
 * lowerings follow (compile.c, build_train: an op's backward runs when its
 * output, or its fused ReLU's, received a gradient; it writes the gradients of
 * its parameters and of the inputs that need one). After the lowerings,
 * hyfi_buckets_check compares the buckets with the gradients the tasks wrote. */
#include "emit.h"

#include <stdio.h>
#include <stdlib.h>

/* Statistics per packed group: a group's merges start once its last batch
 * norm's forward is done, so a stage's statistics go in groups of batch norms
 * in forward order, the first merging while the later layers still run (one
 * group per stage kept ResNet-56's 64-replica tree, 6 levels, from starting
 * before the stage's whole forward, and made its steps slower than merging
 * each statistic) */

int hyfi_stats_register(hyfi_graph *g)
{
    if (!hyfi_stats_packed(g)) return 0;
    hyfi_compiled *cc = g->cc;
    const hyfi_plan *pl = cc->pl;
    const int R = pl->nrep;
    if (!(cc->sgroups = calloc((size_t)g->nnodes + 1, sizeof *cc->sgroups))) return -1;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!hyfi_op_batch_statistics(nd)) continue;
        const double a = 1.0 - (double)nd->a.bn.momentum;
        /* the stage's open group of this momentum, while it has fewer than
         * HYFI_STATS_GROUP statistics (the batch norms in forward order) */
        hyfi_sgroup *sg = NULL;
        for (int j = 0; j < cc->nsgroups && !sg; j++)
            if (cc->sgroups[j].stage == nd->stage && cc->sgroups[j].a == a &&
                cc->sgroups[j].n < HYFI_STATS_GROUP)
                sg = &cc->sgroups[j];
        if (!sg) {
            sg = &cc->sgroups[cc->nsgroups++];
            sg->stage = nd->stage;
            sg->a = a;
            sg->t = calloc(2 * (size_t)g->nnodes, sizeof *sg->t);
            if (!sg->t) return -1;
        }
        for (int j = 2; j < 4; j++) {
            sg->t[sg->n++] = nd->p[j];
            sg->numel += nd->p[j]->numel;
        }
    }
    for (int gi = 0; gi < cc->nsgroups; gi++) {
        hyfi_sgroup *sg = &cc->sgroups[gi];
        char sfx[48];
        for (int k = 0; k < R; k++) {
            const int owner = hyfi_stage_rank(pl, k, sg->stage);
            snprintf(sfx, sizeof sfx, ".stage%d.group%d", sg->stage, gi);
            hyfi_reg(g, HYFI_KEY_R(HK_SVAL, gi, k, k), NULL, sg->numel, sizeof(float), owner,
                     HC_ALLREDUCE, HYFI_KEEP, "running_stats", sfx, k, R);
            snprintf(sfx, sizeof sfx, ".stage%d.group%d.start", sg->stage, gi);
            hyfi_reg(g, HYFI_KEY_R(HK_SSAVE, gi, k, k), NULL, sg->numel, sizeof(float), owner,
                     HC_ALLREDUCE, HYFI_KEEP, "running_stats", sfx, k, R);
        }
    }
    return cc->htab_oom ? -1 : 0;
}

/* flow[t->id]: tensor t receives a gradient in the backward. The nodes are in
 * the order they were built (every input before its readers), so walking them
 * backwards sees every reader of a tensor before its maker. */
static void grad_flow(const hyfi_graph *g, unsigned char *flow)
{
    for (int i = 0; i < g->ntensors; i++) flow[i] = 0;
    flow[g->loss->id] = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const node *nd = &g->nodes[i];
        const hyfi_tensor *go = nd->relu_out ? nd->relu_out : nd->out;
        if (!go->requires_grad || !flow[go->id]) continue;
        for (int j = 0; j < nd->nin; j++)
            if (nd->in[j]->requires_grad || hyfi_op_writes_dx(nd, j)) flow[nd->in[j]->id] = 1;
        for (int k = 0; k < 2 && hyfi_op_param_grads(nd); k++)
            if (nd->p[k]) flow[nd->p[k]->id] = 1;
    }
}

/* Gradients travel in buckets: the parameters of one stage, in the order the
 * backward completes them (last layers first), up to the bucket size, packed
 * into one handle per replica. A bucket of one parameter is all-reduced in
 * place: its handles are the parameter's gradients (the partners' too, which
 * the tensors' registration leaves to this: handles.c). */
int hyfi_buckets_register(hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    const int R = pl->nrep;
    if (R < 2) return 0;
    const unsigned char *want = g->cc->rep_want; /* share.c */
    unsigned char *flow = malloc((size_t)g->ntensors);
    if (!flow) return -1;
    grad_flow(g, flow);
    const int kib = g->plan_cfg.bucket_kib;
    const size_t cap = kib < 0 ? 0 : (size_t)(kib ? kib : HYFI_BUCKET_KIB) * 1024;
    g->cc->buckets = calloc((size_t)g->nparams, sizeof *g->cc->buckets);
    if (!g->cc->buckets) goto fail;
    for (int i = g->nparams - 1; i >= 0; i--) {
        hyfi_tensor *p = g->params[i];
        if (!flow[p->id]) continue;
        hyfi_bucket *b = g->cc->nbuckets ? &g->cc->buckets[g->cc->nbuckets - 1] : NULL;
        if (!b || b->stage != p->stage || (b->numel + p->numel) * sizeof(float) > cap) {
            b = &g->cc->buckets[g->cc->nbuckets++];
            b->stage = p->stage;
            b->params = calloc((size_t)g->nparams, sizeof *b->params);
            if (!b->params) goto fail;
        }
        b->params[b->nparams++] = p;
        b->numel += p->numel;
    }
    free(flow);
    flow = NULL;
    for (int bi = 0; bi < g->cc->nbuckets; bi++) {
        hyfi_bucket *b = &g->cc->buckets[bi];
        const int ring = b->ring = hyfi_use_ring(g, b->numel);
        char bname[HYFI_NAME_MAX];
        hyfi_bucket_name(b, bi, bname, sizeof bname);
        for (int k = 0; k < R; k++) {
            if (b->nparams > 1) {
                hyfi_reg(g, HYFI_KEY_R(HK_BUCKET, bi, k, k), NULL, b->numel, sizeof(float),
                         hyfi_stage_rank(pl, k, b->stage), HC_ALLREDUCE, HYFI_KEEP, bname, ".grad",
                         k, R);
                continue;
            }
            /* one parameter: its own gradient (hyfi_bucket_h), registered
             * also where a partner reads it */
            hyfi_tensor *p = b->params[0];
            if (!TGH(p, k) && want[k]) hyfi_handle_need(g, p, 1, 0, k);
        }
        for (int k = 0; ring && k < R; k++)
            for (int c = 0; c < R; c++) {
                char sfx[48];
                snprintf(sfx, sizeof sfx, ".grad.r%d.chunk%d", k, c);
                hyfi_reg(g, HYFI_KEY_R(HK_ARC, bi, (size_t)k * R + c, k), NULL,
                         hyfi_chunk_lo(b->numel, R, c + 1) - hyfi_chunk_lo(b->numel, R, c),
                         sizeof(float), hyfi_stage_rank(pl, k, b->stage), HC_ALLREDUCE, HYFI_KEEP,
                         bname, sfx, 0, 1);
            }
    }
    return g->cc->htab_oom ? -1 : 0;
fail:
    free(flow);
    return -1;
}

int hyfi_buckets_check(const hyfi_graph *g)
{
    if (g->cc->pl->nrep < 2) return 0;
    int n = 0;
    for (int bi = 0; bi < g->cc->nbuckets; bi++)
        for (int j = 0; j < g->cc->buckets[bi].nparams; j++) {
            if (!g->cc->buckets[bi].params[j]->gwritten) return -1;
            n++;
        }
    for (int i = 0; i < g->nparams; i++) n -= g->params[i]->gwritten;
    return n ? -1 : 0;
}
