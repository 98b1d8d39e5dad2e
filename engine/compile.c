/* Compile: derive the backward pass and lower the graph to programs.
 *
 * Programs are flat lists of tasks in sequentially consistent order; StarPU
 * infers every dependency from the access modes. The train program is
 *   forward (batch norm with batch statistics)
 *   backward: nodes in reverse order, each op's tasks through its definition
 *     (opdef.c); a gradient that several consumers contribute to is written
 *     by the first (W) and accumulated by the next ones (RW, acc = 1), in a
 *     fixed order
 *   SGD update of every parameter that received a gradient.
 * The infer program is the forward with batch norm on running statistics;
 * fwd_train is the train program's forward alone.
 *
 * Every key of the plan is registered through keyed.c before the lowerings,
 * by register.c (tensors, tiles, tiled nodes' buffers, fused groups,
 * re-materialisation's fences and statistics; buckets.c: statistics groups,
 * all-reduce buckets, ring chunks), and after them by localise.c (local
 * copies); a scoped rank's
 * tile-family ones are deferred until its programs are cut to its share
 * (localise.c rewrites their tiles' reads first); the step's collectives (replicas'
 * all-reduce and running statistics, health sums) are emitted by reduce.c.
 */
#include "opdef.h"
#include "keyed.h"
#include "pipeline.h"

#include <starpu_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Handles of micro-batch m. */
#define HV(t) TH((t), e->m)
#define HG(t) TGH((t), e->m)
/* The gradient of t that the emitting stage writes for micro-batch m: t's own
 * where the stage owns t, else the stage's partial of it; with its flag. */
static hyfi_ref gtarget(const emit_ctx *e, hyfi_tensor *t, unsigned char **flag)
{
    if (t->stage == e->stage || !t->gparts) {
        *flag = TGWP(t, e->m);
        return TGH(hyfi_grad_source(t), e->m); /* a forwarded one: its add's (below) */
    }
    const size_t k = (size_t)e->stage * t->nh + e->m;
    *flag = hyfi_kflag_at(t->g->cc, HK_PARTIAL, (uint64_t)t->id, k);
    return TK(t, HK_PARTIAL, k);
}

static int gacc(const emit_ctx *e, hyfi_tensor *t)
{
    unsigned char *f;
    gtarget(e, t, &f);
    return *f;
}

static void grad_out(const emit_ctx *e, program *P, hyfi_tensor *t)
{
    unsigned char *f;
    hyfi_ref h = gtarget(e, t, &f);
    hyfi_prog_buf(P, h, *f ? STARPU_RW : STARPU_W);
}

static void grad_done(const emit_ctx *e, hyfi_tensor *t)
{
    unsigned char *f;
    gtarget(e, t, &f);
    *f = 1;
    t->gwritten = 1;
}

/* An activation gradient output: overwritten by its first writer, accumulated after. */
#define GRAD_OUT(t) grad_out(e, P, (t))
#define GRAD_DONE(t) grad_done(e, (t))
#define GACC(t) gacc(e, (t))


/* The view of node nd on whole tensors, micro-batch e->m. */
static void whole_view(emit_ctx *e, const node *nd, hyfi_opview *v)
{
    memset(v, 0, sizeof *v);
    v->nd = nd;
    v->tile = v->place = -1;
    v->a = hyfi_node_args(nd, e->M);
    v->n = nd->out->dims[0] / e->M;
    v->hw = nd->out->dims[2] * nd->out->dims[3];
    /* a fused ReLU's or add's output */
    hyfi_tensor *y = nd->relu_out ? nd->relu_out : nd->add_out ? nd->add_out : nd->out;
    v->y = HV(y);
    for (int i = 0; i < nd->nin; i++) {
        v->x[i] = HV(nd->in[i]);
        v->dplace[i] = -1;
    }
    if (nd->add_res) v->x[1] = HV(nd->add_res); /* the fused add's other input */
    for (int k = 0; k < 4; k++)
        if (nd->p[k]) v->p[k] = PH(nd->p[k]);
    for (int k = 0; k < 2; k++)
        if (nd->s[k]) v->s[k] = HV(nd->s[k]);
    v->stat[0] = v->p[2], v->stat[1] = v->p[3];
}

