/* Spatial parallelism: the first K stages work on P tiles of every image.
 *
 * Geometry (hyfi_spatial_plan): the input image is cut into a rows x cols grid
 * of equal tiles; every op of a tiled stage maps its input's cut points to its
 * output's (partitioners/tiling.c: stride divisibility, halos from receptive
 * fields, padding at the image border). An op reading a window (convolution,
 * pooling) gets, per tile, an assembled input: its own tile plus the boundary
 * strips of its up to 8 neighbours, and zeros at the image border where the op
 * pads with zeros (convolution, average pooling that counts the padding); max
 * pooling and average pooling without the padding keep their border padding
 * as kernel padding (the first tile of an axis) and clipping (the last).
 *
 * Tasks (hyfi_spatial_forward / _backward), per micro-batch and tile t:
 *   halo   pack: on each neighbour's place, its boundary strip into a strip
 *          handle the neighbour owns (only strips cross ranks); assemble: on
 *          t's place, own tile + strips (+ zeros) -> buffer
 *   op     the kernel on the buffer (or the tile itself when no halo is needed)
 *   back   the kernel's input gradient into a buffer gradient, scattered into
 *          t's own tile gradient and into strip gradients, which each neighbour
 *          adds into its tile gradient (the halo part of the gradient goes home)
 *   conv   weight gradients per tile (summed over micro-batches as any
 *          parameter gradient), added over the tiles on the stage's first place
 *          before the update
 *   bn     statistics per tile -> combined on the stage's first place (running
 *          statistics there) -> normalised per tile; backward the same way
 *          (kernels in ops/bntile_*): the statistics of the whole batch
 * A tiled tensor that an untiled op reads is gathered into a whole tensor on
 * the first untiled consumer's place (its gradient scattered back), which is
 * then an ordinary tensor of that stage.
 */
#include "emit.h"
#include "tiling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP HYFI_TILE_MAX_PIECES
#define FG_MAX 32

struct hyfi_fgroup;

typedef struct hyfi_tnode {
    struct hyfi_fgroup *fg; /* fused-halo group of the op (fused.c part below), or NULL */
    int fg_pos;             /* the op's position in it */
    int windowed;      /* conv, pools: halos and an assembled input */
    int explicit_pad;  /* zeros in the buffer (conv, avg pool counting the padding) */
    hyfi_tile_span rs[HYFI_MAX_TILES], cs[HYFI_MAX_TILES];
    int use_buf[HYFI_MAX_TILES], buf_h[HYFI_MAX_TILES], buf_w[HYFI_MAX_TILES];
    int npieces[HYFI_MAX_TILES];
    int from[HYFI_MAX_TILES][NP];          /* the tile each piece comes from (0: own) */
    hyfi_piece piece[HYFI_MAX_TILES][NP];  /* src_*: coordinates in that tile */
    starpu_data_handle_t *buf, *dbuf;      /* [m * P + t] */
    starpu_data_handle_t *strip, *dstrip;  /* [(m * P + t) * NP + k], k >= 1 */
    starpu_data_handle_t *wpart, *bpart;   /* conv: per-tile weight / bias gradients
                                              [rep * P + t] */
    unsigned char wpw[HYFI_MAX_TILES * HYFI_MAX_REPLICAS]; /* [rep * P + t] */
    starpu_data_handle_t *part, *bwpart;   /* bn: per-tile statistics [m * P + t] */
    starpu_data_handle_t *tot;             /* bn: backward totals [m] */
} hyfi_tnode;

/* A fused-halo group: ops op[0..n) of one tiled stage, a chain (each reads the
 * previous one's output, the only consumer of it), op[0] a convolution or
 * pool needing a halo. Per tile, op j computes its output on region
 * [r0, r1) x [c0, c1) of its output tensor (clipped to the tensor): the own
 * tile for the last op, wider before, as much as the ops after it read. op[0]
 * reads the group input over the region its outputs need, assembled (with
 * op[0]'s node's tnode geometry) from the own tile and wider strips: one
 * exchange. Batch norm in a group takes its statistics over the own tile
 * only; backward, the gradients on the recomputed border are partial (each
 * tile's share), which every sum over positions takes as they are (they are
 * linear), and the terms of batch norm's backward that use the whole batch's
 * sums are added on the own tile only. So the group computes the step of the
 * unfused ops. */
typedef struct hyfi_fgroup {
    int n;
    const node *op[FG_MAX];
    int r0[FG_MAX][HYFI_MAX_TILES], r1[FG_MAX][HYFI_MAX_TILES];
    int c0[FG_MAX][HYFI_MAX_TILES], c1[FG_MAX][HYFI_MAX_TILES];
    /* padding op j's window needs beyond its input tensor (top, bottom, left, right) */
    int pt[FG_MAX][HYFI_MAX_TILES], pb[FG_MAX][HYFI_MAX_TILES];
    int pl[FG_MAX][HYFI_MAX_TILES], pr[FG_MAX][HYFI_MAX_TILES];
    starpu_data_handle_t *val, *grad;   /* op j < n-1: output on its region [(j*M + m)*P + q] */
    starpu_data_handle_t *pbuf, *dpbuf; /* op j >= 1 with zero padding: padded input */
    starpu_data_handle_t *xo, *dyo, *dxo; /* batch norm: own-tile copies */
    starpu_data_handle_t ztot[FG_MAX];  /* batch norm: zero totals */
    float *ztot_host[FG_MAX];
} hyfi_fgroup;

/* Tag of halo strip handles (starpu_data_set_user_data), for the traffic
 * prediction's halo part. */
char hyfi_halo_tag;

/* ------------------------------------------------------------------ plan */

int hyfi_spatial_tiled(const hyfi_graph *g, const node *nd)
{
    return g->pl && g->pl->K > 0 && nd->stage < g->pl->K;
}

static int place_of(const hyfi_plan *pl, int rep, int stage, int t)
{
    return HYFI_PLACE(pl, rep, pl->stage_place0[stage] + (stage < pl->K ? t : 0));
}

int hyfi_tile_rank(const hyfi_graph *g, const hyfi_tiles *tl, int t, int rep)
{
    return g->pl->place_rank[place_of(g->pl, rep, tl->stage, t)];
}

static int tile_h(const hyfi_tiles *tl, int t) { return tl->rcut[t / tl->cols + 1] - tl->rcut[t / tl->cols]; }
static int tile_w(const hyfi_tiles *tl, int t) { return tl->ccut[t % tl->cols + 1] - tl->ccut[t % tl->cols]; }

size_t hyfi_tile_numel(const hyfi_tensor *x, int t)
{
    const int n = x->dims[0] / x->g->pl->nmb;
    return (size_t)n * x->dims[1] * tile_h(x->tl, t) * tile_w(x->tl, t);
}

hyfi_status hyfi_spatial_plan_grid(hyfi_graph *g)
{
    hyfi_plan *pl = g->pl;
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
    tl->rows = g->pl->grid_rows;
    tl->cols = g->pl->grid_cols;
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

/* Window of a node along an axis (rows: axis 0): kernel, stride, padding;
 * element-wise ops and batch norm are 1, 1, 0. */
static void node_window(const node *nd, int axis, int *k, int *s, int *p)
{
    *k = 1, *s = 1, *p = 0;
    if (nd->op == OP_CONV2D) {
        const hyfi_conv2d_args *c = &nd->a.conv;
        *k = axis ? c->kw : c->kh, *s = axis ? c->sw : c->sh, *p = axis ? c->pw : c->ph;
    } else if (nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) {
        const hyfi_pool_args *c = &nd->a.pool;
        *k = axis ? c->kw : c->kh, *s = axis ? c->sw : c->sh, *p = axis ? c->pw : c->ph;
    }
}

static int halo_op(const node *nd)
{
    int kh, sh, ph, kw, sw, pw;
    node_window(nd, 0, &kh, &sh, &ph);
    node_window(nd, 1, &kw, &sw, &pw);
    return (nd->op == OP_CONV2D || nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) &&
           (kh > 1 || kw > 1 || ph > 0 || pw > 0);
}

static int fusable(const node *nd)
{
    return (nd->op == OP_CONV2D || nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL ||
            nd->op == OP_BATCHNORM || nd->op == OP_RELU) &&
           nd->nin == 1;
}

static int consumers(const hyfi_graph *g, const hyfi_tensor *t)
{
    int c = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) c += g->nodes[i].in[k] == t;
    return c;
}

