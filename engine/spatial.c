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

typedef struct hyfi_tnode {
    int windowed;      /* conv, pools: halos and an assembled input */
    int explicit_pad;  /* zeros in the buffer (conv, avg pool counting the padding) */
    hyfi_tile_span rs[HYFI_MAX_TILES], cs[HYFI_MAX_TILES];
    int use_buf[HYFI_MAX_TILES], buf_h[HYFI_MAX_TILES], buf_w[HYFI_MAX_TILES];
    int npieces[HYFI_MAX_TILES];
    int from[HYFI_MAX_TILES][NP];          /* the tile each piece comes from (0: own) */
    hyfi_piece piece[HYFI_MAX_TILES][NP];  /* src_*: coordinates in that tile */
    starpu_data_handle_t *buf, *dbuf;      /* [m * P + t] */
    starpu_data_handle_t *strip, *dstrip;  /* [(m * P + t) * NP + k], k >= 1 */
    starpu_data_handle_t *wpart, *bpart;   /* conv: per-tile weight / bias gradients [t] */
    unsigned char wpw[HYFI_MAX_TILES];
    starpu_data_handle_t *part, *bwpart;   /* bn: per-tile statistics [m * P + t] */
    starpu_data_handle_t *tot;             /* bn: backward totals [m] */
} hyfi_tnode;

/* Tag of halo strip handles (starpu_data_set_user_data), for the traffic
 * prediction's halo part. */
char hyfi_halo_tag;

/* ------------------------------------------------------------------ plan */

int hyfi_spatial_tiled(const hyfi_graph *g, const node *nd)
{
    return g->pl && g->pl->K > 0 && nd->stage < g->pl->K;
}

static int place_of(const hyfi_plan *pl, int stage, int t)
{
    return pl->stage_place0[stage] + (stage < pl->K ? t : 0);
}

