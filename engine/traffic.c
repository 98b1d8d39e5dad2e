/* The traffic model: the bytes each rank sends to each other rank in a
 * step, predicted by walking the compiled train program with StarPU-MPI's
 * rules (tests compare it with StarPU-MPI's counts). Reads the program and
 * the handles' owners; called once at the end of hyfi_graph_compile. */
#include "emit.h"

#include <starpu_mpi.h>
#include <stdlib.h>
#include <string.h>

/* The sums over every rank's sends (collective: each rank gives its two
 * totals; 2 R values). */
static void share_totals(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    const int R = g->ctx->nranks, me = g->ctx->rank;
    size_t own = 0, own_halo = 0;
    for (int r = 0; r < R; r++) own += pl->pred_out[r], own_halo += pl->pred_halo_out[r];
    pl->pred_total = own;
    pl->pred_halo_total = own_halo;
    if (R < 2) return;
    size_t *rows = calloc((size_t)R * 2, sizeof *rows);
    if (!rows) return; /* (hyfi_ctx_share_rows would wait for this rank: it cannot skip) */
    rows[(size_t)me * 2] = own;
    rows[(size_t)me * 2 + 1] = own_halo;
    hyfi_ctx_share_rows(g->ctx, rows, 2);
    if (g->ctx->mpi && !g->ctx->fake_ranks) {
        pl->pred_total = pl->pred_halo_total = 0;
        for (int r = 0; r < R; r++)
            pl->pred_total += rows[(size_t)r * 2], pl->pred_halo_total += rows[(size_t)r * 2 + 1];
    }
    free(rows);
}

/* Walk the train program as StarPU-MPI does: a task runs on its rank; a buffer
 * it reads that another rank owns is sent by the owner unless that rank holds
 * a cached copy; a buffer it writes on a non-owner is sent back to the owner;
 * a write drops every cached copy; a release drops them too. Two steps are
 * walked; the second (steady state) is recorded. A broadcast (PT_BCAST: the
 * health sums) sends to every rank; a flush (PT_FLUSH) drops the copies too.
 * After the program the ranks sum the micro-batches' losses (loss_value):
 * one message of M floats each way on every edge of a binomial tree. In a
 * scoped compile (share.c) a rank's program holds the tasks that send to it
 * or from it, so its own row and column are exact: they are what it keeps
 * (pred_out, pred_in); the totals over all ranks are shared (share_totals). */