/* Regions of every op of group fg, per tile, backwards from the last op's
 * own tile; the group input's assembled buffer in op[0]'s tnode. */
static int fused_geometry(hyfi_graph *g, hyfi_fgroup *fg, char *err, size_t errlen)
{
    const int P = g->pl->P;
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
                node_window(nd, ax, &k, &s, &p);
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
            if (!hyfi_spatial_tiled(g, nx) || nx->stage != nd->stage || !fusable(nx) ||
                nx->in[0] != cur->out || consumers(g, cur->out) != 1 || j + 1 - i + 1 > FG_MAX)
                break;
            j++;
            halos += halo_op(nx);
        }
        while (j > i && !halo_op(&g->nodes[j])) j--; /* end on a halo op */
        if (halos < 2 || j == i) continue;
        hyfi_fgroup *fg = calloc(1, sizeof *fg);
        if (!fg) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory fusing halos");
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
    hyfi_plan *pl = g->pl;
    if (pl->K == 0) return HYFI_OK;
    char err[512];
    const int P = pl->P;
    for (int i = 0; i < g->nnodes; i++) {
        node *nd = &g->nodes[i];
        if (!hyfi_spatial_tiled(g, nd)) continue;
        if (nd->op == OP_GAP || nd->op == OP_FC || nd->op == OP_XENT)
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
        switch (nd->op) {
        case OP_CONV2D:
        case OP_MAXPOOL:
        case OP_AVGPOOL: {
            tn->windowed = 1;
            int kh, kw, sh, sw, ph, pw;
            if (nd->op == OP_CONV2D) {
                const hyfi_conv2d_args *c = &nd->a.conv;
                kh = c->kh, kw = c->kw, sh = c->sh, sw = c->sw, ph = c->ph, pw = c->pw;
                tn->explicit_pad = 1;
            } else {
                const hyfi_pool_args *p = &nd->a.pool;
                kh = p->kh, kw = p->kw, sh = p->sh, sw = p->sw, ph = p->ph, pw = p->pw;
                tn->explicit_pad = nd->op == OP_AVGPOOL && p->count_include_pad;
            }
            if (window_geometry(g, nd, tn, in, out, kh, kw, sh, sw, ph, pw, err, sizeof err))
                return hyfi_call_fail(g, HYFI_ERR_ARG, "%s", err);
            break;
        }
        default:
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
            break;
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

static void fused_free(hyfi_graph *g);

void hyfi_spatial_free(hyfi_graph *g)
{
    const int M = g->pl ? g->pl->nmb : 1, P = g->pl ? g->pl->P : 1;
    fused_free(g);
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!t->tl) continue;
        for (int k = 0; k < M * P; k++) {
            if (t->tl->h) hyfi_unreg(&t->tl->h[k]);
            if (t->tl->gh) hyfi_unreg(&t->tl->gh[k]);
        }
        free(t->tl->h);
        free(t->tl->gh);
        free(t->tl->gw);
        free(t->tl);
        t->tl = NULL;
    }
    for (int i = 0; i < g->nnodes; i++) {
        hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn) continue;
        starpu_data_handle_t *arrs[] = {tn->buf, tn->dbuf, tn->part, tn->bwpart};
        for (size_t a = 0; a < sizeof arrs / sizeof *arrs; a++) {
            for (int k = 0; arrs[a] && k < M * P; k++) hyfi_unreg(&arrs[a][k]);
            free(arrs[a]);
        }
        for (int k = 0; tn->strip && k < M * P * NP; k++) {
            hyfi_unreg(&tn->strip[k]);
            hyfi_unreg(&tn->dstrip[k]);
        }
        free(tn->strip);
        free(tn->dstrip);
        for (int k = 0; tn->wpart && k < P * g->pl->nrep; k++) {
            hyfi_unreg(&tn->wpart[k]);
            if (tn->bpart) hyfi_unreg(&tn->bpart[k]);
        }
        free(tn->wpart);
        free(tn->bpart);
        for (int k = 0; tn->tot && k < M; k++) hyfi_unreg(&tn->tot[k]);
        free(tn->tot);
        free(tn);
        g->nodes[i].tn = NULL;
    }
}

/* ---------------------------------------------------------- registration */

static starpu_data_handle_t *handles(size_t n) { return calloc(n, sizeof(starpu_data_handle_t)); }

static int fg_rows(const hyfi_fgroup *fg, int j, int q) { return fg->r1[j][q] - fg->r0[j][q]; }
static int fg_cols(const hyfi_fgroup *fg, int j, int q) { return fg->c1[j][q] - fg->c0[j][q]; }
/* op j >= 1 reads a zero-padded copy of op j-1's region */
static int fg_padded(const hyfi_fgroup *fg, int j, int q)
{
    const node *nd = fg->op[j];
    const int xp = nd->op == OP_CONV2D || (nd->op == OP_AVGPOOL && nd->a.pool.count_include_pad);
    return j > 0 && xp && (fg->pt[j][q] || fg->pb[j][q] || fg->pl[j][q] || fg->pr[j][q]);
}
/* batch norm op j computes on more than its own tile */
static int fg_bn_extended(const hyfi_fgroup *fg, int j, int q)
{
    const hyfi_tiles *tl = fg->op[j]->out->tl;
    const int r = q / tl->cols, c = q % tl->cols;
    return fg->r0[j][q] != tl->rcut[r] || fg->r1[j][q] != tl->rcut[r + 1] ||
           fg->c0[j][q] != tl->ccut[c] || fg->c1[j][q] != tl->ccut[c + 1];
}

static int fused_register(hyfi_graph *g)
{
    const hyfi_plan *pl = g->pl;
    const int M = pl->nmb, P = pl->P;
    char sfx[48];
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn0 = g->nodes[i].tn;
        if (!tn0 || !tn0->fg || tn0->fg_pos != 0) continue;
        hyfi_fgroup *fg = tn0->fg;
        const size_t cnt = (size_t)fg->n * M * P;
        fg->val = handles(cnt), fg->grad = handles(cnt), fg->pbuf = handles(cnt);
        fg->dpbuf = handles(cnt), fg->xo = handles(cnt), fg->dyo = handles(cnt);
        fg->dxo = handles(cnt);
        if (!fg->val || !fg->grad || !fg->pbuf || !fg->dpbuf || !fg->xo || !fg->dyo || !fg->dxo)
            return -1;
        for (int j = 0; j < fg->n; j++) {
            const node *nd = fg->op[j];
            const int n = nd->out->dims[0] / M, Co = nd->out->dims[1], Ci = nd->in[0]->dims[1];
            if (nd->op == OP_BATCHNORM) {
                if (hyfi_host_alloc(&fg->ztot_host[j], 2 * (size_t)Co)) return -1;
                memset(fg->ztot_host[j], 0, 2 * (size_t)Co * sizeof(float));
                hyfi_reg(g, &fg->ztot[j], fg->ztot_host[j], 2 * (size_t)Co, sizeof(float),
                         pl->stage_rank[nd->stage], nd->name, ".zero_dstats", 0, 1);
            }
            for (int m = 0; m < M; m++)
                for (int q = 0; q < P; q++) {
                    const size_t k = ((size_t)j * M + m) * P + q;
                    const int rq = hyfi_tile_rank(g, nd->out->tl, q, HYFI_REP(pl, m));
                    const size_t on = (size_t)n * Co * fg_rows(fg, j, q) * fg_cols(fg, j, q);
                    if (j < fg->n - 1) {
                        snprintf(sfx, sizeof sfx, ".ext.tile%d", q);
                        hyfi_reg(g, &fg->val[k], NULL, on, sizeof(float), rq, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".ext.tile%d.grad", q);
                        hyfi_reg(g, &fg->grad[k], NULL, on, sizeof(float), rq, nd->name, sfx, m, M);
                    }
                    if (fg_padded(fg, j, q)) {
                        const size_t pn = (size_t)n * Ci *
                                          (fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q]) *
                                          (fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q]);
                        snprintf(sfx, sizeof sfx, ".in.tile%d", q);
                        hyfi_reg(g, &fg->pbuf[k], NULL, pn, sizeof(float), rq, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".in.tile%d.grad", q);
                        hyfi_reg(g, &fg->dpbuf[k], NULL, pn, sizeof(float), rq, nd->name, sfx, m,
                                 M);
                    }
                    if (nd->op == OP_BATCHNORM && fg_bn_extended(fg, j, q)) {
                        const size_t own = hyfi_tile_numel(nd->out, q);
                        snprintf(sfx, sizeof sfx, ".own_x.tile%d", q);
                        hyfi_reg(g, &fg->xo[k], NULL, own, sizeof(float), rq, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".own_dy.tile%d", q);
                        hyfi_reg(g, &fg->dyo[k], NULL, own, sizeof(float), rq, nd->name, sfx, m, M);
                        snprintf(sfx, sizeof sfx, ".own_dx.tile%d", q);
                        hyfi_reg(g, &fg->dxo[k], NULL, own, sizeof(float), rq, nd->name, sfx, m, M);
                    }
                }
        }
    }
    return 0;
}