static int emit_forward(emit_ctx *e, const node *nd, int training)
{
    hyfi_opview v;
    whole_view(e, nd, &v);
    v.batch_stats = training;
    if (e->recompute && hyfi_op_batch_statistics(nd)) {
        /* batch norm re-run: the training kernel on the same x gives the same y
         * bit for bit; its statistics go to scratch handles */
        const hyfi_compiled *cc = e->g->cc;
        const uint64_t i = (uint64_t)(nd - e->g->nodes), k = (uint64_t)e->rep * 4;
        v.s[0] = hyfi_kref(cc, HK_RC_BN, i, k), v.s[1] = hyfi_kref(cc, HK_RC_BN, i, k + 1);
        v.p[2] = hyfi_kref(cc, HK_RC_BN, i, k + 2), v.p[3] = hyfi_kref(cc, HK_RC_BN, i, k + 3);
        v.scratch_stats = 1;
    }
    return hyfi_op_forward(e, &v);
}

/* dst += src (or dst = src for the first writer) */
static int emit_accumulate(emit_ctx *e, hyfi_tensor *dst, hyfi_ref src, const char *name)
{
    program *P = e->P;
    hyfi_task_args a = {.acc = GACC(dst), .u.elt.count = dst->mb_numel};
    TASK(&hyfi_cl_accumulate, name, &a);
    GRAD_OUT(dst), R(src);
    GRAD_DONE(dst);
    return 0;
}


/* The gradient view of input x: the stage's own gradient of x or its
 * partial of it (gtarget). */
static hyfi_gout grad_view(const emit_ctx *e, hyfi_tensor *x)
{
    hyfi_gout gv = {.t = x};
    gv.h = gtarget(e, x, &gv.written);
    return gv;
}

static int emit_backward(emit_ctx *e, const node *nd)
{
    hyfi_opview v;
    whole_view(e, nd, &v);
    /* a fused batch norm takes the gradient of its ReLU's output */
    hyfi_tensor *ysrc = hyfi_grad_source(nd->relu_out ? nd->relu_out : nd->out);
    v.dy = HG(ysrc);
    for (int i = 0; i < nd->nin; i++) {
        if (!nd->in[i]->requires_grad && !hyfi_op_writes_dx(nd, i)) continue;
        if (hyfi_add_grad_alias(e, nd, i, ysrc)) {
            nd->in[i]->galias = ysrc;
            grad_done(e, nd->in[i]);
            continue;
        }
        v.dx[i] = grad_view(e, nd->in[i]);
    }
    for (int k = 0; k < 2; k++)
        if (nd->p[k] && hyfi_op_param_grads(nd)) {
            v.dp[k] = (hyfi_gsum){.h = PGH(nd->p[k]), .written = PGW(nd->p[k]), .p = nd->p[k]};
            if (!v.dp[k].written) return -1;
        }
    if (hyfi_op_backward_data(e, &v)) return -1;
    return hyfi_op_backward_params(e, &v);
}

/* ------------------------------------------------- re-materialisation
 *
 * With hyfi_plan_config.recompute, a stage's nodes fall into segments (the
 * stage, or each layer: rc_seg) and the plan marks the activations read only
 * inside their segment (rc_drop) and the nodes that make them (rc_rerun).
 * Forward event: after each segment's forward, its dropped values are
 * released (invalidated: StarPU frees their buffers). Backward event: before
 * the first backward task of a segment, the segment's dropped values are made
 * again by its re-run nodes (recompute forward: batch norm with the saved
 * statistics); with layer segments, once the segment's backward is emitted,
 * the values and gradients only it used are released; and (without 1F1B
 * tokens) per-place fences keep StarPU from starting a re-run before the
 * backward tasks emitted before it are done (add_fences), so that one
 * segment's activations are alive at a time. The backward tasks and their
 * order are those without recompute: the step is bitwise the same. */

/* Release what node i made in micro-batch e->m's forward (its output, and
 * for tiled nodes their buffers), with the gradients when `grads`. */
static int drop_node(emit_ctx *e, int i, int grads)
{
    hyfi_graph *g = e->g;
    const node *nd = &g->nodes[i];
    if (hyfi_spatial_tiled(g, nd)) return hyfi_spatial_drop(e, nd, grads);
    if (hyfi_emit_drop(e, HV(nd->out))) return -1;
    return grads && hyfi_tensor_has_grad(nd->out) ? hyfi_emit_drop(e, HG(nd->out)) : 0;
}

/* Nodes [a, b) of a segment: release the values they made and only the
 * segment reads (and their gradients). */