void hyfi_plan_predict_comm(hyfi_graph *g)
{
    hyfi_plan *pl = g->cc->pl;
    const int R = g->ctx->nranks;
    const int me = g->ctx->rank;
    const size_t row = (size_t)R * sizeof(size_t);
    memset(pl->pred_out, 0, row), memset(pl->pred_in, 0, row);
    memset(pl->pred_halo_out, 0, row), memset(pl->pred_halo_in, 0, row);
    pl->pred_total = pl->pred_halo_total = 0;
    pl->halo_volume = hyfi_spatial_halo_volume(g);
    if (R < 2) return;
    /* bytes from rank a to rank b, kept where this rank is one of them */
#define SEND(a, b, n, hl)                                                                  \
    do {                                                                                   \
        if ((a) == me) pl->pred_out[b] += (n), pl->pred_halo_out[b] += (hl) ? (n) : 0;      \
        if ((b) == me) pl->pred_in[a] += (n), pl->pred_halo_in[a] += (hl) ? (n) : 0;        \
    } while (0)
    /* Which ranks hold a copy of each piece of data, by its reference (slot 0:
     * none). Only the pairs this rank is one of are kept, so
     * only two things matter: for a handle it owns, every rank's bit (a row of
     * R bits, allocated for its own handles only), and for another's, whether
     * this rank holds a copy (one byte per slot). A bit per rank for every
     * slot had been 8 MB per rank of a 2,048-rank plan (a byte, 134 MB). */
    const size_t cap = (size_t)g->cc->nhtab + 1;
    const size_t RB = ((size_t)R + 7) / 8;
    int *rowof = malloc(cap * sizeof *rowof);
    unsigned char *mine_c = calloc(cap, 1), *rows = NULL;
    size_t nrows = 0, caprows = 0;
    if (!rowof || !mine_c) {
        free(rowof), free(mine_c);
        share_totals(g); /* the others wait for this rank's totals (zeros) */
        return;
    }
    for (size_t i = 0; i < cap; i++) rowof[i] = -1;
#define ROW(sl) (rows + (size_t)rowof[sl] * RB)
#define CACHED(sl, r)                                                                      \
    (rowof[sl] >= 0 ? ROW(sl)[(size_t)(r) / 8] >> ((r) % 8) & 1 : (r) == me ? mine_c[sl] : 0)
#define SET_CACHED(sl, r)                                                                  \
    do {                                                                                   \
        if (rowof[sl] >= 0) ROW(sl)[(size_t)(r) / 8] |= (unsigned char)(1u << ((r) % 8)); \
        else if ((r) == me) mine_c[sl] = 1;                                                \
    } while (0)
#define CLEAR_CACHED(sl)                                                                           \
    do {                                                                                           \
        mine_c[sl] = 0;                                                                            \
        if (rowof[sl] >= 0) memset(ROW(sl), 0, RB);                                                \
    } while (0)
    int oom = 0;
    for (int step = 0; step < 2 && !oom; step++) {
        if (step == 1) {
            memset(pl->pred_out, 0, row), memset(pl->pred_in, 0, row);
            memset(pl->pred_halo_out, 0, row), memset(pl->pred_halo_in, 0, row);
        }
        for (int i = 0; i < g->cc->train_prog.n && !oom; i++) {
            const prog_task *t = &g->cc->train_prog.t[i];
            for (int b = 0; b < t->nbuf; b++) {
                const hyfi_ref h = prog_cbufs(t)[b].ref;
                const int o = hyfi_ref_rank(g, h), e = t->rank;
                const size_t sl = h, bytes = hyfi_ref_bytes(g, h);
                const enum starpu_data_access_mode m = prog_cbufs(t)[b].mode;
                if (o == me && rowof[sl] < 0) { /* a handle of this rank's: its row */
                    if (nrows == caprows) {
                        const size_t nc = caprows ? 2 * caprows : 256;
                        unsigned char *nr = realloc(rows, nc * RB);
                        if (!nr) {
                            oom = 1;
                            break;
                        }
                        rows = nr, caprows = nc;
                    }
                    rowof[sl] = (int)nrows++;
                    memset(ROW(sl), 0, RB);
                }
                if (t->kind == PT_RELEASE || t->kind == PT_FLUSH) {
                    CLEAR_CACHED(sl);
                    continue;
                }
                if (t->kind == PT_BCAST) {
                    for (int r = 0; r < R; r++)
                        if (r != o && !CACHED(sl, r)) {
                            SEND(o, r, bytes, 0);
                            SET_CACHED(sl, r);
                        }
                    continue;
                }
                const int halo = hyfi_ref_cat(g, h) == HC_HALO;
                if ((m & STARPU_R) && e != o && !CACHED(sl, e)) {
                    SEND(o, e, bytes, halo);
                    SET_CACHED(sl, e);
                }
                if ((m & STARPU_W) || (m & STARPU_REDUX)) {
                    if ((m & STARPU_W) && e != o) {
                        SEND(e, o, bytes, halo);
                    }
                    CLEAR_CACHED(sl);
                }
            }
        }
    }
#undef CACHED
#undef SET_CACHED
#undef CLEAR_CACHED
#undef ROW
    free(rowof), free(mine_c), free(rows);
    if (oom) { /* no prediction rather than a wrong one */
        memset(pl->pred_out, 0, row), memset(pl->pred_in, 0, row);
        memset(pl->pred_halo_out, 0, row), memset(pl->pred_halo_in, 0, row);
    }
    const size_t lb = (size_t)g->loss->nh * sizeof(float);
    for (int r = 1; r < R; r++) {
        const int up = r - (r & -r); /* hyfi_ctx_sum_floats's tree */
        SEND(r, up, lb, 0);
        SEND(up, r, lb, 0);
    }
#undef SEND
    share_totals(g);
}
