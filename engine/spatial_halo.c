/* Spatial parallelism: the halo adapters around a windowed op on a tile
 * (see spatial_impl.h). Forward: each neighbour packs its boundary strip on
 * its own place, the tile's place assembles own tile + strips (+ zeros) into
 * the op's input buffer. Backward: the buffer's gradient is scattered into the
 * own tile's gradient and strip gradients, which each neighbour adds into its
 * tile's gradient (the halo part of the gradient goes home). Used by the tiles
 * lowering (spatial.c) and the fused-region lowering (spatial_fused.c). */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hyfi_sp_grad_out(emit_ctx *e, hyfi_tensor *x, int q)
{
    program *P = e->P;
    hyfi_prog_buf(P, TGRAD(x, q), TGWF(x, q) ? STARPU_RW : STARPU_W);
}

void hyfi_sp_grad_done(emit_ctx *e, hyfi_tensor *x, int q)
{
    *TGWFP(x, q) = 1;
    x->gwritten = 1;
}

/* How far, in tiles (rows or columns), a tiled op of the graph reads another
 * tile's data: its halo pieces' tiles (fused groups read with their first
 * op's geometry). */
static int halo_reach(const hyfi_graph *g)
{
    int reach = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn = g->nodes[i].tn;
        const hyfi_tiles *tl = g->nodes[i].out->tl;
        if (!tn || !tl) continue;
        for (int q = 0; q < g->cc->pl->P; q++)
            for (int k = 1; k < tn->npieces[q]; k++) {
                const int u = tn->from[q][k], dr = abs(u / tl->cols - q / tl->cols),
                          dc = abs(u % tl->cols - q % tl->cols);
                if (dr > reach) reach = dr;
                if (dc > reach) reach = dc;
            }
    }
    return reach;
}

int hyfi_sp_tile(emit_ctx *e, int q, int more)
{
    program *P = e->P;
    P->far_now = 0;
    if (!more || !e->g->cc->scoped) return more;
    const hyfi_graph *g = e->g;
    const hyfi_plan *pl = g->cc->pl;
    const int key = e->rep + 1, Pt = pl->P, cols = pl->grid_cols;
    if (e->far_key != key) {
        /* a tiled stage's ops read the tiles of the stage before it too: tile t
         * is far when it is far in every tiled stage */
        if (!e->far_dist) e->far_dist = 2 * halo_reach(g) + 1;
        const int reach = e->far_dist - 1, me = g->ctx->rank;
        for (int t = 0; t < Pt; t++) {
            int d = Pt; /* no tile of this rank: every tile is far */
            for (int s = 0; s < pl->K; s++)
                for (int u = 0; u < Pt; u++) {
                    if (pl->place_rank[place_of(pl, e->rep, s, u)] != me) continue;
                    const int dr = abs(u / cols - t / cols), dc = abs(u % cols - t % cols);
                    const int du = dr > dc ? dr : dc;
                    if (du < d) d = du;
                }
            e->far[t] = d > reach;
        }
        e->far_key = key;
    }
    P->far_now = e->far[q];
    return 1;
}

int hyfi_sp_place(const emit_ctx *e, const hyfi_tensor *x, int q)
{
    return place_of(e->g->cc->pl, e->rep, x->tl->stage, q);
}

void hyfi_sp_task_name(char *out, size_t len, const node *nd, const char *pass, int q, const emit_ctx *e)
{
    char p2[48];
    snprintf(p2, sizeof p2, "%s.t%d", pass, q);
    hyfi_task_name(out, len, nd, p2, e);
}

/* A tile's op input: its assembled buffer (after packing and assembling) or
 * the tile itself. */
int hyfi_sp_assemble(emit_ctx *e, const node *nd, int q, hyfi_ref *in)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->cc->pl->P;
    char nm[64];
    if (!tn->use_buf[q]) {
        *in = TILE(x, q);
        return 0;
    }
    /* pack the neighbours' strips, each on its owner's place */
    for (int k = 1; k < tn->npieces[q]; k++) {
        const hyfi_piece *p = &tn->piece[q][k];
        const int u = tn->from[q][k];
        hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = p->h, .dst_w = p->w, .npieces = 1}};
        a.u.tile.p[0] = (hyfi_piece){.src_h = p->src_h, .src_w = p->src_w, .src_y = p->src_y,
                                     .src_x = p->src_x, .dst_y = 0, .dst_x = 0, .h = p->h,
                                     .w = p->w};
        snprintf(nm, sizeof nm, "%.30s.halo%d_%d", nd->name, u, q);
        TASK(&hyfi_cl_tile_assemble, nm, &a);
        W(TNH(tn, HK_STRIP, ((size_t)e->m * Pt + q) * NP + k)), R(TILE(x, u));
        ON_PLACE(hyfi_sp_place(e, x, u));
    }
    hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = tn->buf_h[q], .dst_w = tn->buf_w[q],
                                   .npieces = tn->npieces[q], .zero_fill = tn->explicit_pad}};
    for (int k = 0; k < tn->npieces[q]; k++) {
        a.u.tile.p[k] = tn->piece[q][k];
        if (k > 0) { /* a strip is the whole of its handle */
            a.u.tile.p[k].src_h = tn->piece[q][k].h;
            a.u.tile.p[k].src_w = tn->piece[q][k].w;
            a.u.tile.p[k].src_y = a.u.tile.p[k].src_x = 0;
        }
    }
    hyfi_sp_task_name(nm, sizeof nm, nd, "assemble", q, e);
    TASK(&hyfi_cl_tile_assemble, nm, &a);
    W(TNH(tn, HK_TBUF, e->m * Pt + q)), R(TILE(x, q));
    for (int k = 1; k < tn->npieces[q]; k++) R(TNH(tn, HK_STRIP, ((size_t)e->m * Pt + q) * NP + k));
    ON_PLACE(hyfi_sp_place(e, x, q));
    *in = TNH(tn, HK_TBUF, e->m * Pt + q);
    return 0;
}