static int drop_segment(emit_ctx *e, int a, int b, int grads)
{
    const hyfi_plan *pl = e->g->cc->pl;
    for (int i = a; i < b; i++)
        if (pl->rc_rerun[i] && drop_node(e, i, grads)) return -1;
    return 0;
}

/* The recompute forward of nodes [a, b) of a segment of stage e->stage. */
static int rerun_segment(emit_ctx *e, int a, int b)
{
    hyfi_graph *g = e->g;
    const hyfi_plan *pl = g->cc->pl;
    const int from = e->P->n;
    e->recompute = 1;
    int rc = 0;
    for (int i = a; i < b && !rc; i++) {
        const node *nd = &g->nodes[i];
        if (!pl->rc_rerun[i]) continue;
        rc = hyfi_spatial_tiled(g, nd) ? hyfi_spatial_forward(e, nd, 1) : emit_forward(e, nd, 1);
    }
    e->recompute = 0;
    /* their names: <op>.rfwd... instead of <op>.fwd... */
    for (int k = from; k < e->P->n; k++) {
        char *nm = e->P->t[k].name, *f = strstr(nm, ".fwd");
        if (!f) continue;
        char rest[64];
        snprintf(rest, sizeof rest, "%s", f + 1);
        snprintf(f, sizeof e->P->t[k].name - (size_t)(f - nm), ".r%s", rest);
    }
    return rc;
}

/* End of node i's segment: [i, segment_end). */
static int segment_end(const hyfi_graph *g, const int *first, int i)
{
    const hyfi_plan *pl = g->cc->pl;
    const int s = g->nodes[i].stage;
    int b = i + 1;
    while (b < first[s + 1] && pl->rc_seg[b] == pl->rc_seg[i]) b++;
    return b;
}

static int segment_begin(const hyfi_graph *g, const int *first, int i)
{
    const hyfi_plan *pl = g->cc->pl;
    const int s = g->nodes[i].stage;
    int a = i;
    while (a > first[s] && pl->rc_seg[a - 1] == pl->rc_seg[i]) a--;
    return a;
}

/* The forward of stage e->stage for micro-batch e->m: the tiled tensors it
 * reads whole are gathered first, then its ops in order. */
static int emit_stage_forward(emit_ctx *e, const int *first, int training)
{
    hyfi_graph *g = e->g;
    const int s = e->stage;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->tl && t->tl->full && t->stage == s && hyfi_spatial_gather(e, t)) return -1;
    }
    const int drop = training && e->P == &g->cc->train_prog && g->cc->pl->recompute;
    for (int i = first[s]; i < first[s + 1]; i++) {
        const node *nd = &g->nodes[i];
        if (hyfi_spatial_tiled(g, nd) ? hyfi_spatial_forward(e, nd, training)
                                      : emit_forward(e, nd, training))
            return -1;
        /* re-materialisation: the end of a segment drops what only it reads */
        if (drop && segment_end(g, first, i) == i + 1 &&
            drop_segment(e, segment_begin(g, first, i), i + 1, 0))
            return -1;
    }
    return 0;
}

/* First token of each place (1F1B: inflight[stage] slots per place). */
static int token_base(const hyfi_plan *pl, int place)
{
    int b = 0;
    for (int q = 0; q < place; q++) b += pl->inflight[pl->place_stage[q]];
    return b;
}

/* Give the tasks emitted since `from` their place (the event's where the
 * emitter set none), its rank and worker, the event's priority and the place's
 * 1F1B token (appended as their last buffer: the kernels never see it). */
static void finish_tasks(emit_ctx *e, int from)
{
    const hyfi_plan *pl = e->g->cc->pl;
    for (int k = from; k < e->P->n; k++) {
        prog_task *t = &e->P->t[k];
        if (t->kind != PT_TASK) continue;
        if (t->place < 0) t->place = e->place;
        t->rank = pl->place_rank[t->place];
        t->worker = pl->place_worker[t->place];
        t->prio = e->prio;
        if (e->g->cc->ntokens) {
            const int slot = (e->m % pl->mbr) % pl->inflight[pl->place_stage[t->place]];
            hyfi_prog_task_buf(e->P, t,
                               hyfi_kref(e->g->cc, HK_TOKEN, 0,
                                         (uint64_t)token_base(pl, t->place) + (uint64_t)slot),
                               e->token_mode);
        }
    }
}