static void fused_free(hyfi_graph *g)
{
    const int M = g->pl ? g->pl->nmb : 1, P = g->pl ? g->pl->P : 1;
    for (int i = 0; i < g->nnodes; i++) {
        hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn || !tn->fg) continue;
        hyfi_fgroup *fg = tn->fg;
        for (int k = 0; k < fg->n; k++)
            if (fg->op[k]->tn) fg->op[k]->tn->fg = NULL;
        const size_t cnt = (size_t)fg->n * M * P;
        starpu_data_handle_t *arrs[] = {fg->val, fg->grad, fg->pbuf, fg->dpbuf, fg->xo, fg->dyo,
                                        fg->dxo};
        for (size_t a = 0; a < sizeof arrs / sizeof *arrs; a++) {
            for (size_t k = 0; arrs[a] && k < cnt; k++) hyfi_unreg(&arrs[a][k]);
            free(arrs[a]);
        }
        for (int j = 0; j < fg->n; j++) {
            hyfi_unreg(&fg->ztot[j]);
            if (fg->ztot_host[j])
                starpu_free_noflag(fg->ztot_host[j],
                                   2 * (size_t)fg->op[j]->out->dims[1] * sizeof(float));
        }
        free(fg);
    }
}


int hyfi_spatial_register(hyfi_graph *g)
{
    const hyfi_plan *pl = g->pl;
    if (pl->K == 0) return 0;
    const int M = pl->nmb, P = pl->P;
    char sfx[48];
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        hyfi_tiles *tl = t->tl;
        if (!tl) continue;
        tl->h = handles((size_t)M * P);
        tl->gh = handles((size_t)M * P);
        tl->gw = calloc((size_t)M * P, 1);
        if (!tl->h || !tl->gh || !tl->gw) return -1;
        for (int m = 0; m < M; m++)
            for (int q = 0; q < P; q++) {
                const size_t n = hyfi_tile_numel(t, q);
                snprintf(sfx, sizeof sfx, ".tile%d", q);
                hyfi_reg(g, &tl->h[m * P + q], NULL, n, sizeof(float),
                         hyfi_tile_rank(g, tl, q, HYFI_REP(pl, m)),
                         t->name, sfx, m, M);
                if (t->kind == T_ACT && t->requires_grad) {
                    snprintf(sfx, sizeof sfx, ".tile%d.grad", q);
                    hyfi_reg(g, &tl->gh[m * P + q], NULL, n, sizeof(float),
                             hyfi_tile_rank(g, tl, q, HYFI_REP(pl, m)), t->name, sfx, m, M);
                }
            }
    }
    for (int i = 0; i < g->nnodes; i++) {
        node *nd = &g->nodes[i];
        hyfi_tnode *tn = nd->tn;
        if (!tn) continue;
        const hyfi_tensor *x = nd->in[0];
        const int n = x->dims[0] / M, C = x->dims[1];
        if (tn->windowed) {
            tn->buf = handles((size_t)M * P);
            tn->dbuf = handles((size_t)M * P);
            tn->strip = handles((size_t)M * P * NP);
            tn->dstrip = handles((size_t)M * P * NP);
            if (!tn->buf || !tn->dbuf || !tn->strip || !tn->dstrip) return -1;
            for (int m = 0; m < M; m++)
                for (int q = 0; q < P; q++) {
                    const int rq = hyfi_tile_rank(g, x->tl, q, HYFI_REP(pl, m));
                    if (!tn->use_buf[q]) continue;
                    const size_t bn = (size_t)n * C * tn->buf_h[q] * tn->buf_w[q];
                    snprintf(sfx, sizeof sfx, ".in.tile%d", q);
                    hyfi_reg(g, &tn->buf[m * P + q], NULL, bn, sizeof(float), rq, nd->name, sfx,
                             m, M);
                    if (x->requires_grad) {
                        snprintf(sfx, sizeof sfx, ".in.tile%d.grad", q);
                        hyfi_reg(g, &tn->dbuf[m * P + q], NULL, bn, sizeof(float), rq, nd->name,
                                 sfx, m, M);
                    }
                    for (int k = 1; k < tn->npieces[q]; k++) {
                        const hyfi_piece *p = &tn->piece[q][k];
                        const int ru = hyfi_tile_rank(g, x->tl, tn->from[q][k], HYFI_REP(pl, m));
                        const size_t sn = (size_t)n * C * p->h * p->w;
                        const size_t j = ((size_t)m * P + q) * NP + k;
                        snprintf(sfx, sizeof sfx, ".halo%d_%d", tn->from[q][k], q);
                        hyfi_reg(g, &tn->strip[j], NULL, sn, sizeof(float), ru, nd->name, sfx, m, M);
                        starpu_data_set_user_data(tn->strip[j], &hyfi_halo_tag);
                        if (x->requires_grad) {
                            snprintf(sfx, sizeof sfx, ".halo%d_%d.grad", tn->from[q][k], q);
                            hyfi_reg(g, &tn->dstrip[j], NULL, sn, sizeof(float), rq, nd->name,
                                     sfx, m, M);
                            starpu_data_set_user_data(tn->dstrip[j], &hyfi_halo_tag);
                        }
                    }
                }
            if (nd->op == OP_CONV2D) {
                const int NR = pl->nrep;
                tn->wpart = handles((size_t)P * NR);
                if (nd->p[1]) tn->bpart = handles((size_t)P * NR);
                if (!tn->wpart || (nd->p[1] && !tn->bpart)) return -1;
                for (int k = 0; k < P * NR; k++) {
                    const int q = k % P, rq = hyfi_tile_rank(g, nd->out->tl, q, k / P);
                    if (NR > 1) snprintf(sfx, sizeof sfx, ".grad.r%d.tile%d", k / P, q);
                    else snprintf(sfx, sizeof sfx, ".grad.tile%d", q);
                    hyfi_reg(g, &tn->wpart[k], NULL, nd->p[0]->numel, sizeof(float), rq,
                             nd->p[0]->name, sfx, 0, 1);
                    if (nd->p[1])
                        hyfi_reg(g, &tn->bpart[k], NULL, nd->p[1]->numel, sizeof(float), rq,
                                 nd->p[1]->name, sfx, 0, 1);
                    if (pl->mbr > 1 && !g->plan_cfg.deterministic) {
                        starpu_data_set_reduction_methods(tn->wpart[k], &hyfi_cl_redux_add,
                                                          &hyfi_cl_redux_zero);
                        if (nd->p[1])
                            starpu_data_set_reduction_methods(tn->bpart[k], &hyfi_cl_redux_add,
                                                              &hyfi_cl_redux_zero);
                    }
                }
            }
        } else if (nd->op == OP_BATCHNORM) {
            tn->part = handles((size_t)M * P);
            tn->bwpart = handles((size_t)M * P);
            tn->tot = handles((size_t)M);
            if (!tn->part || !tn->bwpart || !tn->tot) return -1;
            for (int m = 0; m < M; m++) {
                for (int q = 0; q < P; q++) {
                    const int rq = hyfi_tile_rank(g, x->tl, q, HYFI_REP(pl, m));
                    snprintf(sfx, sizeof sfx, ".stats.tile%d", q);
                    /* 2C doubles */
                    hyfi_reg(g, &tn->part[m * P + q], NULL, 4 * (size_t)C, sizeof(float), rq,
                             nd->name, sfx, m, M);
                    snprintf(sfx, sizeof sfx, ".dstats.tile%d", q);
                    hyfi_reg(g, &tn->bwpart[m * P + q], NULL, 4 * (size_t)C, sizeof(float), rq,
                             nd->name, sfx, m, M);
                }
                hyfi_reg(g, &tn->tot[m], NULL, 2 * (size_t)C, sizeof(float),
                         hyfi_stage_rank(pl, HYFI_REP(pl, m), nd->stage), nd->name, ".dstats", m,
                         M);
            }
        }
    }
    return fused_register(g);
}