/* Backward of a windowed op's input on tile q: the buffer gradient scattered
 * into the tile's own gradient and the strip gradients (W), then the strips
 * added into the neighbours' tile gradients (after all tiles' own parts). */
int hyfi_sp_unassemble(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->cc->pl->P;
    char nm[64];
    hyfi_task_args a = {.u.tile = {.n = n, .c = C, .dst_h = tn->buf_h[q], .dst_w = tn->buf_w[q],
                                   .npieces = tn->npieces[q]}};
    for (int k = 0; k < tn->npieces[q]; k++) {
        a.u.tile.p[k] = tn->piece[q][k];
        if (k > 0) {
            a.u.tile.p[k].src_h = tn->piece[q][k].h;
            a.u.tile.p[k].src_w = tn->piece[q][k].w;
            a.u.tile.p[k].src_y = a.u.tile.p[k].src_x = 0;
        }
    }
    a.acc = TGWF(x, q) ? 1 : 0; /* bit 0: the own tile; strips are fresh */
    hyfi_sp_task_name(nm, sizeof nm, nd, "unassemble", q, e);
    TASK(&hyfi_cl_tile_scatter, nm, &a);
    hyfi_sp_grad_out(e, x, q);
    for (int k = 1; k < tn->npieces[q]; k++)
        W(TNH(tn, HK_DSTRIP, ((size_t)e->m * Pt + q) * NP + k));
    R(TNH(tn, HK_TDBUF, e->m * Pt + q));
    ON_PLACE(hyfi_sp_place(e, x, q));
    hyfi_sp_grad_done(e, x, q);
    return 0;
}

int hyfi_sp_halo_return(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->cc->pl->P;
    char nm[64];
    for (int k = 1; k < tn->npieces[q]; k++) {
        const hyfi_piece *p = &tn->piece[q][k];
        const int u = tn->from[q][k];
        /* strip (the whole handle) added into tile u at the piece's source rectangle */
        hyfi_task_args a = {.acc = 1, .u.tile = {.n = n, .c = C, .dst_h = p->h, .dst_w = p->w,
                                                 .npieces = 1}};
        a.u.tile.p[0] = (hyfi_piece){.src_h = p->src_h, .src_w = p->src_w, .src_y = p->src_y,
                                     .src_x = p->src_x, .dst_y = 0, .dst_x = 0, .h = p->h,
                                     .w = p->w};
        snprintf(nm, sizeof nm, "%.30s.halo%d_%d.back", nd->name, q, u);
        TASK(&hyfi_cl_tile_scatter, nm, &a);
        RW(TGRAD(x, u)), R(TNH(tn, HK_DSTRIP, ((size_t)e->m * Pt + q) * NP + k));
        ON_PLACE(hyfi_sp_place(e, x, u));
    }
    return 0;
}

/* The views' parts that do not depend on the tile's data: the replica's
 * parameters, the micro-batch's saved tensors, the statistics a batch norm
 * normalises with (the step's, combined over the tiles, or the running ones)
 * and the parameter gradients: per tile where the op sums them over its
 * tiles (convolutions: hyfi_spatial_param_sums), else the replica's. */
void hyfi_sp_view_params(emit_ctx *e, const node *nd, int q, int training, hyfi_opview *v)
{
    hyfi_tnode *tn = nd->tn;
    const int j = e->rep * e->g->cc->pl->P + q;
    for (int k = 0; k < 4; k++)
        if (nd->p[k]) v->p[k] = PH(nd->p[k]);
    for (int k = 0; k < 2; k++)
        if (nd->s[k]) v->s[k] = TH(nd->s[k], e->m);
    v->stat[0] = training ? v->s[0] : v->p[2];
    v->stat[1] = training ? v->s[1] : v->p[3];
    for (int k = 0; k < 2; k++) {
        hyfi_tensor *p = nd->p[k];
        if (!p || p->kind != T_PARAM) continue;
        const hyfi_role role = k ? HK_BPART : HK_WPART;
        v->dp[k] =
            hyfi_tn_wparts(nd)
                ? (hyfi_gsum){TNH(tn, role, j),
                              hyfi_kflag_at(e->g->cc, role, (uint64_t)tn->id, (uint64_t)j), p}
                : (hyfi_gsum){PGH(p), PGW(p), p};
    }
}