/* Re-materialisation: the tasks of a backward event from `from` on get
 * their place's fence as last buffer, R for the re-runs ([at[2k], at[2k+1]))
 * and RW|COMMUTE for the others, so that StarPU starts a segment's re-run on a
 * place only after the backward tasks emitted before it there: one segment's
 * activations at a time, not every re-run as soon as its inputs exist. */
static void add_fences(emit_ctx *e, int from, const int *at, int n)
{
    for (int k = from, j = 0; k < e->P->n; k++) {
        prog_task *t = &e->P->t[k];
        while (j < n && k >= at[2 * j + 1]) j++;
        if (t->kind != PT_TASK) continue;
        const int rerun = j < n && k >= at[2 * j];
        hyfi_prog_task_buf(e->P, t, hyfi_kref(e->g->cc, HK_RC_FENCE, 0, (uint64_t)t->place),
                           rerun ? STARPU_R : (STARPU_RW | STARPU_COMMUTE));
    }
}

/* Whether far task t (hyfi_sp_tile) stays. share.c keeps a task of another
 * rank that touches what this rank owns (it sends it, or receives it back),
 * or what this rank's own tasks touch (a write elsewhere must drop the copy
 * this rank may hold). A far tile's task touches its tile's and neighbours'
 * data, the stage's parameters and statistics (read: read from copies on its
 * rank after localise.c) and its tiles' partial sums (read once, then
 * flushed), its place's token and fence; so it stays where it touches what
 * this rank owns, writes anything else but a tile's own data, or touches a tile of a tensor gathered
 * whole for an untiled stage (the gather reads every tile on one place, and
 * its backward writes their gradients). What stays here, share.c's rule
 * may still drop after localise.c. Dropped: tasks that touch nothing of this
 * rank's and only read what its tasks also read, which it never submits or
 * need not (the same programs but for those reads). */
static int far_kept(const hyfi_graph *g, const prog_task *t)
{
    const int me = g->ctx->rank;
    for (int b = 0; b < t->nbuf; b++) {
        const prog_buf *d = &prog_cbufs(t)[b];
        if (!d->ref || hyfi_ref_rank(g, d->ref) == me) return 1;
        /* (written in commuting mode: its place's 1F1B token or recompute fence) */
        const int writes = (d->mode & STARPU_W) && !(d->mode & STARPU_COMMUTE);
        if (!hyfi_ref_deferred(g, d->ref)) {
            if (writes) return 1;
            continue;
        }
        unsigned gs;
        int cat;
        hyfi_key k;
        if (hyfi_key_of_tag(g->cc->htab[d->ref - 1].tag, &gs, &cat, &k)) return 1;
        if (writes && (k.role == HK_BN_TOT || k.role == HK_LCOPY || k.role == HK_BN_PACK ||
                       k.role == HK_BN_BWPACK))
            return 1;
        if ((k.role == HK_TILE || k.role == HK_TILE_GRAD) && k.obj < (uint32_t)g->ntensors &&
            g->tensors[k.obj]->tl && g->tensors[k.obj]->tl->full)
            return 1;
    }
    return 0;
}

void hyfi_trim_far(emit_ctx *e, int from)
{
    program *P = e->P;
    if (!e->g->cc->scoped || P->overflow || P->nomem) return;
    int j = from;
    for (int k = from; k < P->n; k++) {
        prog_task *t = &P->t[k];
        if (t->kind == PT_TASK && t->far && t->rank != e->g->ctx->rank && !far_kept(e->g, t)) {
            free(t->xbuf);
            P->trimmed++;
            continue;
        }
        if (j != k) P->t[j] = *t;
        j++;
    }
    P->n = j;
}

/* Nodes of stage s: [first[s], first[s + 1]). */
static int *stage_nodes(hyfi_graph *g)
{
    const int S = g->cc->pl->nstages;
    int *first = malloc((size_t)(S + 1) * sizeof *first);
    if (!first) return NULL;
    for (int s = 0; s <= S; s++) first[s] = g->nnodes;
    for (int i = g->nnodes - 1; i >= 0; i--) first[g->nodes[i].stage] = i;
    for (int s = S - 1; s >= 0; s--)
        if (first[s] > first[s + 1]) first[s] = first[s + 1];
    return first;
}



