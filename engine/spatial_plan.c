/* Spatial parallelism: the tiling plan (geometry of every tiled op, fused-halo
 * groups). Pure data: no StarPU call. See spatial_impl.h. */
#include "spatial_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ plan */

int hyfi_spatial_tiled(const hyfi_graph *g, const node *nd)
{
    return g->cc && g->cc->pl && g->cc->pl->K > 0 && nd->stage < g->cc->pl->K;
}


int hyfi_tile_rank(const hyfi_graph *g, const hyfi_tiles *tl, int t, int rep)
{
    return g->cc->pl->place_rank[place_of(g->cc->pl, rep, tl->stage, t)];
}


size_t hyfi_tile_numel(const hyfi_tensor *x, int t)
{
    const int n = x->dims[0] / x->g->cc->pl->nmb;
    return (size_t)n * x->dims[1] * tile_h(x->tl, t) * tile_w(x->tl, t);
}

hyfi_status hyfi_spatial_plan_grid(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    const hyfi_plan_config *cfg = &g->plan_cfg;
    char err[300];
    if (cfg->spatial_stages > pl->nstages)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "--spatial-size %d but the plan has %d stages; "
                                               "tile at most the stages there are (and not the "
                                               "one with the head)", cfg->spatial_stages,
                              pl->nstages);
    if (cfg->spatial_parts > HYFI_MAX_TILES)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "--num-spatial-parts %d: at most %d tiles per "
                                               "image", cfg->spatial_parts, HYFI_MAX_TILES);
    if (hyfi_tile_grid(cfg->spatial_parts, (hyfi_tile_layout)cfg->slice, &pl->grid_rows,
                       &pl->grid_cols, err, sizeof err))
        return hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
    pl->K = cfg->spatial_stages;
    pl->P = cfg->spatial_parts;
    return HYFI_OK;
}

static hyfi_tiles *new_tiles(hyfi_graph *g, int stage)
{
    hyfi_tiles *tl = calloc(1, sizeof *tl);
    if (!tl) return NULL;
    tl->stage = stage;
    tl->rows = g->cc->pl->grid_rows;
    tl->cols = g->cc->pl->grid_cols;
    return tl;
}

