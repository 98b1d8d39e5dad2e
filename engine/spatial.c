/* Spatial parallelism: the tasks of tiled ops (halo exchange, the op on its
 * tiles, batch norm over tiles) and gathers to untiled stages. See
 * spatial_impl.h for the scheme. */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- emitting */







/* Shapes of the op on tile q: input (buffer or tile) and output tile. */
static int in_h(const node *nd, int q)
{
    const hyfi_tnode *tn = nd->tn;
    return tn && tn->windowed && tn->use_buf[q] ? tn->buf_h[q] : tile_h(nd->in[0]->tl, q);
}
static int in_w(const node *nd, int q)
{
    const hyfi_tnode *tn = nd->tn;
    return tn && tn->windowed && tn->use_buf[q] ? tn->buf_w[q] : tile_w(nd->in[0]->tl, q);
}

/* The view of tiled op nd on tile q, micro-batch e->m: the tiles of its
 * tensors (a windowed op reads its assembled buffer: in), the replica's
 * parameters, the step's statistics; gradients of the tiles (a windowed op
 * writes its buffer's gradient, scattered by hyfi_sp_unassemble). */
static void tile_view(emit_ctx *e, const node *nd, int q, hyfi_ref in, int training, hyfi_opview *v)
{
    const hyfi_tnode *tn = nd->tn;
    const hyfi_tiles *yt = nd->out->tl;
    const int Pt = e->g->cc->pl->P;
    memset(v, 0, sizeof *v);
    v->nd = nd;
    v->tile = q;
    v->place = hyfi_sp_place(e, nd->out, q);
    int ph = 0, pw = 0; /* zeros are in the buffer */
    if (hyfi_op_windowed(nd) && !tn->explicit_pad) {
        /* max pools, average pools not counting the padding: the image border's padding before; clipping after */
        ph = tn->rs[q / yt->cols].pad_before;
        pw = tn->cs[q % yt->cols].pad_before;
    }
    hyfi_op_view_args(v, e->M, in_h(nd, q), in_w(nd, q), tile_h(yt, q), tile_w(yt, q), ph, pw);
    v->y = TILE(nd->out, q);
    v->dy = TGRAD(nd->out, q);
    for (int i = 0; i < nd->nin; i++) {
        hyfi_tensor *xi = nd->in[i];
        v->x[i] = TILE(xi, q);
        v->dplace[i] = hyfi_sp_place(e, xi, q);
        if (xi->requires_grad) v->dx[i] = (hyfi_gout){TGRAD(xi, q), TGWFP(xi, q), xi};
    }
    if (in) {
        v->x[0] = in;
        if (v->dx[0].h && tn->use_buf[q])
            v->dx[0] = (hyfi_gout){TNH(tn, HK_TDBUF, e->m * Pt + q), NULL, NULL};
    }
    hyfi_sp_view_params(e, nd, q, training, v);
}

/* Batch norm in training, over the tiles: statistics per tile, combined
 * into the batch's (and the running ones), each tile normalised with them. */
static int bn_tiles_forward(emit_ctx *e, const node *nd)
{
    const hyfi_tnode *tn = nd->tn;
    const int Pt = e->g->cc->pl->P;
    double count[HYFI_MAX_TILES] = {0};
    hyfi_opview v = {0};
    /* re-materialising: the saved statistics are the step's */
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt && !e->recompute); q++) {
        tile_view(e, nd, q, 0, 1, &v);
        count[q] = (double)v.a.u.bn.n * v.a.u.bn.h * v.a.u.bn.w;
        if (hyfi_bn_part_stats(e, &v, TNH(tn, HK_BN_PART, e->m * Pt + q))) return -1;
    }
    if (!e->recompute) {
        hyfi_ref bufs[HYFI_MAX_TILES];
        const int nb = hyfi_sp_bn_pack(e, nd, 0, bufs);
        if (nb < 0 || hyfi_bn_combine(e, nd, count, Pt, v.s[0], v.s[1], v.p[2], v.p[3], bufs, nb))
            return -1;
    }
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        tile_view(e, nd, q, 0, 1, &v);
        if (hyfi_op_forward(e, &v)) return -1;
    }
    return 0;
}

