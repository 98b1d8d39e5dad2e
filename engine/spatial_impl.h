/* Spatial parallelism, private to engine/spatial*.c: the first K stages work
 * on P tiles of every image.
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
 *
 * Files: spatial_plan.c (geometry, fused groups: pure data), register.c
 * (the keys of tiles, halos and partial sums), spatial_halo.c (the halo
 * adapters), spatial.c (the tiles lowering: views of ops on tiles, batch-norm
 * statistics adapters, gathers, releases), spatial_fused.c (the fused-region
 * lowering).
 */
#ifndef HYFI_ENGINE_SPATIAL_IMPL_H
#define HYFI_ENGINE_SPATIAL_IMPL_H

#include "opdef.h"
#include "tiling.h"

#define NP HYFI_TILE_MAX_PIECES
#define FG_MAX 32

struct hyfi_fgroup;

/* A tiled node's handles are found by key (keyed.h), obj = its node index
 * (id): HK_TBUF / HK_TDBUF [m * P + t] (assembled input and its gradient),
 * HK_STRIP / HK_DSTRIP [(m * P + t) * NP + k], k >= 1 (halo strips), conv:
 * HK_WPART / HK_BPART [rep * P + t] (per-tile weight / bias gradients, with a
 * compile-time written flag each), bn: HK_BN_PART / HK_BN_BWPART [m * P + t]
 * (per-tile statistics), HK_BN_PACK / HK_BN_BWPACK [m * P + first t] (their
 * packets, spatial_bn.c), HK_BN_TOT [m] (backward totals). */