/* -------------------------------------------------------------- emitting */

#define TILE(x, q) ((x)->tl->h[e->m * e->g->pl->P + (q)])
#define TGRAD(x, q) ((x)->tl->gh[e->m * e->g->pl->P + (q)])
#define TGWF(x, q) ((x)->tl->gw[e->m * e->g->pl->P + (q)])

static void tile_grad_out(emit_ctx *e, hyfi_tensor *x, int q)
{
    program *P = e->P;
    hyfi_prog_buf(P, TGRAD(x, q), TGWF(x, q) ? STARPU_RW : STARPU_W);
}

static void tile_grad_done(emit_ctx *e, hyfi_tensor *x, int q)
{
    TGWF(x, q) = 1;
    x->gwritten = 1;
}

static int tplace(const emit_ctx *e, const hyfi_tensor *x, int q)
{
    return place_of(e->g->pl, e->rep, x->tl->stage, q);
}

static void tname(char *out, size_t len, const node *nd, const char *pass, int q, const emit_ctx *e)
{
    char p2[48];
    snprintf(p2, sizeof p2, "%s.t%d", pass, q);
    hyfi_task_name(out, len, nd, p2, e);
}

/* A tile's op input: its assembled buffer (after packing and assembling) or
 * the tile itself. */
static int emit_assemble(emit_ctx *e, const node *nd, int q, starpu_data_handle_t *in)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
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
        W(tn->strip[((size_t)e->m * Pt + q) * NP + k]), R(TILE(x, u));
        ON_PLACE(tplace(e, x, u));
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
    tname(nm, sizeof nm, nd, "assemble", q, e);
    TASK(&hyfi_cl_tile_assemble, nm, &a);
    W(tn->buf[e->m * Pt + q]), R(TILE(x, q));
    for (int k = 1; k < tn->npieces[q]; k++) R(tn->strip[((size_t)e->m * Pt + q) * NP + k]);
    ON_PLACE(tplace(e, x, q));
    *in = tn->buf[e->m * Pt + q];
    return 0;
}

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

static hyfi_task_args tile_args(const emit_ctx *e, const node *nd, int q)
{
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    const hyfi_tiles *yt = nd->out->tl;
    const int ho = tile_h(yt, q), wo = tile_w(yt, q);
    const hyfi_tnode *tn = nd->tn;
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv.h = in_h(nd, q);
        a.u.conv.w = in_w(nd, q);
        a.u.conv.ho = ho;
        a.u.conv.wo = wo;
        a.u.conv.ph = a.u.conv.pw = 0; /* zeros are in the buffer */
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        a.u.pool.h = in_h(nd, q);
        a.u.pool.w = in_w(nd, q);
        a.u.pool.ho = ho;
        a.u.pool.wo = wo;
        if (tn->explicit_pad) {
            a.u.pool.ph = a.u.pool.pw = 0;
        } else { /* the image border's padding before; clipping after */
            a.u.pool.ph = tn->rs[q / yt->cols].pad_before;
            a.u.pool.pw = tn->cs[q % yt->cols].pad_before;
        }
        break;
    case OP_BATCHNORM:
        a.u.bn.h = ho;
        a.u.bn.w = wo;
        break;
    case OP_RELU:
    case OP_ADD:
        a.u.elt.count = hyfi_tile_numel(nd->out, q);
        break;
    default:
        break;
    }
    return a;
}

/* ------------------------------------------------------- fused emission */

static int emit_unassemble(emit_ctx *e, const node *nd, int q);
static int emit_halo_return(emit_ctx *e, const node *nd, int q);

#define FGK(j, q) (((size_t)(j) * e->M + e->m) * e->g->pl->P + (q))

/* Op j's input on tile q (what its kernel reads) and that input's gradient. */
static starpu_data_handle_t fg_in(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    if (j == 0) return fg->op[0]->tn->buf[e->m * e->g->pl->P + q];
    return fg_padded(fg, j, q) ? fg->pbuf[FGK(j, q)] : fg->val[FGK(j - 1, q)];
}
static starpu_data_handle_t fg_out(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TILE(fg->op[j]->out, q) : fg->val[FGK(j, q)];
}
static starpu_data_handle_t fg_dout(emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    return j == fg->n - 1 ? TGRAD(fg->op[j]->out, q) : fg->grad[FGK(j, q)];
}

/* Kernel arguments of op j on tile q: shapes of its regions. */
static hyfi_task_args fg_args(const emit_ctx *e, const hyfi_fgroup *fg, int j, int q)
{
    const node *nd = fg->op[j];
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    const int ho = fg_rows(fg, j, q), wo = fg_cols(fg, j, q);
    int hi, wi, ph = 0, pw = 0;
    if (j == 0) {
        hi = nd->tn->buf_h[q], wi = nd->tn->buf_w[q];
    } else if (fg_padded(fg, j, q)) {
        hi = fg_rows(fg, j - 1, q) + fg->pt[j][q] + fg->pb[j][q];
        wi = fg_cols(fg, j - 1, q) + fg->pl[j][q] + fg->pr[j][q];
    } else {
        hi = fg_rows(fg, j - 1, q), wi = fg_cols(fg, j - 1, q);
    }
    /* max pools and average pools without the padding: kernel padding before */
    if ((nd->op == OP_MAXPOOL || nd->op == OP_AVGPOOL) && !nd->tn->explicit_pad)
        ph = fg->pt[j][q], pw = fg->pl[j][q];
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv.h = hi, a.u.conv.w = wi, a.u.conv.ho = ho, a.u.conv.wo = wo;
        a.u.conv.ph = a.u.conv.pw = 0;
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
        a.u.pool.h = hi, a.u.pool.w = wi, a.u.pool.ho = ho, a.u.pool.wo = wo;
        a.u.pool.ph = ph, a.u.pool.pw = pw;
        break;
    case OP_BATCHNORM:
        a.u.bn.h = ho, a.u.bn.w = wo;
        break;
    case OP_RELU:
        a.u.elt.count = (size_t)(nd->out->dims[0] / e->M) * nd->out->dims[1] * ho * wo;
        break;
    default:
        break;
    }
    return a;
}

/* One-piece copy between a region tensor (n, C, rh, rw) and a sub-rectangle. */
static hyfi_tile_args fg_rect(int n, int C, int dh, int dw, int sh, int sw, int sy, int sx,
                              int dy, int dx, int h, int w)
{
    hyfi_tile_args t = {.n = n, .c = C, .dst_h = dh, .dst_w = dw, .npieces = 1};
    t.p[0] = (hyfi_piece){.src_h = sh, .src_w = sw, .src_y = sy, .src_x = sx, .dst_y = dy,
                          .dst_x = dx, .h = h, .w = w};
    return t;
}