int hyfi_spatial_forward(emit_ctx *e, const node *nd, int training)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its first op */
        return nd->tn->fg_pos == 0 ? hyfi_sp_fused_forward(e, nd->tn->fg, training) : 0;
    if (hyfi_op_batch_statistics(nd) && training) return bn_tiles_forward(e, nd);
    for (int q = 0; hyfi_sp_tile(e, q, q < e->g->cc->pl->P); q++) {
        hyfi_ref in = 0;
        if (hyfi_op_windowed(nd) && hyfi_sp_assemble(e, nd, q, &in)) return -1;
        hyfi_opview v;
        tile_view(e, nd, q, in, training, &v);
        if (hyfi_op_forward(e, &v)) return -1;
    }
    return 0;
}



/* Batch norm's backward over the tiles: per-tile sums, combined (with the
 * parameter gradients), applied per tile. */
static int bn_tiles_backward(emit_ctx *e, const node *nd)
{
    const hyfi_tnode *tn = nd->tn;
    const int Pt = e->g->cc->pl->P;
    double count[HYFI_MAX_TILES] = {0}, total = 0;
    hyfi_opview v = {0};
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        tile_view(e, nd, q, 0, 1, &v);
        count[q] = (double)v.a.u.bn.n * v.a.u.bn.h * v.a.u.bn.w;
        total += count[q];
        if (hyfi_bn_part_bwd_stats(e, &v, TNH(tn, HK_BN_BWPART, e->m * Pt + q))) return -1;
    }
    hyfi_ref bufs[HYFI_MAX_TILES];
    const int nb = hyfi_sp_bn_pack(e, nd, 1, bufs);
    if (nb < 0 || hyfi_bn_bwd_combine(e, &v, count, Pt, TNH(tn, HK_BN_TOT, e->m), bufs, nb))
        return -1;
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt && nd->in[0]->requires_grad); q++) {
        tile_view(e, nd, q, 0, 1, &v);
        if (hyfi_bn_part_bwd_apply(e, &v, total, TNH(tn, HK_BN_TOT, e->m), "bwd")) return -1;
    }
    return 0;
}

int hyfi_spatial_backward(emit_ctx *e, const node *nd)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its last op */
        return nd->tn->fg_pos == nd->tn->fg->n - 1 ? hyfi_sp_fused_backward(e, nd->tn->fg) : 0;
    const int Pt = e->g->cc->pl->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_opview v;
    if (hyfi_op_batch_statistics(nd)) return bn_tiles_backward(e, nd);
    if (!hyfi_op_windowed(nd)) {
        /* input by input, tile by tile */
        for (int i = 0; i < nd->nin; i++)
            for (int q = 0; hyfi_sp_tile(e, q, q < Pt && nd->in[i]->requires_grad); q++) {
                tile_view(e, nd, q, 0, 1, &v);
                for (int k = 0; k < nd->nin; k++)
                    if (k != i) v.dx[k].h = 0;
                if (hyfi_op_backward_data(e, &v)) return -1;
            }
        return 0;
    }
    /* windowed: the buffer's gradient, scattered to the tile and the strips;
     * the strips added into the neighbours' tiles; the weight gradients */
    const int data = nd->in[0]->requires_grad;
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt && data); q++) {
        tile_view(e, nd, q, tn->use_buf[q] ? TNH(tn, HK_TBUF, e->m * Pt + q) : 0, 1, &v);
        if (hyfi_op_backward_data(e, &v)) return -1;
        if (tn->use_buf[q] && hyfi_sp_unassemble(e, nd, q)) return -1;
    }
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt && data); q++)
        if (tn->use_buf[q] && hyfi_sp_halo_return(e, nd, q)) return -1;
    for (int q = 0; hyfi_sp_tile(e, q, q < Pt); q++) {
        tile_view(e, nd, q, tn->use_buf[q] ? TNH(tn, HK_TBUF, e->m * Pt + q) : 0, 1, &v);
        if (hyfi_op_backward_params(e, &v)) return -1;
    }
    return 0;
}

/* Re-materialisation: the handles of node nd's forward in micro-batch e->m. */
static int drop_tiles(emit_ctx *e, const hyfi_tensor *x, int grads)
{
    const int Pt = e->g->cc->pl->P;
    for (int q = 0; q < Pt; q++)
        if (hyfi_emit_drop(e, TILE(x, q)) || (grads && hyfi_emit_drop(e, TGRAD(x, q)))) return -1;
    return 0;
}

