/* Agreement between MPI ranks: an outcome reached by one rank alone (a file
 * that only rank 0 opens, a builder error) and settings that every rank must
 * have alike (arguments, graph, plan) are made common to every rank, so that
 * all of them stop together with the same message instead of the others
 * waiting forever for a rank that left, or running a different task graph.
 *
 * One round: every rank sends rank 0 its status, message and a 64-bit hash
 * (and a short text) per setting; rank 0 compares and sends every rank the
 * verdict. The messages travel through StarPU-MPI (starpu_mpi_send/recv on
 * handles over local buffers), never through MPI calls of this thread: MPI
 * runs with MPI_THREAD_SERIALIZED and StarPU-MPI's progression thread owns it.
 * Tags come from a range of their own, far above the graphs' handle tags,
 * one pair per call (every rank makes the same calls in the same order). */
#include "internal.h"

#include <inttypes.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_TAG_BASE (INT64_C(1) << 60)

typedef struct {
    uint64_t hash;
    char value[HYFI_AGREE_VALUE]; /* text for the message (may be truncated) */
} agree_item;

/* What each rank sends rank 0 (fixed size: every receive matches every send). */
typedef struct {
    int32_t status;
    int32_t n;
    char msg[400];
    agree_item item[HYFI_AGREE_MAX];
} agree_payload;

/* What rank 0 sends back. */
typedef struct {
    int32_t status;
    char msg[512];
} agree_verdict;

uint64_t hyfi_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(0x100000001b3); /* FNV-1a */
    }
    return h;
}

uint64_t hyfi_hash_str(uint64_t h, const char *s)
{
    /* the terminating zero too: "ab","c" and "a","bc" differ */
    return s ? hyfi_hash_bytes(h, s, strlen(s) + 1) : hyfi_hash_bytes(h, "\377", 1);
}

/* Blocking send / receive of a local buffer through StarPU-MPI. */
static void coll_send(void *buf, size_t bytes, int to, int64_t tag)
{
    starpu_data_handle_t h;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, (uint32_t)bytes, 1);
    starpu_mpi_send(h, to, tag, MPI_COMM_WORLD);
    starpu_data_unregister(h);
}

static void coll_recv(void *buf, size_t bytes, int from, int64_t tag)
{
    starpu_data_handle_t h;
    MPI_Status st;
    starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, (uint32_t)bytes, 1);
    starpu_mpi_recv(h, from, tag, MPI_COMM_WORLD, &st);
    starpu_data_unregister(h);
}

/* Rank 0: the verdict from every rank's payload. */
static void judge(const hyfi_agree_spec *sp, const agree_payload *all, int nranks,
                  agree_verdict *v)
{
    v->status = HYFI_OK;
    v->msg[0] = 0;
    for (int r = 0; r < nranks; r++)
        if (all[r].status != HYFI_OK) {
            v->status = all[r].status;
            snprintf(v->msg, sizeof v->msg, "rank %d: %s", r, all[r].msg);
            return;
        }
    const agree_payload *p0 = &all[0];
    int first = -1, others = 0;
    for (int r = 1; r < nranks; r++) {
        int same = all[r].n == p0->n;
        for (int i = 0; same && i < p0->n; i++) same = all[r].item[i].hash == p0->item[i].hash;
        if (same) continue;
        if (first < 0) first = r;
        else others++;
    }
    if (first < 0) return;
    v->status = HYFI_ERR_MISMATCH;
    const agree_payload *pk = &all[first];
    char what[384] = "";
    size_t used = 0;
    int listed = 0, more = 0;
    if (pk->n != p0->n) {
        snprintf(what, sizeof what, "the number of settings compared (rank %d: %d, rank 0: %d; "
                 "different program versions?)", first, pk->n, p0->n);
    } else {
        /* settings whose shown values differ first; one whose text is the same
         * on both (a hash of more than the text) only when nothing else is */
        int differ = 0, shown = 0;
        for (int i = 0; i < p0->n; i++)
            if (pk->item[i].hash != p0->item[i].hash) {
                differ++;
                shown += strcmp(pk->item[i].value, p0->item[i].value) != 0;
            }
        for (int i = 0; i < p0->n; i++) {
            if (pk->item[i].hash == p0->item[i].hash) continue;
            if (shown && !strcmp(pk->item[i].value, p0->item[i].value)) continue;
            if (listed == 3) continue;
            const char *name = i < sp->n && sp->names[i] ? sp->names[i] : "?";
            int w = snprintf(what + used, sizeof what - used, "%s%s (rank %d: %s; rank 0: %s)",
                             listed ? ", " : "", name, first, pk->item[i].value,
                             p0->item[i].value);
            if (w < 0 || (size_t)w >= sizeof what - used) {
                what[used] = 0;
                continue;
            }
            used += (size_t)w;
            listed++;
        }
        more = differ - listed;
        if (more)
            snprintf(what + used, sizeof what - used, " and %d more setting%s", more,
                     more > 1 ? "s" : "");
    }
    char also[64] = "";
    if (others) snprintf(also, sizeof also, " (and %d more rank%s)", others, others > 1 ? "s" : "");
    snprintf(v->msg, sizeof v->msg, "%s: rank %d differs from rank 0 in %s%s; %s",
             sp->intro ? sp->intro : "the ranks differ", first, what, also,
             sp->fix ? sp->fix : "every rank must run the same program (SPMD)");
}