static int build_train(hyfi_graph *g, const int *first)
{
    const hyfi_plan *pl = g->cc->pl;
    const int M = pl->nmb;
    emit_ctx ec = {.g = g, .P = &g->cc->train_prog, .M = M};
    emit_ctx *e = &ec;
    if (hyfi_emit_state_save(g, ec.P)) return -1;
    hyfi_kmap_zero_flags(&g->cc->kmap, 1ull << HK_GRAD | 1ull << HK_PARTIAL | 1ull << HK_TILE_GRAD);
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        t->gwritten = 0;
        t->galias = NULL;
        t->gclob = 0;
    }
    for (int m = 0; m < g->loss->nh; m++) *TGWP(g->loss, m) = 1;
    int rc = 0, rerun_cap = 0, *rerun_at = NULL; /* recompute: [from, to) of the re-runs */
    for (int k = 0; k < pl->nevents && !rc; k++) {
        const hyfi_pipe_event *ev = &pl->events[k];
        const int s = ev->stage;
        if (!g->cc->rep_mine[HYFI_REP(pl, ev->mb)]) continue; /* share.c */
        ec.m = ev->mb;
        ec.rep = HYFI_REP(pl, ev->mb);
        ec.stage = s;
        ec.place = HYFI_PLACE(pl, ec.rep, pl->stage_place0[s]);
        ec.prio = hyfi_clamp_prio(pl->nticks - ev->tick);
        /* 1F1B: forwards read the slot's token, backwards write it (commuting among
         * themselves), so forward m + inflight waits for backward m. */
        ec.token_mode = ev->backward ? (STARPU_RW | STARPU_COMMUTE) : STARPU_R;
        const int from = ec.P->n;
        if (!ev->backward) {
            rc = emit_stage_forward(e, first, 1);
            finish_tasks(e, from);
            hyfi_trim_far(e, from);
            continue;
        }
        /* Add the partial gradients that later stages summed for the stage's
         * tensors, latest stage first (the order the contributions would
         * have had without partials). */
        for (int i = 0; i < g->ntensors && !rc; i++) {
            hyfi_tensor *t = g->tensors[i];
            if (!t->gparts || t->stage != s) continue;
            for (int c = pl->nstages - 1; c > s && !rc; c--) {
                const size_t k = (size_t)c * t->nh + ev->mb;
                if (!TK(t, HK_PARTIAL, k) || !hyfi_kflag(t->g->cc, HK_PARTIAL, (uint64_t)t->id, k))
                    continue;
                char nm[64];
                snprintf(nm, sizeof nm, "%.40s.grad_from_stage%d", t->name, c & 0xffff);
                rc = emit_accumulate(e, t, TK(t, HK_PARTIAL, k), nm);
            }
        }
        int nre = 0;
        for (int i = first[s + 1] - 1; i >= first[s] && !rc; i--) {
            const node *nd = &g->nodes[i];
            const int tiled = hyfi_spatial_tiled(g, nd);
            /* re-materialisation: a segment's forward again before its backward */
            if (pl->recompute && segment_end(g, first, i) == i + 1) {
                const int r0 = ec.P->n;
                rc = rerun_segment(e, segment_begin(g, first, i), i + 1);
                if (!rc && ec.P->n > r0 && g->cc->rc_fence_host) {
                    if (nre == rerun_cap) {
                        rerun_cap = rerun_cap ? 2 * rerun_cap : 16;
                        int *nr = realloc(rerun_at, (size_t)rerun_cap * 2 * sizeof *nr);
                        if (!nr) rc = -1;
                        else rerun_at = nr;
                    }
                    if (!rc) rerun_at[2 * nre] = r0, rerun_at[2 * nre + 1] = ec.P->n, nre++;
                }
            }
            /* Only ops whose output received a gradient propagate one (a batch
             * norm with its ReLU fused: the ReLU's output). */
            const hyfi_tensor *go = nd->relu_out ? nd->relu_out : nd->out;
            if (!rc && go->requires_grad &&
                (tiled ? hyfi_kflag(g->cc, HK_TILE_GRAD, (uint64_t)go->id, (uint64_t)ev->mb * pl->P)
                       : TGW(go, ev->mb)))
                rc = tiled ? hyfi_spatial_backward(e, nd) : emit_backward(e, nd);
            /* layer segments: what only the segment used, dropped after its backward */
            if (!rc && pl->recompute == HYFI_RECOMPUTE_LAYER && segment_begin(g, first, i) == i)
                rc = drop_segment(e, i, segment_end(g, first, i), 1);
        }
        /* Tiled tensors this stage gathered: their gradient back to the tiles. */
        for (int i = 0; i < g->ntensors && !rc; i++) {
            hyfi_tensor *t = g->tensors[i];
            if (t->tl && t->tl->full && t->stage == s) rc = hyfi_spatial_gather_back(e, t);
        }
        finish_tasks(e, from);
        if (!rc && g->cc->rc_fence_host) add_fences(e, from, rerun_at, nre);
        hyfi_trim_far(e, from);
        if (rc || pl->trivial) continue;
        /* Micro-batch m is done on stage s: release what the stage made for it. */
        rc = hyfi_emit_releases(g, ec.P, s, ev->mb);
    }
    free(rerun_at);
    if (rc) return rc;
    /* Reading a released tensor after a train step is refused (run.c). */
    for (int i = 0; i < g->ntensors && !pl->trivial; i++) {
        hyfi_tensor *t = g->tensors[i];
        t->released = hyfi_release_stage(g, t) != HYFI_KEEP ||
                      (t->tl && hyfi_tiles_release_stage(t) != HYFI_KEEP);
    }
    /* layer segments drop their values after their backward, even in a trivial plan */
    for (int i = 0; i < g->ntensors && pl->recompute == HYFI_RECOMPUTE_LAYER; i++)
        if (pl->rc_drop[i]) g->tensors[i]->released = 1;
    program *P = ec.P;
    if (hyfi_spatial_param_sums(e)) return -1;
    if (hyfi_emit_state_combine(g, P) || hyfi_emit_allreduce(g, P)) return -1;
    if (hyfi_emit_sgd(g, P)) return -1;
    if (hyfi_emit_health(g, P)) return -1;
    return 0;
}