static int fused_forward(emit_ctx *e, const hyfi_fgroup *fg, int training)
{
    program *P = e->P;
    const int Pt = e->g->pl->P;
    char nm[64];
    for (int j = 0; j < fg->n; j++) {
        const node *nd = fg->op[j];
        const int n = nd->out->dims[0] / e->M, C = nd->out->dims[1], Ci = nd->in[0]->dims[1];
        if (nd->op == OP_BATCHNORM && training) {
            const hyfi_tnode *tn = nd->tn;
            hyfi_bn_combine_args ca = {.c = C, .nparts = Pt, .eps = nd->a.bn.eps,
                                       .momentum = nd->a.bn.momentum};
            for (int q = 0; q < Pt; q++) {
                /* statistics over the own tile only */
                const hyfi_tiles *tl = nd->out->tl;
                hyfi_batchnorm_args own = nd->a.bn;
                own.n = n, own.h = tile_h(tl, q), own.w = tile_w(tl, q);
                ca.count[q] = (double)n * own.h * own.w;
                starpu_data_handle_t x = fg_in(e, fg, j, q);
                if (fg_bn_extended(fg, j, q)) {
                    hyfi_task_args c = {.u.tile = fg_rect(
                        n, C, own.h, own.w, fg_rows(fg, j, q), fg_cols(fg, j, q),
                        tl->rcut[q / tl->cols] - fg->r0[j][q], tl->ccut[q % tl->cols] - fg->c0[j][q],
                        0, 0, own.h, own.w)};
                    tname(nm, sizeof nm, nd, "own", q, e);
                    TASK(&hyfi_cl_tile_assemble, nm, &c);
                    W(fg->xo[FGK(j, q)]), R(x);
                    ON_PLACE(tplace(e, nd->out, q));
                    x = fg->xo[FGK(j, q)];
                }
                hyfi_task_args s = {.u.bnt = {.bn = own}};
                tname(nm, sizeof nm, nd, "stats", q, e);
                TASK(&hyfi_cl_bn_stats, nm, &s);
                W(tn->part[e->m * Pt + q]), R(x);
                ON_PLACE(tplace(e, nd->out, q));
            }
            hyfi_task_args c = {.u.bnc = ca};
            hyfi_task_name(nm, sizeof nm, nd, "combine", e);
            TASK(&hyfi_cl_bn_combine, nm, &c);
            W(TH(nd->s[0], e->m)), W(TH(nd->s[1], e->m)), RW(PH(nd->p[2]));
            RW(PH(nd->p[3]));
            for (int q = 0; q < Pt; q++) R(tn->part[e->m * Pt + q]);
        }
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            if (j == 0) {
                starpu_data_handle_t in;
                if (emit_assemble(e, nd, q, &in)) return -1;
            } else if (fg_padded(fg, j, q)) {
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_task_args c = {.u.tile = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                                      rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                                      fg->pt[j][q], fg->pl[j][q], rh, rw)};
                c.u.tile.zero_fill = 1;
                tname(nm, sizeof nm, nd, "pad", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &c);
                W(fg->pbuf[FGK(j, q)]), R(fg->val[FGK(j - 1, q)]);
                ON_PLACE(tplace(e, nd->out, q));
            }
            starpu_data_handle_t in = fg_in(e, fg, j, q), out = fg_out(e, fg, j, q);
            tname(nm, sizeof nm, nd, "fwd", q, e);
            switch (nd->op) {
            case OP_CONV2D:
                TASK(&hyfi_cl_conv2d_forward, nm, &a);
                W(out), R(in), R(PH(nd->p[0]));
                if (nd->p[1]) R(PH(nd->p[1]));
                break;
            case OP_MAXPOOL:
            case OP_AVGPOOL:
                TASK(nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_forward : &hyfi_cl_avgpool_forward,
                     nm, &a);
                W(out), R(in);
                break;
            case OP_BATCHNORM:
                TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
                W(out), R(in), R(PH(nd->p[0])), R(PH(nd->p[1]));
                if (training) R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                else R(PH(nd->p[2])), R(PH(nd->p[3]));
                break;
            case OP_RELU:
                TASK(&hyfi_cl_relu_forward, nm, &a);
                W(out), R(in);
                break;
            default:
                return -1;
            }
            ON_PLACE(tplace(e, nd->out, q));
        }
    }
    return 0;
}