typedef struct hyfi_tnode {
    int id;                 /* its node's index */
    struct hyfi_fgroup *fg; /* fused-halo group of the op (fused.c part below), or NULL */
    int fg_pos;             /* the op's position in it */
    int windowed;      /* conv, pools: halos and an assembled input */
    int explicit_pad;  /* zeros in the buffer (conv, avg pool counting the padding) */
    hyfi_tile_span rs[HYFI_MAX_TILES], cs[HYFI_MAX_TILES];
    int use_buf[HYFI_MAX_TILES], buf_h[HYFI_MAX_TILES], buf_w[HYFI_MAX_TILES];
    int npieces[HYFI_MAX_TILES];
    int from[HYFI_MAX_TILES][NP];          /* the tile each piece comes from (0: own) */
    hyfi_piece piece[HYFI_MAX_TILES][NP];  /* src_*: coordinates in that tile */
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
 * unfused ops. Its handles are found by key, obj = its first op's node
 * index (id): HK_F_VAL / HK_F_GRAD (op j < n-1: output on its region
 * [(j*M + m)*P + q]), HK_F_PBUF / HK_F_DPBUF (op j >= 1 with zero padding:
 * padded input), HK_F_XO / HK_F_DYO / HK_F_DXO (batch norm: own-tile
 * copies), HK_F_ZTOT (batch norm: zero totals [j * replicas + rep]). */
typedef struct hyfi_fgroup {
    int id;
    int n;
    const node *op[FG_MAX];
    int r0[FG_MAX][HYFI_MAX_TILES], r1[FG_MAX][HYFI_MAX_TILES];
    int c0[FG_MAX][HYFI_MAX_TILES], c1[FG_MAX][HYFI_MAX_TILES];
    /* padding op j's window needs beyond its input tensor (top, bottom, left, right) */
    int pt[FG_MAX][HYFI_MAX_TILES], pb[FG_MAX][HYFI_MAX_TILES];
    int pl[FG_MAX][HYFI_MAX_TILES], pr[FG_MAX][HYFI_MAX_TILES];
    float *ztot_host[FG_MAX];           /* their memory: 2 * channels per replica */
    size_t ztot_n[FG_MAX];              /* floats in ztot_host[j] */
} hyfi_fgroup;

/* The conv's per-tile weight and bias gradients (HK_WPART, HK_BPART) exist. */
static inline int hyfi_tn_wparts(const node *nd)
{
    return nd->tn && nd->tn->windowed && hyfi_op_sums_weights_over_tiles(nd);
}

static inline int place_of(const hyfi_plan *pl, int rep, int stage, int t)
{
    return HYFI_PLACE(pl, rep, pl->stage_place0[stage] + (stage < pl->K ? t : 0));
}

static inline int tile_h(const hyfi_tiles *tl, int t) { return tl->rcut[t / tl->cols + 1] - tl->rcut[t / tl->cols]; }
static inline int tile_w(const hyfi_tiles *tl, int t) { return tl->ccut[t % tl->cols + 1] - tl->ccut[t % tl->cols]; }

static inline int fg_rows(const hyfi_fgroup *fg, int j, int q) { return fg->r1[j][q] - fg->r0[j][q]; }
static inline int fg_cols(const hyfi_fgroup *fg, int j, int q) { return fg->c1[j][q] - fg->c0[j][q]; }
/* op j >= 1 reads a zero-padded copy of op j-1's region */
static inline int fg_padded(const hyfi_fgroup *fg, int j, int q)
{
    const node *nd = fg->op[j];
    const int xp = hyfi_op_zero_padded(nd);
    return j > 0 && xp && (fg->pt[j][q] || fg->pb[j][q] || fg->pl[j][q] || fg->pr[j][q]);
}
/* batch norm op j computes on more than its own tile */
static inline int fg_bn_extended(const hyfi_fgroup *fg, int j, int q)
{
    const hyfi_tiles *tl = fg->op[j]->out->tl;
    const int r = q / tl->cols, c = q % tl->cols;
    return fg->r0[j][q] != tl->rcut[r] || fg->r1[j][q] != tl->rcut[r + 1] ||
           fg->c0[j][q] != tl->ccut[c] || fg->c1[j][q] != tl->ccut[c + 1];
}

/* Handles of micro-batch e->m: tile q of x, its gradient and its flag. */
#define TQ(q) ((uint64_t)e->m * (uint64_t)e->g->cc->pl->P + (uint64_t)(q))
#define TILE(x, q) TTILE(x, TQ(q))
#define TGRAD(x, q) TTGRAD(x, TQ(q))
#define TGWF(x, q) hyfi_kflag(e->g->cc, HK_TILE_GRAD, (uint64_t)(x)->id, TQ(q))
#define TGWFP(x, q) hyfi_kflag_at(e->g->cc, HK_TILE_GRAD, (uint64_t)(x)->id, TQ(q))
/* A tiled node's or fused group's handle of a role, index k (above). */
#define TNH(tn, role, k) hyfi_kref(e->g->cc, (role), (uint64_t)(tn)->id, (uint64_t)(k))
#define FGH(fg, role, k) hyfi_kref(e->g->cc, (role), (uint64_t)(fg)->id, (uint64_t)(k))
/* Op j of a fused group, tile q, micro-batch e->m. */
#define FGK(j, q) (((size_t)(j) * e->M + e->m) * e->g->cc->pl->P + (q))

/* spatial_halo.c: the halo adapters, shared by the tiles and fused lowerings;
 * a tile gradient output (W for its first writer, RW after) and its flag. */
void hyfi_sp_grad_out(emit_ctx *e, hyfi_tensor *x, int q);
void hyfi_sp_grad_done(emit_ctx *e, hyfi_tensor *x, int q);
/* A view's parameters, saved tensors, statistics and parameter gradients. */
void hyfi_sp_view_params(emit_ctx *e, const node *nd, int q, int training, hyfi_opview *v);
int hyfi_sp_assemble(emit_ctx *e, const node *nd, int q, hyfi_ref *in);
int hyfi_sp_unassemble(emit_ctx *e, const node *nd, int q);
int hyfi_sp_halo_return(emit_ctx *e, const node *nd, int q);
int hyfi_sp_place(const emit_ctx *e, const hyfi_tensor *x, int q);
void hyfi_sp_task_name(char *out, size_t len, const node *nd, const char *pass, int q,
                       const emit_ctx *e);
/* spatial_bn.c: the packets of a tiled batch norm's per-tile statistics.
 * len[q] = the number of tiles in the packet that starts at tile q, 0 for a
 * tile inside one; returns the number of packets (tiles of replica rep of
 * x's tiling). */
int hyfi_sp_bn_packets(const hyfi_graph *g, const hyfi_tensor *x, int rep, int *len);
/* The packing copies of micro-batch e->m's statistics (forward, or bwd: the
 * backward's) of node nd; bufs[] gets what the combine reads, one per packet
 * (a packet of one tile is the tile's part itself); returns their number, -1
 * when out of memory. */
int hyfi_sp_bn_pack(emit_ctx *e, const node *nd, int bwd, hyfi_ref *bufs);
/* spatial_fused.c */
int hyfi_sp_fused_forward(emit_ctx *e, const hyfi_fgroup *fg, int training);
int hyfi_sp_fused_backward(emit_ctx *e, const hyfi_fgroup *fg);

#endif