/* Forward-only programs: the forward events of the schedule. */
static int build_forward(hyfi_graph *g, program *P, const int *first, int training)
{
    const hyfi_plan *pl = g->cc->pl;
    emit_ctx ec = {.g = g, .P = P, .M = pl->nmb};
    if (training && hyfi_emit_state_save(g, P)) return -1;
    for (int k = 0; k < pl->nevents; k++) {
        const hyfi_pipe_event *ev = &pl->events[k];
        if (ev->backward || !g->cc->rep_mine[HYFI_REP(pl, ev->mb)]) continue;
        ec.m = ev->mb;
        ec.rep = HYFI_REP(pl, ev->mb);
        ec.stage = ev->stage;
        ec.place = HYFI_PLACE(pl, ec.rep, pl->stage_place0[ev->stage]);
        const int from = P->n;
        if (emit_stage_forward(&ec, first, training)) return -1;
        finish_tasks(&ec, from);
        hyfi_trim_far(&ec, from);
    }
    if (training && hyfi_emit_state_combine(g, P)) return -1;
    return 0;
}

static int build_programs(hyfi_graph *g)
{
    int *first = stage_nodes(g);
    if (!first) return -1;
    int rc = build_train(g, first);
    if (!rc) rc = build_forward(g, &g->cc->infer_prog, first, 0);
    if (!rc) rc = build_forward(g, &g->cc->fwd_train_prog, first, 1);
    free(first);
    if (!rc && g->cc->scoped)
        rc = hyfi_scope_check(g, &g->cc->train_prog) || hyfi_scope_check(g, &g->cc->infer_prog) ||
             hyfi_scope_check(g, &g->cc->fwd_train_prog);
    return rc;
}

/* Under a memory limit, a task whose buffers together do not fit could never
 * run: StarPU would evict and wait forever, with or without disk swap. Every
 * rank checks every rank's tasks of every program (the same decision). */
static hyfi_status check_task_memory(hyfi_graph *g)
{
    const long limit = g->ctx->mem_limit_mb;
    if (limit <= 0) return HYFI_OK;
    const program *progs[] = {&g->cc->train_prog, &g->cc->infer_prog, &g->cc->fwd_train_prog};
    const prog_task *worst = NULL;
    size_t most = 0;
    for (size_t p = 0; p < sizeof progs / sizeof *progs; p++)
        for (int k = 0; k < progs[p]->n; k++) {
            const prog_task *t = &progs[p]->t[k];
            if (t->kind != PT_TASK) continue;
            const size_t b = hyfi_task_bytes(g, t);
            if (b > most) most = b, worst = t;
        }
    if (!worst || (double)most / 1e6 <= (double)limit) return HYFI_OK;
    const hyfi_size_fmt f = hyfi_sizes_fmt((const double[]){(double)most, limit * 1e6}, 2, 1e6);
    return hyfi_call_fail(g, HYFI_ERR_NOMEM,
                          "task %s (rank %d) needs %.*f MB of buffers at once, above the memory "
                          "limit of %ld MB per process (--mem-limit-mb, STARPU_LIMIT_CPU_MEM): it "
                          "could never run, even with disk swap; raise the limit (to about twice "
                          "that), or make the tensors smaller: tiles (--spatial-size, "
                          "--num-spatial-parts), micro-batches (--parts), a smaller batch",
                          worst->name, worst->rank, f.digits, (double)most / 1e6, limit);
}