int hyfi_tile_rank(const hyfi_graph *g, const hyfi_tiles *tl, int t)
{
    return g->pl->place_rank[place_of(g->pl, tl->stage, t)];
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

void hyfi_spatial_free(hyfi_graph *g)
{
    const int M = g->pl ? g->pl->nmb : 1, P = g->pl ? g->pl->P : 1;
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
        for (int k = 0; tn->wpart && k < P; k++) {
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
                hyfi_reg(g, &tl->h[m * P + q], NULL, n, sizeof(float), hyfi_tile_rank(g, tl, q),
                         t->name, sfx, m, M);
                if (t->kind == T_ACT && t->requires_grad) {
                    snprintf(sfx, sizeof sfx, ".tile%d.grad", q);
                    hyfi_reg(g, &tl->gh[m * P + q], NULL, n, sizeof(float),
                             hyfi_tile_rank(g, tl, q), t->name, sfx, m, M);
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
                    const int rq = hyfi_tile_rank(g, x->tl, q);
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
                        const int ru = hyfi_tile_rank(g, x->tl, tn->from[q][k]);
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
                tn->wpart = handles((size_t)P);
                if (nd->p[1]) tn->bpart = handles((size_t)P);
                if (!tn->wpart || (nd->p[1] && !tn->bpart)) return -1;
                for (int q = 0; q < P; q++) {
                    const int rq = hyfi_tile_rank(g, nd->out->tl, q);
                    snprintf(sfx, sizeof sfx, ".grad.tile%d", q);
                    hyfi_reg(g, &tn->wpart[q], NULL, nd->p[0]->numel, sizeof(float), rq,
                             nd->p[0]->name, sfx, 0, 1);
                    if (nd->p[1])
                        hyfi_reg(g, &tn->bpart[q], NULL, nd->p[1]->numel, sizeof(float), rq,
                                 nd->p[1]->name, sfx, 0, 1);
                    if (M > 1 && !g->plan_cfg.deterministic) {
                        starpu_data_set_reduction_methods(tn->wpart[q], &hyfi_cl_redux_add,
                                                          &hyfi_cl_redux_zero);
                        if (nd->p[1])
                            starpu_data_set_reduction_methods(tn->bpart[q], &hyfi_cl_redux_add,
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
                    const int rq = hyfi_tile_rank(g, x->tl, q);
                    snprintf(sfx, sizeof sfx, ".stats.tile%d", q);
                    /* 2C doubles */
                    hyfi_reg(g, &tn->part[m * P + q], NULL, 4 * (size_t)C, sizeof(float), rq,
                             nd->name, sfx, m, M);
                    snprintf(sfx, sizeof sfx, ".dstats.tile%d", q);
                    hyfi_reg(g, &tn->bwpart[m * P + q], NULL, 4 * (size_t)C, sizeof(float), rq,
                             nd->name, sfx, m, M);
                }
                hyfi_reg(g, &tn->tot[m], NULL, 2 * (size_t)C, sizeof(float),
                         pl->stage_rank[nd->stage], nd->name, ".dstats", m, M);
            }
        }
    }
    return 0;
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
    return place_of(e->g->pl, x->tl->stage, q);
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

int hyfi_spatial_forward(emit_ctx *e, const node *nd, int training)
{
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
        W(TH(nd->s[0], e->m)), W(TH(nd->s[1], e->m)), RW(TH(nd->p[2], 0)), RW(TH(nd->p[3], 0));
        for (int q = 0; q < Pt; q++) R(tn->part[e->m * Pt + q]);
        for (int q = 0; q < Pt; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            tname(nm, sizeof nm, nd, "fwd", q, e);
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(TILE(y, q)), R(TILE(x, q)), R(TH(nd->p[0], 0)), R(TH(nd->p[1], 0));
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
            W(TILE(y, q)), R(in), R(TH(nd->p[0], 0));
            if (nd->p[1]) R(TH(nd->p[1], 0));
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
            W(TILE(y, q)), R(TILE(x, q)), R(TH(nd->p[0], 0)), R(TH(nd->p[1], 0));
            R(TH(nd->p[2], 0)), R(TH(nd->p[3], 0));
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
            if (nd->op == OP_CONV2D) R(TH(nd->p[0], 0));
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
            unsigned char wf = nd->tn->wpw[q], bf = nd->tn->wpw[q];
            if (hyfi_grad_sum_mode(e, tn->wpart[q], &wf, nd->p[0]->numel, nd->p[0]->name, &mw,
                                   &accw))
                return -1;
            if (nd->p[1]) {
                int accb;
                if (hyfi_grad_sum_mode(e, tn->bpart[q], &bf, nd->p[1]->numel, nd->p[1]->name,
                                       &mb, &accb))
                    return -1;
            }
            /* the fill tasks go to the tile's place too */
            for (int k = P->n - 1; k >= 0 && P->t[k].place < 0 && P->t[k].cl == &hyfi_cl_fill; k--)
                P->t[k].place = tplace(e, y, q);
            nd->tn->wpw[q] = 1;
            nd->p[0]->gwritten = 1;
            if (nd->p[1]) nd->p[1]->gwritten = 1;
            a.acc = accw;
            tname(nm, sizeof nm, nd, "bwd_weight", q, e);
            TASK(&hyfi_cl_conv2d_backward_weight, nm, &a);
            hyfi_prog_buf(P, tn->wpart[q], mw);
            if (nd->p[1]) hyfi_prog_buf(P, tn->bpart[q], mb);
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
        if (hyfi_grad_sum_mode(e, nd->p[0]->gh[0], &nd->p[0]->gw[0], nd->p[0]->numel,
                               nd->p[0]->name, &mg, &accg) ||
            hyfi_grad_sum_mode(e, nd->p[1]->gh[0], &nd->p[1]->gw[0], nd->p[1]->numel,
                               nd->p[1]->name, &mb, &accb))
            return -1;
        hyfi_task_args c = {.acc = accg ? HYFI_BN_ACC_PARAMS : 0, .u.bnc = ca};
        hyfi_task_name(nm, sizeof nm, nd, "bwd_combine", e);
        TASK(&hyfi_cl_bn_bwd_combine, nm, &c);
        W(tn->tot[e->m]);
        hyfi_prog_buf(P, nd->p[0]->gh[0], mg);
        hyfi_prog_buf(P, nd->p[1]->gh[0], mb);
        R(TH(nd->s[1], e->m));
        for (int q = 0; q < Pt; q++) R(tn->bwpart[e->m * Pt + q]);
        for (int q = 0; q < Pt && x->requires_grad; q++) {
            hyfi_task_args a = tile_args(e, nd, q);
            hyfi_task_args s = {.acc = TGWF(x, q) ? HYFI_BN_ACC_DX : 0,
                                .u.bnt = {.bn = a.u.bn, .total = total}};
            tname(nm, sizeof nm, nd, "bwd", q, e);
            TASK(&hyfi_cl_bn_bwd_apply, nm, &s);
            tile_grad_out(e, x, q);
            R(TGRAD(y, q)), R(TILE(x, q)), R(TH(nd->p[0], 0)), R(TH(nd->s[0], e->m));
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
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (!nd->tn || !nd->tn->wpart || !nd->tn->wpw[0]) continue;
        for (int k = 0; k < 2; k++) {
            hyfi_tensor *p = nd->p[k];
            if (!p) continue;
            starpu_data_handle_t *parts = k ? nd->tn->bpart : nd->tn->wpart;
            for (int q = 0; q < Pt; q++) {
                hyfi_task_args a = {.acc = q > 0, .u.elt.count = p->numel};
                snprintf(nm, sizeof nm, "%.50s.tile_sum%d", p->name, q);
                TASK(&hyfi_cl_accumulate, nm, &a);
                hyfi_prog_buf(P, p->gh[0], q ? STARPU_RW : STARPU_W);
                R(parts[q]);
                P->t[P->n - 1].place = g->pl->stage_place0[nd->stage];
                P->t[P->n - 1].rank = g->pl->stage_rank[nd->stage];
            }
            p->gw[0] = 1;
        }
    }
    return 0;
}

/* Micro-batch m is done on tiled stage s: drop the tiles and halo handles. */
int hyfi_spatial_release(emit_ctx *e, int s)
{
    hyfi_graph *g = e->g;
    const int Pt = g->pl->P, m = e->m;
    program *P = e->P;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!t->tl || t->tl->stage != s || t->kind == T_INPUT) continue;
        t->released = 1;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, t->tl, q);
            if (hyfi_emit_release(P, t->tl->h[m * Pt + q], r)) return -1;
            if (t->tl->gh[m * Pt + q] && hyfi_emit_release(P, t->tl->gh[m * Pt + q], r)) return -1;
        }
    }
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        const hyfi_tnode *tn = nd->tn;
        if (!tn || nd->stage != s) continue;
        for (int q = 0; q < Pt; q++) {
            const int r = hyfi_tile_rank(g, nd->in[0]->tl, q);
            starpu_data_handle_t hs[] = {tn->buf ? tn->buf[m * Pt + q] : NULL,
                                         tn->dbuf ? tn->dbuf[m * Pt + q] : NULL,
                                         tn->part ? tn->part[m * Pt + q] : NULL,
                                         tn->bwpart ? tn->bwpart[m * Pt + q] : NULL};
            for (size_t k = 0; k < sizeof hs / sizeof *hs; k++)
                if (hs[k] && hyfi_emit_release(P, hs[k], r)) return -1;
            for (int k = 1; tn->strip && k < tn->npieces[q]; k++) {
                const size_t j = ((size_t)m * Pt + q) * NP + k;
                const int ru = hyfi_tile_rank(g, nd->in[0]->tl, tn->from[q][k]);
                if (tn->strip[j] && hyfi_emit_release(P, tn->strip[j], ru)) return -1;
                if (tn->dstrip[j] && hyfi_emit_release(P, tn->dstrip[j], r)) return -1;
            }
        }
        if (tn->tot && hyfi_emit_release(P, tn->tot[m], g->pl->stage_rank[nd->stage])) return -1;
    }
    return 0;
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
        if (!tn || !tn->windowed) continue;
        const hyfi_tensor *x = nd->in[0];
        for (int q = 0; q < pl->P; q++) {
            if (!tn->use_buf[q]) continue;
            for (int k = 1; k < tn->npieces[q]; k++) {
                if (hyfi_tile_rank(g, x->tl, q) == hyfi_tile_rank(g, x->tl, tn->from[q][k]))
                    continue;
                const size_t s = (size_t)x->dims[0] * x->dims[1] * tn->piece[q][k].h *
                                 tn->piece[q][k].w * sizeof(float);
                b += x->requires_grad ? 2 * s : s;
            }
        }
    }
    return b;
}