/* Geometry of a windowed op on tile grid `in` -> output cuts in `out`. */
static int window_geometry(hyfi_graph *g, const node *nd, hyfi_tnode *tn, const hyfi_tiles *in,
                           hyfi_tiles *out, int kh, int kw, int sh, int sw, int ph, int pw,
                           char *err, size_t errlen)
{
    const hyfi_tensor *x = nd->in[0], *y = nd->out;
    const int H = x->dims[2], W = x->dims[3], Ho = y->dims[2], Wo = y->dims[3];
    /* padding after: the least that gives the op's output size */
    int qh = (Ho - 1) * sh + kh - H - ph, qw = (Wo - 1) * sw + kw - W - pw;
    if (qh < 0) qh = 0;
    if (qw < 0) qw = 0;
    char what[HYFI_NAME_MAX + 32];
    snprintf(what, sizeof what, "op \"%s\" (height)", nd->name);
    if (hyfi_tile_window(in->rcut, in->rows, H, kh, sh, ph, qh, tn->rs, out->rcut, what, err,
                         errlen))
        return -1;
    snprintf(what, sizeof what, "op \"%s\" (width)", nd->name);
    if (hyfi_tile_window(in->ccut, in->cols, W, kw, sw, pw, qw, tn->cs, out->ccut, what, err,
                         errlen))
        return -1;
    if (out->rcut[in->rows] != Ho || out->ccut[in->cols] != Wo) {
        snprintf(err, errlen, "op \"%s\": its output (%dx%d) is not what its window gives on "
                              "tiles (%dx%d); it cannot be tiled, use a smaller --spatial-size",
                 nd->name, Ho, Wo, out->rcut[in->rows], out->ccut[in->cols]);
        return -1;
    }
    const int P = in->rows * in->cols;
    for (int t = 0; t < P; t++) {
        const int r = t / in->cols, c = t % in->cols;
        const hyfi_tile_span *a = &tn->rs[r], *b = &tn->cs[c];
        const int xp = tn->explicit_pad;
        const int top = (xp ? a->pad_before : 0) + a->halo_before;
        const int left = (xp ? b->pad_before : 0) + b->halo_before;
        const int own_h = a->in_end - a->in_begin, own_w = b->in_end - b->in_begin;
        tn->buf_h[t] = top + own_h + a->halo_after + (xp ? a->pad_after : 0);
        tn->buf_w[t] = left + own_w + b->halo_after + (xp ? b->pad_after : 0);
        tn->use_buf[t] = a->halo_before || a->halo_after || b->halo_before || b->halo_after ||
                         (xp && (a->pad_before || a->pad_after || b->pad_before || b->pad_after));
        int k = 0;
        for (int dr = -1; dr <= 1; dr++)
            for (int dc = -1; dc <= 1; dc++) {
                const int rh = dr < 0 ? a->halo_before : dr > 0 ? a->halo_after : own_h;
                const int cw = dc < 0 ? b->halo_before : dc > 0 ? b->halo_after : own_w;
                if (rh <= 0 || cw <= 0) continue;
                const int u = (r + dr) * in->cols + (c + dc);
                const int uh = tile_h(in, u), uw = tile_w(in, u);
                /* own piece first (index 0) */
                const int idx = dr == 0 && dc == 0 ? 0 : ++k;
                if (idx >= NP) {
                    snprintf(err, errlen, "op \"%s\": too many halo pieces", nd->name);
                    return -1;
                }
                tn->from[t][idx] = u;
                tn->piece[t][idx] = (hyfi_piece){
                    .src_h = uh, .src_w = uw,
                    .src_y = dr < 0 ? uh - rh : 0, .src_x = dc < 0 ? uw - cw : 0,
                    .dst_y = dr < 0 ? top - rh : dr > 0 ? top + own_h : top,
                    .dst_x = dc < 0 ? left - cw : dc > 0 ? left + own_w : left,
                    .h = rh, .w = cw};
            }
        tn->npieces[t] = k + 1;
    }
    (void)g;
    return 0;
}

/* ------------------------------------------------------------ fused halos */

static int halo_op(const node *nd)
{
    int kh, sh, ph, kw, sw, pw;
    hyfi_op_window(nd, 0, &kh, &sh, &ph);
    hyfi_op_window(nd, 1, &kw, &sw, &pw);
    return hyfi_op_windowed(nd) && (kh > 1 || kw > 1 || ph > 0 || pw > 0);
}

/* Regions of every op of group fg, per tile, backwards from the last op's
 * own tile; the group input's assembled buffer in op[0]'s tnode. */