/* A registration that failed: a key that does not fit a tag or came twice
 * (keys.h: a fault of the engine, named), else memory. */
static hyfi_status key_failure(hyfi_graph *g)
{
    const int64_t e = g->cc->key_err;
    unsigned serial = 0;
    int cat = 0;
    hyfi_key k = {0};
    if (e < 0)
        return hyfi_graph_fail(g, HYFI_ERR_UNSUPPORTED,
                               "this plan has more pieces of data than a StarPU-MPI tag can name "
                               "(a tensor, node or bucket index over 2^%d, or an index over 2^%d); "
                               "use fewer micro-batches, tiles or replicas",
                               HYFI_KEY_OBJ_BITS, HYFI_KEY_IDX_BITS);
    if (e > 0 && hyfi_key_of_tag(e, &serial, &cat, &k) == 0)
        return hyfi_graph_fail(g, HYFI_ERR_RUNTIME,
                               "internal error: two pieces of data got the same key (role %d, "
                               "object %u, index %llu); please report it with the command line",
                               (int)k.role, k.obj, (unsigned long long)k.idx);
    return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory registering the tensors and tiles");
}

/* Everything compile made: programs, handles (the table, then what held
 * them), the plan. */
void hyfi_compiled_free(hyfi_graph *g)
{
    if (!g->cc) return;
    hyfi_programs_free(g);
    hyfi_handles_unregister(g);
    if (g->cc->rc_fence_host) hyfi_host_free(g->cc->rc_fence_host, (size_t)g->cc->pl->nplaces);
    g->cc->rc_fence_host = NULL;
    hyfi_spatial_handles_free(g);
    hyfi_handles_free(g);
    hyfi_scope_free(g->cc);
    hyfi_plan_free(g);
    free(g->cc);
    g->cc = NULL;
}