static int fused_backward(emit_ctx *e, const hyfi_fgroup *fg)
{
    program *P = e->P;
    const int Pt = e->g->pl->P;
    char nm[64];
    for (int j = fg->n - 1; j >= 0; j--) {
        const node *nd = fg->op[j];
        const hyfi_tnode *tn = nd->tn;
        const int n = nd->out->dims[0] / e->M, C = nd->out->dims[1], Ci = nd->in[0]->dims[1];
        hyfi_tensor *x0 = fg->op[0]->in[0];
        const int data = j > 0 || x0->requires_grad;
        /* where op j's input gradient goes: op j-1's region gradient, through the
         * padded copy's gradient when there is one; op 0: the buffer gradient */
        if (nd->op == OP_BATCHNORM) {
            hyfi_bn_combine_args ca = {.c = C, .nparts = Pt, .eps = nd->a.bn.eps,
                                       .momentum = nd->a.bn.momentum};
            double total = 0;
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = fg_args(e, fg, j, q);
                const hyfi_tiles *tl = nd->out->tl;
                ca.count[q] = (double)n * tile_h(tl, q) * tile_w(tl, q);
                total += ca.count[q];
                hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
                tname(nm, sizeof nm, nd, "bwd_stats", q, e);
                TASK(&hyfi_cl_bn_bwd_stats, nm, &s);
                W(tn->bwpart[e->m * Pt + q]), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                R(TH(nd->s[0], e->m));
                ON_PLACE(tplace(e, nd->out, q));
            }
            enum starpu_data_access_mode mg, mb;
            int accg, accb;
            nd->p[0]->gwritten = nd->p[1]->gwritten = 1;
            if (hyfi_grad_sum_mode(e, PGH(nd->p[0]), &PGW(nd->p[0]), nd->p[0]->numel,
                                   nd->p[0]->name, &mg, &accg) ||
                hyfi_grad_sum_mode(e, PGH(nd->p[1]), &PGW(nd->p[1]), nd->p[1]->numel,
                                   nd->p[1]->name, &mb, &accb))
                return -1;
            hyfi_task_args c = {.acc = accg ? HYFI_BN_ACC_PARAMS : 0, .u.bnc = ca};
            hyfi_task_name(nm, sizeof nm, nd, "bwd_combine", e);
            TASK(&hyfi_cl_bn_bwd_combine, nm, &c);
            W(tn->tot[e->m]);
            hyfi_prog_buf(P, PGH(nd->p[0]), mg);
            hyfi_prog_buf(P, PGH(nd->p[1]), mb);
            R(TH(nd->s[1], e->m));
            for (int q = 0; q < Pt; q++) R(tn->bwpart[e->m * Pt + q]);
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = fg_args(e, fg, j, q);
                const int ext = fg_bn_extended(fg, j, q);
                hyfi_task_args s = {.u.bnt = {.bn = a.u.bn, .total = total}};
                /* extended: the dy part on the whole region (zero totals), then the
                 * full formula on the own tile over it */
                tname(nm, sizeof nm, nd, "bwd", q, e);
                TASK(&hyfi_cl_bn_bwd_apply, nm, &s);
                W(fg->grad[FGK(j - 1, q)]), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                R(PH(nd->p[0])), R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                R(ext ? fg->ztot[j] : tn->tot[e->m]);
                ON_PLACE(tplace(e, nd->out, q));
                if (!ext) continue;
                const hyfi_tiles *tl = nd->out->tl;
                const int oh = tile_h(tl, q), ow = tile_w(tl, q), rh = fg_rows(fg, j, q),
                          rw = fg_cols(fg, j, q);
                const int oy = tl->rcut[q / tl->cols] - fg->r0[j][q],
                          ox = tl->ccut[q % tl->cols] - fg->c0[j][q];
                hyfi_task_args cp = {.u.tile = fg_rect(n, C, oh, ow, rh, rw, oy, ox, 0, 0, oh, ow)};
                tname(nm, sizeof nm, nd, "own_dy", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &cp);
                W(fg->dyo[FGK(j, q)]), R(fg_dout(e, fg, j, q));
                ON_PLACE(tplace(e, nd->out, q));
                tname(nm, sizeof nm, nd, "own_x", q, e);
                TASK(&hyfi_cl_tile_assemble, nm, &cp);
                W(fg->xo[FGK(j, q)]), R(fg_in(e, fg, j, q));
                ON_PLACE(tplace(e, nd->out, q));
                hyfi_task_args so = s;
                so.u.bnt.bn.h = oh, so.u.bnt.bn.w = ow;
                tname(nm, sizeof nm, nd, "bwd_own", q, e);
                TASK(&hyfi_cl_bn_bwd_apply, nm, &so);
                W(fg->dxo[FGK(j, q)]), R(fg->dyo[FGK(j, q)]), R(fg->xo[FGK(j, q)]);
                R(PH(nd->p[0])), R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
                R(tn->tot[e->m]);
                ON_PLACE(tplace(e, nd->out, q));
                hyfi_task_args sc = {.u.tile = fg_rect(n, C, oh, ow, rh, rw, oy, ox, 0, 0, oh, ow)};
                tname(nm, sizeof nm, nd, "own_dx", q, e);
                TASK(&hyfi_cl_tile_scatter, nm, &sc);
                RW(fg->grad[FGK(j - 1, q)]), R(fg->dxo[FGK(j, q)]);
                ON_PLACE(tplace(e, nd->out, q));
            }
            continue;
        }
        for (int q = 0; q < Pt && data; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            const int padded = fg_padded(fg, j, q);
            starpu_data_handle_t din = j == 0   ? tn->dbuf[e->m * Pt + q]
                                       : padded ? fg->dpbuf[FGK(j, q)]
                                                : fg->grad[FGK(j - 1, q)];
            tname(nm, sizeof nm, nd, nd->op == OP_CONV2D ? "bwd_data" : "bwd", q, e);
            switch (nd->op) {
            case OP_CONV2D:
                TASK(&hyfi_cl_conv2d_backward_data, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(PH(nd->p[0]));
                break;
            case OP_MAXPOOL:
                TASK(&hyfi_cl_maxpool_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
                break;
            case OP_AVGPOOL:
                TASK(&hyfi_cl_avgpool_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q));
                break;
            case OP_RELU:
                TASK(&hyfi_cl_relu_backward, nm, &a);
                W(din), R(fg_dout(e, fg, j, q)), R(fg_out(e, fg, j, q));
                break;
            default:
                return -1;
            }
            ON_PLACE(tplace(e, nd->out, q));
            if (j > 0 && padded) {
                const int rh = fg_rows(fg, j - 1, q), rw = fg_cols(fg, j - 1, q);
                hyfi_task_args c = {.u.tile = fg_rect(n, Ci, rh + fg->pt[j][q] + fg->pb[j][q],
                                                      rw + fg->pl[j][q] + fg->pr[j][q], rh, rw, 0, 0,
                                                      fg->pt[j][q], fg->pl[j][q], rh, rw)};
                tname(nm, sizeof nm, nd, "unpad", q, e);
                TASK(&hyfi_cl_tile_scatter, nm, &c);
                W(fg->grad[FGK(j - 1, q)]), R(fg->dpbuf[FGK(j, q)]);
                ON_PLACE(tplace(e, nd->out, q));
            }
            if (j == 0 && emit_unassemble(e, nd, q)) return -1;
        }
        for (int q = 0; q < Pt && j == 0 && data; q++)
            if (emit_halo_return(e, nd, q)) return -1;
        if (nd->op != OP_CONV2D) continue;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = fg_args(e, fg, j, q);
            enum starpu_data_access_mode mw, mb = STARPU_W;
            int accw;
            unsigned char wf = tn->wpw[e->rep * Pt + q], bf = tn->wpw[e->rep * Pt + q];
            if (hyfi_grad_sum_mode(e, tn->wpart[e->rep * Pt + q], &wf, nd->p[0]->numel, nd->p[0]->name, &mw,
                                   &accw))
                return -1;
            if (nd->p[1]) {
                int accb;
                if (hyfi_grad_sum_mode(e, tn->bpart[e->rep * Pt + q], &bf, nd->p[1]->numel, nd->p[1]->name,
                                       &mb, &accb))
                    return -1;
            }
            for (int k = P->n - 1; k >= 0 && P->t[k].place < 0 && P->t[k].cl == &hyfi_cl_fill; k--)
                P->t[k].place = tplace(e, nd->out, q);
            nd->tn->wpw[e->rep * Pt + q] = 1;
            nd->p[0]->gwritten = 1;
            if (nd->p[1]) nd->p[1]->gwritten = 1;
            a.acc = accw;
            tname(nm, sizeof nm, nd, "bwd_weight", q, e);
            TASK(&hyfi_cl_conv2d_backward_weight, nm, &a);
            hyfi_prog_buf(P, tn->wpart[e->rep * Pt + q], mw);
            if (nd->p[1]) hyfi_prog_buf(P, tn->bpart[e->rep * Pt + q], mb);
            R(fg_dout(e, fg, j, q)), R(fg_in(e, fg, j, q));
            ON_PLACE(tplace(e, nd->out, q));
        }
    }
    return 0;
}

int hyfi_spatial_forward(emit_ctx *e, const node *nd, int training)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its first op */
        return nd->tn->fg_pos == 0 ? fused_forward(e, nd->tn->fg, training) : 0;
    program *P = e->P;
    const int Pt = e->g->pl->P;
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    char nm[64];
    if (nd->op == OP_BATCHNORM && training) {
        const hyfi_tnode *tn = nd->tn;
        hyfi_bn_combine_args ca = {.c = x->dims[1], .nparts = Pt, .eps = nd->a.bn.eps,
                                   .momentum = nd->a.bn.momentum};
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
            ca.count[q] = (double)a.u.bn.n * a.u.bn.h * a.u.bn.w;
            tname(nm, sizeof nm, nd, "stats", q, e);
            TASK(&hyfi_cl_bn_stats, nm, &s);
            W(tn->part[e->m * Pt + q]), R(TILE(x, q));
            ON_PLACE(tplace(e, x, q));
        }
        hyfi_task_args c = {.u.bnc = ca};
        hyfi_task_name(nm, sizeof nm, nd, "combine", e);
        TASK(&hyfi_cl_bn_combine, nm, &c);
        W(TH(nd->s[0], e->m)), W(TH(nd->s[1], e->m)), RW(PH(nd->p[2])), RW(PH(nd->p[3]));
        for (int q = 0; q < Pt; q++) R(tn->part[e->m * Pt + q]);
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            tname(nm, sizeof nm, nd, "fwd", q, e);
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(TILE(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(PH(nd->p[1]));
            R(TH(nd->s[0], e->m)), R(TH(nd->s[1], e->m));
            ON_PLACE(tplace(e, y, q));
        }
        return 0;
    }
    for (int q = 0; q < Pt; q++) {
        hyfi_task_args a = tile_args(e, nd, q);
        tname(nm, sizeof nm, nd, "fwd", q, e);
        switch (nd->op) {
        case OP_CONV2D: {
            starpu_data_handle_t in;
            if (emit_assemble(e, nd, q, &in)) return -1;
            TASK(&hyfi_cl_conv2d_forward, nm, &a);
            W(TILE(y, q)), R(in), R(PH(nd->p[0]));
            if (nd->p[1]) R(PH(nd->p[1]));
            break;
        }
        case OP_MAXPOOL:
        case OP_AVGPOOL: {
            starpu_data_handle_t in;
            if (emit_assemble(e, nd, q, &in)) return -1;
            TASK(nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_forward : &hyfi_cl_avgpool_forward, nm,
                 &a);
            W(TILE(y, q)), R(in);
            break;
        }
        case OP_BATCHNORM: /* eval mode: running statistics */
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(TILE(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(PH(nd->p[1]));
            R(PH(nd->p[2])), R(PH(nd->p[3]));
            break;
        case OP_RELU:
            TASK(&hyfi_cl_relu_forward, nm, &a);
            W(TILE(y, q)), R(TILE(x, q));
            break;
        case OP_ADD:
            TASK(&hyfi_cl_add_forward, nm, &a);
            W(TILE(y, q)), R(TILE(nd->in[0], q)), R(TILE(nd->in[1], q));
            break;
        case OP_CONCAT: {
            int off = 0;
            const int hw = tile_h(y->tl, q) * tile_w(y->tl, q);
            for (int i = 0; i < nd->nin; i++) {
                hyfi_tensor *xi = nd->in[i];
                a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M, .hw = hw,
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                char pass[16];
                snprintf(pass, sizeof pass, "fwd%d", i);
                tname(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_concat_forward, nm, &a);
                hyfi_prog_buf(P, TILE(y, q), i == 0 ? STARPU_W : STARPU_RW);
                R(TILE(xi, q));
                ON_PLACE(tplace(e, y, q));
                off += xi->dims[1];
            }
            continue;
        }
        default:
            return -1;
        }
        ON_PLACE(tplace(e, y, q));
    }
    return 0;
}

/* Backward of a windowed op's input on tile q: the buffer gradient scattered
 * into the tile's own gradient and the strip gradients (W), then the strips
 * added into the neighbours' tile gradients (after all tiles' own parts). */
static int emit_unassemble(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
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
    tname(nm, sizeof nm, nd, "unassemble", q, e);
    TASK(&hyfi_cl_tile_scatter, nm, &a);
    tile_grad_out(e, x, q);
    for (int k = 1; k < tn->npieces[q]; k++) W(tn->dstrip[((size_t)e->m * Pt + q) * NP + k]);
    R(tn->dbuf[e->m * Pt + q]);
    ON_PLACE(tplace(e, x, q));
    tile_grad_done(e, x, q);
    return 0;
}

static int emit_halo_return(emit_ctx *e, const node *nd, int q)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    hyfi_tensor *x = nd->in[0];
    const int n = x->dims[0] / e->M, C = x->dims[1], Pt = e->g->pl->P;
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
        RW(TGRAD(x, u)), R(tn->dstrip[((size_t)e->m * Pt + q) * NP + k]);
        ON_PLACE(tplace(e, x, u));
    }
    return 0;
}