static int fused_geometry(hyfi_graph *g, hyfi_fgroup *fg, char *err, size_t errlen)
{
    const int P = g->cc->pl->P;
    const node *last = fg->op[fg->n - 1], *first = fg->op[0];
    const hyfi_tiles *yt = last->out->tl, *xt = first->in[0]->tl;
    hyfi_tnode *tn = first->tn;
    for (int q = 0; q < P; q++) {
        const int r = q / yt->cols, c = q % yt->cols;
        int a[2] = {yt->rcut[r], yt->ccut[c]}, b[2] = {yt->rcut[r + 1], yt->ccut[c + 1]};
        for (int j = fg->n - 1; j >= 0; j--) {
            const node *nd = fg->op[j];
            fg->r0[j][q] = a[0], fg->r1[j][q] = b[0], fg->c0[j][q] = a[1], fg->c1[j][q] = b[1];
            for (int ax = 0; ax < 2; ax++) {
                int k, s, p;
                hyfi_op_window(nd, ax, &k, &s, &p);
                const int len = nd->in[0]->dims[2 + ax];
                const int nb = a[ax] * s - p, ne = (b[ax] - 1) * s - p + k;
                (ax ? fg->pl : fg->pt)[j][q] = nb < 0 ? -nb : 0;
                (ax ? fg->pr : fg->pb)[j][q] = ne > len ? ne - len : 0;
                a[ax] = nb < 0 ? 0 : nb;
                b[ax] = ne > len ? len : ne;
            }
        }
        /* op[0]'s buffer: the group input over [a, b) and the whole own tile */
        const int own0[2] = {xt->rcut[r], xt->ccut[c]}, own1[2] = {xt->rcut[r + 1], xt->ccut[c + 1]};
        int before[2], after[2], top[2], full[2];
        const int xp = tn->explicit_pad;
        for (int ax = 0; ax < 2; ax++) {
            before[ax] = own0[ax] - a[ax];
            after[ax] = b[ax] > own1[ax] ? b[ax] - own1[ax] : 0;
            const int pbef = (ax ? fg->pl : fg->pt)[0][q], paft = (ax ? fg->pr : fg->pb)[0][q];
            top[ax] = (xp ? pbef : 0) + before[ax];
            full[ax] = top[ax] + (own1[ax] - own0[ax]) + after[ax] + (xp ? paft : 0);
        }
        const int rr = q / xt->cols, cc = q % xt->cols;
        if ((before[0] > 0 && (rr == 0 || before[0] > tile_h(xt, q - xt->cols))) ||
            (after[0] > 0 && (rr == xt->rows - 1 || after[0] > tile_h(xt, q + xt->cols))) ||
            (before[1] > 0 && (cc == 0 || before[1] > tile_w(xt, q - 1))) ||
            (after[1] > 0 && (cc == xt->cols - 1 || after[1] > tile_w(xt, q + 1)))) {
            snprintf(err, errlen, "fused halos from op \"%s\" to \"%s\": tile %d needs a halo "
                                  "of %d/%d rows and %d/%d columns, wider than its neighbours; "
                                  "use fewer --fused-layers or larger tiles", first->name,
                     last->name, q, before[0], after[0], before[1], after[1]);
            return -1;
        }
        tn->use_buf[q] = 1;
        tn->buf_h[q] = full[0];
        tn->buf_w[q] = full[1];
        const int own_h = own1[0] - own0[0], own_w = own1[1] - own0[1];
        int k = 0;
        for (int dr = -1; dr <= 1; dr++)
            for (int dc = -1; dc <= 1; dc++) {
                const int rh = dr < 0 ? before[0] : dr > 0 ? after[0] : own_h;
                const int cw = dc < 0 ? before[1] : dc > 0 ? after[1] : own_w;
                if (rh <= 0 || cw <= 0) continue;
                const int u = (rr + dr) * xt->cols + (cc + dc);
                const int uh = tile_h(xt, u), uw = tile_w(xt, u);
                const int idx = dr == 0 && dc == 0 ? 0 : ++k;
                tn->from[q][idx] = u;
                tn->piece[q][idx] = (hyfi_piece){
                    .src_h = uh, .src_w = uw,
                    .src_y = dr < 0 ? uh - rh : 0, .src_x = dc < 0 ? uw - cw : 0,
                    .dst_y = dr < 0 ? top[0] - rh : dr > 0 ? top[0] + own_h : top[0],
                    .dst_x = dc < 0 ? top[1] - cw : dc > 0 ? top[1] + own_w : top[1],
                    .h = rh, .w = cw};
            }
        tn->npieces[q] = k + 1;
    }
    return 0;
}

/* Chains of up to F halo ops (see hyfi_fgroup), after the tiles are planned. */
static hyfi_status fused_plan(hyfi_graph *g)
{
    const int F = g->plan_cfg.fused_layers;
    if (F <= 1) return HYFI_OK;
    char err[400];
    for (int i = 0; i < g->nnodes; i++) {
        node *nd = &g->nodes[i];
        if (!hyfi_spatial_tiled(g, nd) || nd->tn->fg || !halo_op(nd)) continue;
        int j = i, halos = 1;
        while (j + 1 < g->nnodes && halos < F) {
            const node *cur = &g->nodes[j], *nx = &g->nodes[j + 1];
            if (!hyfi_spatial_tiled(g, nx) || nx->stage != nd->stage || !hyfi_op_fusable(nx) ||
                nx->in[0] != cur->out || hyfi_tensor_consumers(g, cur->out) != 1 ||
                j + 1 - i + 1 > FG_MAX)
                break;
            j++;
            halos += halo_op(nx);
        }
        while (j > i && !halo_op(&g->nodes[j])) j--; /* end on a halo op */
        if (halos < 2 || j == i) continue;
        hyfi_fgroup *fg = calloc(1, sizeof *fg);
        if (!fg) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory fusing halos");
        fg->id = i;
        fg->n = j - i + 1;
        for (int k = 0; k < fg->n; k++) {
            fg->op[k] = &g->nodes[i + k];
            g->nodes[i + k].tn->fg = fg;
            g->nodes[i + k].tn->fg_pos = k;
        }
        if (fused_geometry(g, fg, err, sizeof err)) return hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
        i = j;
    }
    return HYFI_OK;
}