hyfi_status hyfi_graph_compile(hyfi_graph *g, hyfi_tensor *loss, const hyfi_train_config *cfg)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_compile: graph is NULL");
    hyfi_status s = HYFI_OK;
    if (g->status != HYFI_OK)
        s = hyfi_fail(g->status, "hyfi_graph_compile: the graph has a builder error: %s",
                      g->error);
    else if (g->cc)
        s = hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_graph_compile: already compiled");
    else if (!loss || loss->g != g || loss->producer < 0 ||
             g->nodes[loss->producer].op != OP_XENT)
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: the loss must be the output "
                                            "of hyfi_softmax_cross_entropy in this graph");
    else if (cfg && (!(cfg->lr > 0) || cfg->momentum < 0 || cfg->momentum >= 1 ||
                     cfg->weight_decay < 0))
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: lr %g must be > 0, "
                                            "momentum %g in [0, 1), weight decay %g >= 0",
                           cfg->lr, cfg->momentum, cfg->weight_decay);
    else if (cfg && cfg->precision != HYFI_PRECISION_FP32 && cfg->precision != HYFI_PRECISION_BF16)
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: precision %d is not known; use "
                                            "HYFI_PRECISION_FP32 or HYFI_PRECISION_BF16",
                           (int)cfg->precision);
    else if (cfg && cfg->precision == HYFI_PRECISION_BF16 && g->ctx->ncuda > 0)
        s = hyfi_call_fail(g, HYFI_ERR_UNSUPPORTED,
                           "hyfi_graph_compile: bf16 runs on CPU workers only so far (the CUDA "
                           "workers' bf16 kernels are not written yet); create the context with "
                           "device cpu (hyfi-train --device cpu), or train in fp32");
    /* MPI: every rank learns every rank's outcome and compares the graph, the
     * plan and the settings, before any handle takes a StarPU-MPI tag (a rank
     * that stopped here alone, or built another task graph, would leave the
     * others waiting forever or exchanging the wrong data). */
    if (g->ctx->mpi && g->ctx->nranks > 1) {
        char own[512];
        snprintf(own, sizeof own, "%s", s != HYFI_OK ? hyfi_last_error() : "");
        s = hyfi_graph_agree(g, s, own, cfg ? cfg : &g->train);
    }
    if (s != HYFI_OK) return s;
    if (cfg) g->train = *cfg;
    g->loss = loss;
    g->cc = calloc(1, sizeof *g->cc);
    if (!g->cc) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory compiling the graph");
    s = hyfi_plan_build(g);
    if (s == HYFI_OK) s = hyfi_layout_plan(g);
    if (s == HYFI_OK) s = hyfi_fuse_plan(g);
    if (s != HYFI_OK) {
        hyfi_compiled_free(g);
        return s;
    }
    if (hyfi_scope_init(g)) {
        hyfi_compiled_free(g);
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory compiling the graph");
    }
    g->cc->defer_on = g->cc->scoped; /* keyed.c */
    int key_failed = 0;
    s = hyfi_register_plan(g, &key_failed);
    if (key_failed) s = key_failure(g);
    if (s != HYFI_OK) {
        hyfi_compiled_free(g);
        return s;
    }
    if (build_programs(g) || g->cc->htab_oom) {
        const program *ps[3] = {&g->cc->train_prog, &g->cc->infer_prog, &g->cc->fwd_train_prog};
        static const char *const pname[3] = {"training", "inference", "forward"};
        int nomem = -1;
        for (int k = 2; k >= 0; k--)
            if (ps[k]->nomem) nomem = k;
        const int overflow =
            g->cc->train_prog.overflow || g->cc->infer_prog.overflow ||
            g->cc->fwd_train_prog.overflow;
        const int missing = g->cc->train_prog.missing || g->cc->infer_prog.missing ||
                            g->cc->fwd_train_prog.missing || g->cc->scoped;
        if (nomem >= 0)
            s = hyfi_graph_fail(g, HYFI_ERR_NOMEM,
                               "out of memory building the %s program (%d tasks, at task %s); "
                               "use a smaller batch or fewer tiles, micro-batches or replicas",
                               pname[nomem], ps[nomem]->n, ps[nomem]->nomem_at);
        else if (g->cc->htab_oom)
            s = hyfi_graph_fail(g, HYFI_ERR_NOMEM,
                               "out of memory for the compile-time flags of the task programs");
        else if (overflow)
            s = hyfi_graph_fail(g, HYFI_ERR_UNSUPPORTED,
                               "a task of this plan needs more than %d buffers; use fewer "
                               "spatial parts or replicas", HYFI_MAX_TASK_BUFFERS);
        else if (g->cc->missing_task[0])
            s = hyfi_graph_fail(g, HYFI_ERR_RUNTIME,
                               "rank %d: task %s names a handle this rank did not register (a "
                               "fault of the scoped compile); hyfi_plan_config.submit_all "
                               "(hyfi-train: HYFI_SUBMIT_ALL=1) builds the whole step on every "
                               "rank", g->ctx->rank, g->cc->missing_task);
        else if (missing)
            s = hyfi_graph_fail(g, HYFI_ERR_NOMEM,
                               "out of memory building this rank's share of the task programs; "
                               "use a smaller batch or fewer tiles, micro-batches or replicas");
        else
            s = hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory building the task programs");
    } else if (hyfi_buckets_check(g)) {
        s = hyfi_graph_fail(g, HYFI_ERR_RUNTIME,
                           "internal error: the parameters whose gradients the backward wrote are "
                           "not the all-reduce's (buckets.c); please report it with the command "
                           "line");
    } else if (hyfi_programs_localise(g)) {
        s = hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory localising the tiles' reads");
    } else {
        s = check_task_memory(g);
    }
    /* A scoped rank built its own share: all ranks learn whether every share
     * was built and fits (share.c). */
    if (g->cc->scoped) s = hyfi_ctx_agree(g->ctx, s, s != HYFI_OK ? hyfi_last_error() : "");
    if (s != HYFI_OK) {
        hyfi_compiled_free(g);
        return s;
    }
    hyfi_plan_predict_comm(g);
    /* what this rank never submits goes (after the traffic walk, which reads the
     * tasks that send to it or from it) */
    if (hyfi_programs_drop_skipped(g) || hyfi_handles_resolve(g)) {
        hyfi_compiled_free(g);
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory preparing the programs");
    }
    if (g->ctx->trace_dir) hyfi_trace_note_plan(g);
    hyfi_programs_dump(g);
    hyfi_note_compiled_memory(g->ctx);
    return HYFI_OK;
}