int hyfi_spatial_backward(emit_ctx *e, const node *nd)
{
    if (nd->tn && nd->tn->fg) /* the group is emitted with its last op */
        return nd->tn->fg_pos == nd->tn->fg->n - 1 ? fused_backward(e, nd->tn->fg) : 0;
    program *P = e->P;
    const int Pt = e->g->pl->P;
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    const hyfi_tnode *tn = nd->tn;
    char nm[64];
    switch (nd->op) {
    case OP_CONV2D:
    case OP_MAXPOOL:
    case OP_AVGPOOL: {
        const int data = x->requires_grad;
        for (int q = 0; q < Pt && data; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            const int direct = !tn->use_buf[q];
            a.acc = direct ? TGWF(x, q) : 0;
            tname(nm, sizeof nm, nd, nd->op == OP_CONV2D ? "bwd_data" : "bwd", q, e);
            TASK(nd->op == OP_CONV2D    ? &hyfi_cl_conv2d_backward_data
                 : nd->op == OP_MAXPOOL ? &hyfi_cl_maxpool_backward
                                        : &hyfi_cl_avgpool_backward,
                 nm, &a);
            if (direct) tile_grad_out(e, x, q);
            else W(tn->dbuf[e->m * Pt + q]);
            R(TGRAD(y, q));
            if (nd->op == OP_CONV2D) R(PH(nd->p[0]));
            if (nd->op == OP_MAXPOOL) R(direct ? TILE(x, q) : tn->buf[e->m * Pt + q]);
            ON_PLACE(tplace(e, x, q));
            if (direct) tile_grad_done(e, x, q);
            else if (emit_unassemble(e, nd, q)) return -1;
        }
        for (int q = 0; q < Pt && data; q++)
            if (tn->use_buf[q] && emit_halo_return(e, nd, q)) return -1;
        if (nd->op != OP_CONV2D) return 0;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            enum starpu_data_access_mode mw, mb = STARPU_W;
            int accw;
            unsigned char wf = nd->tn->wpw[e->rep * Pt + q], bf = nd->tn->wpw[e->rep * Pt + q];
            if (hyfi_grad_sum_mode(e, tn->wpart[e->rep * Pt + q], &wf, nd->p[0]->numel, nd->p[0]->name, &mw,
                                   &accw))
                return -1;
            if (nd->p[1]) {
                int accb;
                if (hyfi_grad_sum_mode(e, tn->bpart[e->rep * Pt + q], &bf, nd->p[1]->numel, nd->p[1]->name,
                                       &mb, &accb))
                    return -1;
            }
            /* the fill tasks go to the tile's place too */
            for (int k = P->n - 1; k >= 0 && P->t[k].place < 0 && P->t[k].cl == &hyfi_cl_fill; k--)
                P->t[k].place = tplace(e, y, q);
            nd->tn->wpw[e->rep * Pt + q] = 1;
            nd->p[0]->gwritten = 1;
            if (nd->p[1]) nd->p[1]->gwritten = 1;
            a.acc = accw;
            tname(nm, sizeof nm, nd, "bwd_weight", q, e);
            TASK(&hyfi_cl_conv2d_backward_weight, nm, &a);
            hyfi_prog_buf(P, tn->wpart[e->rep * Pt + q], mw);
            if (nd->p[1]) hyfi_prog_buf(P, tn->bpart[e->rep * Pt + q], mb);
            R(TGRAD(y, q)), R(tn->use_buf[q] ? tn->buf[e->m * Pt + q] : TILE(x, q));
            ON_PLACE(tplace(e, y, q));
        }
        return 0;
    }
    case OP_BATCHNORM: {
        hyfi_bn_combine_args ca = {.c = x->dims[1], .nparts = Pt, .eps = nd->a.bn.eps,
                                   .momentum = nd->a.bn.momentum};
        double total = 0;
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.u.bnt = {.bn = a.u.bn}};
            ca.count[q] = (double)a.u.bn.n * a.u.bn.h * a.u.bn.w;
            total += ca.count[q];
            tname(nm, sizeof nm, nd, "bwd_stats", q, e);
            TASK(&hyfi_cl_bn_bwd_stats, nm, &s);
            W(tn->bwpart[e->m * Pt + q]), R(TGRAD(y, q)), R(TILE(x, q)), R(TH(nd->s[0], e->m));
            ON_PLACE(tplace(e, x, q));
        }
        enum starpu_data_access_mode mg, mb;
        int accg, accb;
        nd->p[0]->gwritten = nd->p[1]->gwritten = 1;
        if (hyfi_grad_sum_mode(e, PGH(nd->p[0]), &PGW(nd->p[0]), nd->p[0]->numel,
                               nd->p[0]->name, &mg, &accg) ||
            hyfi_grad_sum_mode(e, PGH(nd->p[1]), &PGW(nd->p[1]), nd->p[1]->numel,
                               nd->p[1]->name, &mb, &accb))
            return -1;
        hyfi_task_args c = {.acc = accg ? HYFI_BN_ACC_PARAMS : 0, .u.bnc = ca};
        hyfi_task_name(nm, sizeof nm, nd, "bwd_combine", e);
        TASK(&hyfi_cl_bn_bwd_combine, nm, &c);
        W(tn->tot[e->m]);
        hyfi_prog_buf(P, PGH(nd->p[0]), mg);
        hyfi_prog_buf(P, PGH(nd->p[1]), mb);
        R(TH(nd->s[1], e->m));
        for (int q = 0; q < Pt; q++) R(tn->bwpart[e->m * Pt + q]);
        for (int q = 0; q < Pt && x->requires_grad; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.acc = TGWF(x, q) ? HYFI_BN_ACC_DX : 0,
                                .u.bnt = {.bn = a.u.bn, .total = total}};
            tname(nm, sizeof nm, nd, "bwd", q, e);
            TASK(&hyfi_cl_bn_bwd_apply, nm, &s);
            tile_grad_out(e, x, q);
            R(TGRAD(y, q)), R(TILE(x, q)), R(PH(nd->p[0])), R(TH(nd->s[0], e->m));
            R(TH(nd->s[1], e->m)), R(tn->tot[e->m]);
            ON_PLACE(tplace(e, x, q));
            tile_grad_done(e, x, q);
        }
        return 0;
    }
    case OP_RELU:
        for (int q = 0; q < Pt && x->requires_grad; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            a.acc = TGWF(x, q);
            tname(nm, sizeof nm, nd, "bwd", q, e);
            TASK(&hyfi_cl_relu_backward, nm, &a);
            tile_grad_out(e, x, q);
            R(TGRAD(y, q)), R(TILE(y, q));
            ON_PLACE(tplace(e, x, q));
            tile_grad_done(e, x, q);
        }
        return 0;
    case OP_ADD:
        for (int i = 0; i < 2; i++) {
            hyfi_tensor *xi = nd->in[i];
            for (int q = 0; q < Pt && xi->requires_grad; q++) {
                hyfi_task_args a = {.acc = TGWF(xi, q), .u.elt.count = hyfi_tile_numel(xi, q)};
                char pass[16];
                snprintf(pass, sizeof pass, "bwd%d", i);
                tname(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_accumulate, nm, &a);
                tile_grad_out(e, xi, q);
                R(TGRAD(y, q));
                ON_PLACE(tplace(e, xi, q));
                tile_grad_done(e, xi, q);
            }
        }
        return 0;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            for (int q = 0; q < Pt && xi->requires_grad; q++) {
                hyfi_task_args a = {.acc = TGWF(xi, q)};
                a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M,
                                                .hw = tile_h(y->tl, q) * tile_w(y->tl, q),
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                char pass[16];
                snprintf(pass, sizeof pass, "bwd%d", i);
                tname(nm, sizeof nm, nd, pass, q, e);
                TASK(&hyfi_cl_concat_backward, nm, &a);
                tile_grad_out(e, xi, q);
                R(TGRAD(y, q));
                ON_PLACE(tplace(e, xi, q));
                tile_grad_done(e, xi, q);
            }
            off += xi->dims[1];
        }
        return 0;
    }
    default:
        return -1;
    }
}