hyfi_status hyfi_spatial_plan(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    if (pl->K == 0) return HYFI_OK;
    char err[512];
    const int P = pl->P;
    for (int i = 0; i < g->nnodes; i++) {
        node *nd = &g->nodes[i];
        if (!hyfi_spatial_tiled(g, nd)) continue;
        if (!hyfi_op_tileable(nd))
            return hyfi_call_fail(g, HYFI_ERR_ARG, "--spatial-size %d tiles stage %d, which "
                                                   "holds op \"%s\" (%s) that needs whole "
                                                   "images; use --spatial-size %d or less, or "
                                                   "another --balance", pl->K, nd->stage,
                                  nd->name, hyfi_op_names[nd->op], nd->stage);
        /* inputs: the image is cut into equal tiles; others come tiled */
        for (int k = 0; k < nd->nin; k++) {
            hyfi_tensor *x = nd->in[k];
            if (x->tl) continue;
            if (x->kind != T_INPUT)
                return hyfi_call_fail(g, HYFI_ERR_ARG, "op \"%s\" of tiled stage %d reads "
                                                       "\"%s\", which no tiled op produces; "
                                                       "use a smaller --spatial-size",
                                      nd->name, nd->stage, x->name);
            if (!(x->tl = new_tiles(g, nd->stage)))
                return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory tiling");
            if (hyfi_tile_cuts(x->dims[2], x->tl->rows, x->tl->rcut, "image height", err,
                               sizeof err) ||
                hyfi_tile_cuts(x->dims[3], x->tl->cols, x->tl->ccut, "image width", err,
                               sizeof err))
                return hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
        }
        hyfi_tiles *in = nd->in[0]->tl;
        hyfi_tiles *out = nd->out->tl = new_tiles(g, nd->stage);
        hyfi_tnode *tn = nd->tn = calloc(1, sizeof *tn);
        if (!out || !tn) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory tiling");
        tn->id = (int)(nd - g->nodes);
        if (hyfi_op_windowed(nd)) {
            tn->windowed = 1;
            tn->explicit_pad = hyfi_op_zero_padded(nd);
            int kh, kw, sh, sw, ph, pw;
            hyfi_op_window(nd, 0, &kh, &sh, &ph);
            hyfi_op_window(nd, 1, &kw, &sw, &pw);
            if (window_geometry(g, nd, tn, in, out, kh, kw, sh, sw, ph, pw, err, sizeof err))
                return hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
        } else {
            for (int k = 1; k < nd->nin; k++) {
                const hyfi_tiles *o = nd->in[k]->tl;
                if (memcmp(o->rcut, in->rcut, sizeof o->rcut) ||
                    memcmp(o->ccut, in->ccut, sizeof o->ccut))
                    return hyfi_call_fail(g, HYFI_ERR_ARG, "op \"%s\": its inputs are tiled "
                                                           "differently; it cannot be tiled, "
                                                           "use a smaller --spatial-size",
                                          nd->name);
            }
            memcpy(out->rcut, in->rcut, sizeof out->rcut);
            memcpy(out->ccut, in->ccut, sizeof out->ccut);
        }
    }
    hyfi_status fst = fused_plan(g);
    if (fst != HYFI_OK) return fst;
    /* Whole-tensor views for untiled consumers: on the first one's stage. */
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (hyfi_spatial_tiled(g, nd)) continue;
        for (int k = 0; k < nd->nin; k++) {
            hyfi_tensor *x = nd->in[k];
            if (!x->tl) continue;
            if (!x->tl->full) {
                x->tl->full = 1;
                x->stage = nd->stage;
            } else if (nd->stage < x->stage) {
                x->stage = nd->stage;
            }
        }
    }
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->tl && !t->tl->full) t->stage = t->tl->stage;
        t->rank = pl->stage_rank[t->stage];
    }
    (void)P;
    return HYFI_OK;
}