static int drop_window(emit_ctx *e, const hyfi_tnode *tn, int grads)
{
    const int Pt = e->g->cc->pl->P;
    if (!tn->windowed) return 0;
    for (int q = 0; q < Pt; q++) {
        if (!tn->use_buf[q]) continue;
        const size_t k = (size_t)e->m * Pt + q;
        if (hyfi_emit_drop(e, TNH(tn, HK_TBUF, k)) ||
            (grads && hyfi_emit_drop(e, TNH(tn, HK_TDBUF, k))))
            return -1;
        for (int j = 1; j < tn->npieces[q]; j++)
            if (hyfi_emit_drop(e, TNH(tn, HK_STRIP, k * NP + j)) ||
                (grads && hyfi_emit_drop(e, TNH(tn, HK_DSTRIP, k * NP + j))))
                return -1;
    }
    return 0;
}

int hyfi_spatial_drop(emit_ctx *e, const node *nd, int grads)
{
    const hyfi_tnode *tn = nd->tn;
    const hyfi_fgroup *fg = tn ? tn->fg : NULL;
    if (!fg) return drop_tiles(e, nd->out, grads) || (tn && drop_window(e, tn, grads)) ? -1 : 0;
    /* a fused group: everything with its last op (the group is re-run whole) */
    if (tn->fg_pos != fg->n - 1) return 0;
    if (drop_tiles(e, nd->out, grads) || drop_window(e, fg->op[0]->tn, grads)) return -1;
    static const hyfi_role val[] = {HK_F_VAL, HK_F_PBUF, HK_F_XO},
                           grad[] = {HK_F_GRAD, HK_F_DPBUF, HK_F_DYO, HK_F_DXO};
    for (int j = 0; j < fg->n; j++)
        for (int q = 0; q < e->g->cc->pl->P; q++) {
            for (size_t k = 0; k < sizeof val / sizeof *val; k++)
                if (hyfi_emit_drop(e, FGH(fg, val[k], FGK(j, q)))) return -1;
            for (size_t k = 0; k < sizeof grad / sizeof *grad && grads; k++)
                if (hyfi_emit_drop(e, FGH(fg, grad[k], FGK(j, q)))) return -1;
        }
    return 0;
}

/* Gather the tiles of x into its whole-tensor view (on the event's place). */
int hyfi_spatial_gather(emit_ctx *e, hyfi_tensor *x)
{
    program *P = e->P;
    const hyfi_tiles *tl = x->tl;
    const int Pt = e->g->cc->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
    char nm[64];
    for (int q0 = 0; q0 < Pt; q0 += NP) {
        const int cnt = Pt - q0 < NP ? Pt - q0 : NP;
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = x->dims[2], .dst_w = x->dims[3],
                                       .npieces = cnt}};
        for (int k = 0; k < cnt; k++) {
            const int q = q0 + k, th = tile_h(tl, q), tw = tile_w(tl, q);
            a.u.tile.p[k] = (hyfi_piece){.src_h = th, .src_w = tw, .dst_y = tl->rcut[q / tl->cols],
                                         .dst_x = tl->ccut[q % tl->cols], .h = th, .w = tw};
        }
        snprintf(nm, sizeof nm, "%.40s.gather", x->name);
        TASK(&hyfi_cl_tile_assemble, nm, &a);
        hyfi_prog_buf(P, TH(x, e->m), q0 == 0 ? STARPU_W : STARPU_RW);
        for (int k = 0; k < cnt; k++) R(TILE(x, q0 + k));
    }
    return 0;
}