/* Gather the tiles of x into its whole-tensor view (on the event's place). */
int hyfi_spatial_gather(emit_ctx *e, hyfi_tensor *x)
{
    program *P = e->P;
    const hyfi_tiles *tl = x->tl;
    const int Pt = e->g->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
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
    const int Pt = e->g->pl->P, n = x->dims[0] / e->M, C = x->dims[1];
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
        for (int k = 0; k < cnt; k++) tile_grad_out(e, x, q0 + k);
        R(TGH(x, e->m));
        for (int k = 0; k < cnt; k++) tile_grad_done(e, x, q0 + k);
    }
    return 0;
}

/* Before the update: the tiles' weight gradients of tiled convolutions added
 * into the parameter gradients, on the stage's first place. */
int hyfi_spatial_param_sums(emit_ctx *e)
{
    program *P = e->P;
    hyfi_graph *g = e->g;
    const int Pt = g->pl->P;
    char nm[HYFI_NAME_MAX + 32];
    for (int r = 0; r < g->pl->nrep; r++)
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!nd->tn || !nd->tn->wpart || !nd->tn->wpw[r * Pt]) continue;
        for (int k = 0; k < 2; k++) {
            hyfi_tensor *p = nd->p[k];
            if (!p) continue;
            starpu_data_handle_t *parts = (k ? nd->tn->bpart : nd->tn->wpart) + r * Pt;
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = {.acc = q > 0, .u.elt.count = p->numel};
                snprintf(nm, sizeof nm, "%.50s.tile_sum%d", p->name, q);
                TASK(&hyfi_cl_accumulate, nm, &a);
                hyfi_prog_buf(P, p->gh[r], q ? STARPU_RW : STARPU_W);
                R(parts[q]);
                P->t[P->n - 1].place = HYFI_PLACE(g->pl, r, g->pl->stage_place0[nd->stage]);
                P->t[P->n - 1].rank = hyfi_stage_rank(g->pl, r, nd->stage);
                P->t[P->n - 1].worker = hyfi_stage_worker(g->pl, r, nd->stage);
            }
            p->gw[r] = 1;
        }
    }
    return 0;
}

/* Micro-batch m is done on tiled stage s: drop the tiles and halo handles. */
int hyfi_spatial_release(emit_ctx *e, int s)
{
    hyfi_graph *g = e->g;
    const int Pt = g->pl->P, m = e->m, rp = e->rep;
    program *P = e->P;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!t->tl || t->tl->stage != s || t->kind == T_INPUT) continue;
        t->released = 1;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, t->tl, q, rp);
            if (hyfi_emit_release(P, t->tl->h[m * Pt + q], r)) return -1;
            if (t->tl->gh[m * Pt + q] && hyfi_emit_release(P, t->tl->gh[m * Pt + q], r)) return -1;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const hyfi_tnode *tn = nd->tn;
        if (!tn || nd->stage != s) continue;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, nd->in[0]->tl, q, rp);
            starpu_data_handle_t hs[] = {tn->buf ? tn->buf[m * Pt + q] : NULL,
                                         tn->dbuf ? tn->dbuf[m * Pt + q] : NULL,
                                         tn->part ? tn->part[m * Pt + q] : NULL,
                                         tn->bwpart ? tn->bwpart[m * Pt + q] : NULL};
            for (size_t k = 0; k < sizeof hs / sizeof *hs; k++)
                if (hs[k] && hyfi_emit_release(P, hs[k], r)) return -1;
            for (int k = 1; tn->strip && k < tn->npieces[q]; k++) {
                const size_t j = ((size_t)m * Pt + q) * NP + k;
                const int ru = hyfi_tile_rank(g, nd->in[0]->tl, tn->from[q][k], rp);
                if (tn->strip[j] && hyfi_emit_release(P, tn->strip[j], ru)) return -1;
                if (tn->dstrip[j] && hyfi_emit_release(P, tn->dstrip[j], r)) return -1;
            }
        }
        if (tn->tot && hyfi_emit_release(P, tn->tot[m], hyfi_stage_rank(g->pl, rp, nd->stage)))
            return -1;
        if (tn->fg && tn->fg_pos == 0) {
            const hyfi_fgroup *fg = tn->fg;
            for (int j = 0; j < fg->n; j++)
                for (int q = 0; q < Pt; q++) {
                    const size_t k = ((size_t)j * g->pl->nmb + m) * Pt + q;
                    const int r = hyfi_tile_rank(g, fg->op[j]->out->tl, q, rp);
                    starpu_data_handle_t hs[] = {fg->val[k], fg->grad[k], fg->pbuf[k],
                                                 fg->dpbuf[k], fg->xo[k], fg->dyo[k], fg->dxo[k]};
                    for (size_t a = 0; a < sizeof hs / sizeof *hs; a++)
                        if (hs[a] && hyfi_emit_release(P, hs[a], r)) return -1;
                }
        }
    }
    return 0;
}

/* Fused-halo groups and the halo strips exchanged per micro-batch (all
 * tiles, forward). */
void hyfi_spatial_halo_counts(const hyfi_graph *g, int *groups, int *fused_ops, int *strips)
{
    *groups = *fused_ops = *strips = 0;
    if (!g->pl || g->pl->K == 0) return;
    for (int i = 0; i < g->nnodes; i++) {
        const hyfi_tnode *tn = g->nodes[i].tn;
        if (!tn) continue;
        if (tn->fg && tn->fg_pos == 0) {
            (*groups)++;
            *fused_ops += tn->fg->n;
        }
        if (!tn->windowed || (tn->fg && tn->fg_pos > 0)) continue;
        for (int q = 0; q < g->pl->P; q++)
            if (tn->use_buf[q]) *strips += tn->npieces[q] - 1;
    }
}

/* Halo bytes per step between tiles on different ranks, from the geometry:
 * every strip forward and its gradient back. */
size_t hyfi_spatial_halo_volume(const hyfi_graph *g)
{
    const hyfi_plan *pl = g->pl;
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
                                 tn->piece[q][k].w * sizeof(float);
                b += x->requires_grad ? 2 * s : s;
            }
        }
    }
    return b;
}