hyfi_status hyfi_agree(hyfi_ctx *ctx, hyfi_status local, const char *local_msg,
                       const hyfi_agree_spec *sp, char *msg, size_t len)
{
    static const hyfi_agree_spec none = {0};
    if (!sp) sp = &none;
    if (msg && len) msg[0] = 0;
    if (!ctx || !ctx->mpi || ctx->nranks < 2) {
        if (local != HYFI_OK && msg && len) snprintf(msg, len, "%s", local_msg ? local_msg : "");
        return local;
    }
    const int me = ctx->rank, R = ctx->nranks;
    const int64_t tag = AGREE_TAG_BASE + 2 * ctx->agree_seq++;
    agree_payload *mine = calloc(1, sizeof *mine);
    agree_payload *all = me == 0 ? calloc((size_t)R, sizeof *all) : NULL;
    agree_verdict v = {HYFI_OK, ""};
    if (!mine || (me == 0 && !all)) {
        /* cannot take part: the others will wait; the watchdog ends them */
        free(mine);
        free(all);
        if (msg && len) snprintf(msg, len, "out of memory for the agreement between the ranks");
        return HYFI_ERR_NOMEM;
    }
    mine->status = local;
    mine->n = sp->n < HYFI_AGREE_MAX ? sp->n : HYFI_AGREE_MAX;
    if (local != HYFI_OK) snprintf(mine->msg, sizeof mine->msg, "%s", local_msg ? local_msg : "");
    for (int i = 0; i < mine->n; i++) {
        mine->item[i].hash = hyfi_hash_str(hyfi_hash_str(UINT64_C(0xcbf29ce484222325),
                                                         sp->names[i]),
                                           sp->values[i]);
        if (sp->hashes) mine->item[i].hash ^= sp->hashes[i];
        snprintf(mine->item[i].value, sizeof mine->item[i].value, "%s",
                 sp->values[i] ? sp->values[i] : "(none)");
    }
    hyfi_wait_begin(ctx, "a check that the ranks agree");
    if (me == 0) {
        all[0] = *mine;
        for (int r = 1; r < R; r++) coll_recv(&all[r], sizeof *all, r, tag);
        judge(sp, all, R, &v);
        for (int r = 1; r < R; r++) coll_send(&v, sizeof v, r, tag + 1);
    } else {
        coll_send(mine, sizeof *mine, 0, tag);
        coll_recv(&v, sizeof v, 0, tag + 1);
    }
    hyfi_wait_end(ctx);
    free(mine);
    free(all);
    if (local != HYFI_OK) {
        if (msg && len) snprintf(msg, len, "%s", local_msg ? local_msg : "");
        return local;
    }
    if (msg && len) snprintf(msg, len, "%s", v.msg);
    return (hyfi_status)v.status;
}

hyfi_status hyfi_ctx_agree(hyfi_ctx *ctx, hyfi_status local, const char *msg)
{
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_agree: ctx is NULL");
    char own[512], out[512];
    snprintf(own, sizeof own, "%s", msg ? msg : hyfi_last_error());
    const hyfi_status s = hyfi_agree(ctx, local, own, NULL, out, sizeof out);
    return s == HYFI_OK ? HYFI_OK : hyfi_fail(s, "%s", out);
}

hyfi_status hyfi_ctx_check_same(hyfi_ctx *ctx, const char *what, const hyfi_setting *settings,
                                int n)
{
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_check_same: ctx is NULL");
    hyfi_status local = HYFI_OK;
    char lmsg[256] = "";
    if (n < 0 || n > HYFI_AGREE_MAX || (n > 0 && !settings)) {
        /* still take part, so that the other ranks do not wait for this one */
        local = HYFI_ERR_ARG;
        snprintf(lmsg, sizeof lmsg, "hyfi_ctx_check_same: %d settings%s; give 0 to %d", n,
                 n > 0 && !settings ? " but the array is NULL" : "", HYFI_AGREE_MAX);
        n = 0;
    }
    const char *names[HYFI_AGREE_MAX], *values[HYFI_AGREE_MAX];
    for (int i = 0; i < n; i++) {
        names[i] = settings[i].name;
        values[i] = settings[i].value;
    }
    if (!what || !*what) what = "arguments";
    char intro[160], fix[160], out[512];
    snprintf(intro, sizeof intro, "the ranks were started with different %s", what);
    snprintf(fix, sizeof fix, "start every rank with the same %s", what);
    const hyfi_agree_spec sp = {intro, fix, names, values, NULL, n};
    const hyfi_status s = hyfi_agree(ctx, local, lmsg, &sp, out, sizeof out);
    return s == HYFI_OK ? HYFI_OK : hyfi_fail(s, "%s", out);
}

