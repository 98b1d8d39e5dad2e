/* Packets of a tiled batch norm's per-tile statistics.
 *
 * A tiled batch norm's combine (forward: mean and variance; backward: the
 * two sums) reads every tile's part of micro-batch m. Each part has the
 * tile's rank as owner, and a scoped rank keeps a task that touches data it
 * owns (share.c, mark_skips): so every rank holding a tile kept the combine
 * and registered all P parts, its own and everybody else's; 15,232 of one
 * rank's 57,840 handles for AmoebaNet-D at 8,192² in 64 tiles on 4 ranks.
 * In a scoped compile whose tiles span more than one rank, the tiles of one
 * rank that follow each other (a run of at most HYFI_TILE_MAX_PIECES) are
 * instead copied into one packet on that rank (tile_assemble over 1-row
 * pieces: an exact copy), and the combine
 * reads the packets, in tile order, so that the parts it walks and the order
 * it walks them in are those of the unpacked combine: the statistics are
 * bitwise the same. A rank then registers its own parts and the packets
 * only. A packet of one tile is the tile's part itself. The combine's
 * packed layout has a CPU implementation only (the CUDA one has not run on
 * a GPU yet), so a run with CUDA workers does not pack (share.c). */
#include "emit.h"
#include "spatial_impl.h"

#include <stdio.h>
#include <string.h>

int hyfi_sp_bn_packets(const hyfi_graph *g, const hyfi_tensor *x, int rep, int *len)
{
    const int P = g->cc->pl->P;
    /* tiles on one rank: every rank that keeps the combine names all parts
     * anyway, and packets would only add copies */
    int pack = 0;
    for (int q = 1; q < P && g->cc->bn_pack && !pack; q++)
        pack = hyfi_tile_rank(g, x->tl, q, rep) != hyfi_tile_rank(g, x->tl, 0, rep);
    int n = 0;
    for (int q = 0; q < P; n++) {
        const int r = hyfi_tile_rank(g, x->tl, q, rep);
        int k = 1;
        while (pack && q + k < P && k < HYFI_TILE_MAX_PIECES &&
               hyfi_tile_rank(g, x->tl, q + k, rep) == r)
            k++;
        len[q] = k;
        for (int j = 1; j < k; j++) len[q + j] = 0;
        q += k;
    }
    return n;
}

int hyfi_sp_bn_pack(emit_ctx *e, const node *nd, int bwd, hyfi_ref *bufs)
{
    program *P = e->P;
    const hyfi_tnode *tn = nd->tn;
    const hyfi_tensor *x = nd->in[0];
    const int Pt = e->g->cc->pl->P, w = 4 * x->dims[1]; /* a part: 2C doubles */
    int len[HYFI_MAX_TILES];
    const int n = hyfi_sp_bn_packets(e->g, x, e->rep, len);
    hyfi_ref part[HYFI_MAX_TILES];
    for (int q = 0; q < Pt; q++)
        part[q] = TNH(tn, bwd ? HK_BN_BWPART : HK_BN_PART, (size_t)e->m * Pt + q);
    for (int q = 0, k = 0; q < Pt; q++) {
        if (!len[q]) continue;
        if (len[q] == 1) {
            bufs[k++] = part[q];
            continue;
        }
        /* the parts side by side in a 1 x (len w) plane */
        hyfi_task_args c;
        memset(&c, 0, sizeof c);
        c.u.tile = (hyfi_tile_args){.n = 1, .c = 1, .dst_h = 1, .dst_w = len[q] * w,
                                    .npieces = len[q]};
        for (int j = 0; j < len[q]; j++)
            c.u.tile.p[j] = (hyfi_piece){.src_h = 1, .src_w = w, .dst_x = j * w, .h = 1, .w = w};
        char nm[64];
        hyfi_sp_task_name(nm, sizeof nm, nd, bwd ? "dstats_pack" : "stats_pack", q, e);
        /* (packets exist only where cc->bn_pack: register.c) */
        const hyfi_ref pk = TNH(tn, bwd ? HK_BN_BWPACK : HK_BN_PACK, (size_t)e->m * Pt + q);
        TASK(&hyfi_cl_tile_assemble, nm, &c);
        W(pk);
        for (int j = 0; j < len[q]; j++) R(part[q + j]);
        ON_PLACE(hyfi_sp_place(e, x, q));
        bufs[k++] = pk;
    }
    return n;
}