/* The whole-tensor gradient of x back into its tile gradients. */
int hyfi_spatial_gather_back(emit_ctx *e, hyfi_tensor *x)
{
    program *P = e->P;
    const hyfi_tiles *tl = x->tl;
    const int Pt = e->g->cc->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
    char nm[64];
    if (!x->requires_grad || !TGW(x, e->m)) return 0;
    for (int q0 = 0; q0 < Pt; q0 += NP) {
        const int cnt = Pt - q0 < NP ? Pt - q0 : NP;
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = x->dims[2], .dst_w = x->dims[3],
                                       .npieces = cnt}};
        for (int k = 0; k < cnt; k++) {
            const int q = q0 + k, th = tile_h(tl, q), tw = tile_w(tl, q);
            a.u.tile.p[k] = (hyfi_piece){.src_h = th, .src_w = tw, .dst_y = tl->rcut[q / tl->cols],
                                         .dst_x = tl->ccut[q % tl->cols], .h = th, .w = tw};
            if (TGWF(x, q)) a.acc |= 1 << k;
        }
        snprintf(nm, sizeof nm, "%.40s.scatter", x->name);
        TASK(&hyfi_cl_tile_scatter, nm, &a);
        for (int k = 0; k < cnt; k++) hyfi_sp_grad_out(e, x, q0 + k);
        R(TGH(x, e->m));
        for (int k = 0; k < cnt; k++) hyfi_sp_grad_done(e, x, q0 + k);
    }
    return 0;
}

/* Before the update: the tiles' weight gradients of tiled convolutions added
 * into the parameter gradients, on the stage's first place. Tiles on another
 * rank are first added up there, into the partial of that rank's first tile
 * (the leader), so one partial per rank crosses the network instead of one per
 * tile (64 tiles on 4 ranks: 3 messages per parameter instead of 48, and the
 * owner rank receives 3 parameter-sized buffers, not 48). The sum's order:
 * per rank in tile order, then over the owner's tiles and the leaders in tile
 * order; in one process (every place on rank 0) the plain sum in tile order. */
int hyfi_spatial_param_sums(emit_ctx *e)
{
    program *P = e->P;
    hyfi_graph *g = e->g;
    const hyfi_plan *pl = g->cc->pl;
    const int Pt = pl->P;
    char nm[HYFI_NAME_MAX + 32];
    int leader[HYFI_MAX_TILES]; /* [q]: the first tile on q's rank */
    for (int r = 0; r < pl->nrep; r++)
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!hyfi_tn_wparts(nd) ||
            !hyfi_kflag(g->cc, HK_WPART, (uint64_t)nd->tn->id, (uint64_t)r * Pt))
            continue;
        const int s = nd->stage, owner = pl->place_rank[place_of(pl, r, s, 0)];
        for (int q = 0; q < Pt; q++) {
            const int rq = pl->place_rank[place_of(pl, r, s, q)];
            leader[q] = q;
            for (int j = 0; j < q; j++)
                if (pl->place_rank[place_of(pl, r, s, j)] == rq) {
                    leader[q] = j;
                    break;
                }
        }
        for (int k = 0; k < 2; k++) {
            hyfi_tensor *p = nd->p[k];
            if (!p) continue;
            hyfi_ref parts[HYFI_MAX_TILES];
            for (int q = 0; q < Pt; q++)
                parts[q] = TNH(nd->tn, k ? HK_BPART : HK_WPART, (size_t)r * Pt + q);
            /* on the other ranks: each tile into its leader's partial */
            for (int q = 0; q < Pt; q++) {
                const int place = place_of(pl, r, s, q);
                if (pl->place_rank[place] == owner || leader[q] == q) continue;
                hyfi_task_args a = {.acc = 1, .u.elt.count = p->numel};
                snprintf(nm, sizeof nm, "%.50s.rank_sum%d", p->name, q);
                TASK(&hyfi_cl_accumulate, nm, &a);
                RW(parts[leader[q]]), R(parts[q]);
                hyfi_on_place(g, P, place, 0);
            }
            /* on the stage's first place: the owner's tiles and the leaders */
            int first = 1;
            for (int q = 0; q < Pt; q++) {
                if (pl->place_rank[place_of(pl, r, s, q)] != owner && leader[q] != q) continue;
                hyfi_task_args a = {.acc = !first, .u.elt.count = p->numel};
                snprintf(nm, sizeof nm, "%.50s.tile_sum%d", p->name, q);
                TASK(&hyfi_cl_accumulate, nm, &a);
                hyfi_prog_buf(P, TGH(p, r), first ? STARPU_W : STARPU_RW);
                R(parts[q]);
                hyfi_on_place(g, P, place_of(pl, r, s, 0), 0);
                first = 0;
            }
            *TGWP(p, r) = 1;
        }
    }
    return 0;
}