/* Fused-halo groups and the halo strips exchanged per micro-batch (all
 * tiles, forward). */
void hyfi_spatial_halo_counts(const hyfi_graph *g, int *groups, int *fused_ops, int *strips)
{
    *groups = *fused_ops = *strips = 0;
    if (!g->cc || !g->cc->pl || g->cc->pl->K == 0) return;
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn) continue;
        if (tn->fg && tn->fg_pos == 0) {
            (*groups)++;
            *fused_ops += tn->fg->n;
        }
        if (!tn->windowed || (tn->fg && tn->fg_pos > 0)) continue;
        for (int q = 0; q < g->cc->pl->P; q++)
            if (tn->use_buf[q]) *strips += tn->npieces[q] - 1;
    }
}

/* Halo bytes per step between tiles on different ranks, from the geometry:
 * every strip forward and its gradient back. */
size_t hyfi_spatial_halo_volume(const hyfi_graph *g)
{
    const hyfi_plan *pl = g->cc->pl;
    size_t b = 0;
    if (!pl || pl->K == 0) return 0;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const hyfi_tnode *tn = nd->tn;
        if (!tn || !tn->windowed || (tn->fg && tn->fg_pos > 0)) continue;
        const hyfi_tensor *x = nd->in[0];
        for (int r = 0; r < pl->nrep; r++)
        for (int q = 0; q < pl->P; q++) {
            if (!tn->use_buf[q]) continue;
            for (int k = 1; k < tn->npieces[q]; k++) {
                if (hyfi_tile_rank(g, x->tl, q, r) == hyfi_tile_rank(g, x->tl, tn->from[q][k], r))
                    continue;
                const size_t s = (size_t)(x->dims[0] / pl->nrep) * x->dims[1] * tn->piece[q][k].h *
                                 tn->piece[q][k].w * hyfi_tensor_elem(g, x);
                b += x->requires_grad ? 2 * s : s;
                if (pl->rc_rerun && pl->rc_rerun[i]) b += s; /* exchanged again: recompute */
            }
        }
    }
    return b;
}

void hyfi_spatial_recompute_groups(const hyfi_graph *g, const int *seg, unsigned char *rerun,
                                   unsigned char *drop)
{
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn || !tn->fg || tn->fg_pos != 0) continue;
        const hyfi_fgroup *fg = tn->fg;
        const node *last = fg->op[fg->n - 1];
        int whole = drop[last->out->id];
        for (int j = 0; j < fg->n; j++) whole &= seg[fg->op[j] - g->nodes] == seg[i];
        for (int j = 0; j < fg->n; j++) {
            rerun[fg->op[j] - g->nodes] = (unsigned char)whole;
            drop[fg->op[j]->out->id] = (unsigned char)whole;
        }
    }
}

/* The tile geometry, fused groups and per-op tile data of the plan. */
void hyfi_spatial_plan_free(hyfi_graph *g)
{
    for (int i = 0; i < g->ntensors; i++) {
        free(g->tensors[i]->tl);
        g->tensors[i]->tl = NULL;
    }
    for (int i = 0; i < g->nnodes; i++) {
        hyfi_tnode *tn = g->nodes[i].tn;
        if (tn && tn->fg && tn->fg_pos == 0) {
            hyfi_fgroup *fg = tn->fg;
            for (int k = 0; k < fg->n; k++)
                if (fg->op[k]->tn) fg->op[k]->tn->fg = NULL;
            free(fg);
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        free(g->nodes[i].tn);
        g->nodes[i].tn = NULL;
    }
}
