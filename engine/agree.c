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
#include <stdarg.h>
#include <starpu_mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef SEED /* SimGrid's mpi.h (simulation build) defines it */

#define AGREE_TAG_BASE (INT64_C(1) << 60)

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

void hyfi_agree_judge(const hyfi_agree_spec *sp, const hyfi_agree_payload *all, int nranks,
                      hyfi_agree_verdict *v)
{
    v->status = HYFI_OK;
    v->rank = -1;
    v->alike = 0;
    v->msg[0] = 0;
    /* every rank failed alike (e.g. the same damaged file): no rank to name */
    int alike = 1;
    for (int r = 1; r < nranks && alike; r++)
        alike = all[r].status == all[0].status && !strcmp(all[r].msg, all[0].msg);
    for (int r = 0; r < nranks; r++)
        if (all[r].status != HYFI_OK) {
            v->status = all[r].status;
            if (alike) {
                v->alike = 1;
                snprintf(v->msg, sizeof v->msg, "%s", all[r].msg);
            } else {
                v->rank = r;
                snprintf(v->msg, sizeof v->msg, "rank %d: %s", r, all[r].msg);
            }
            return;
        }
    const hyfi_agree_payload *p0 = &all[0];
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
    const hyfi_agree_payload *pk = &all[first];
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

void hyfi_agree_fill(hyfi_agree_payload *p, hyfi_status local, const char *local_msg,
                     const hyfi_agree_spec *sp)
{
    memset(p, 0, sizeof *p);
    p->status = local;
    p->n = sp->n < HYFI_AGREE_MAX ? sp->n : HYFI_AGREE_MAX;
    if (local != HYFI_OK) snprintf(p->msg, sizeof p->msg, "%s", local_msg ? local_msg : "");
    for (int i = 0; i < p->n; i++) {
        const uint64_t name = hyfi_hash_str(UINT64_C(0xcbf29ce484222325), sp->names[i]);
        const uint64_t by = sp->hashes ? sp->hashes[i] : 0;
        p->item[i].hash = by ? hyfi_hash_bytes(name, &by, sizeof by)
                             : hyfi_hash_str(name, sp->values[i]);
        snprintf(p->item[i].value, sizeof p->item[i].value, "%s",
                 sp->values[i] ? sp->values[i] : "(none)");
    }
}

/* One round: hyfi_agree, and the logical or of every rank's flag into *any. */
static hyfi_status agree_round(hyfi_ctx *ctx, hyfi_status local, const char *local_msg,
                               const hyfi_agree_spec *sp, int flag, int *any, char *msg,
                               size_t len)
{
    static const hyfi_agree_spec none = {0};
    if (!sp) sp = &none;
    if (msg && len) msg[0] = 0;
    if (any) *any = flag;
    if (!ctx || !ctx->mpi || ctx->nranks < 2 || ctx->fake_ranks) {
        if (local != HYFI_OK && msg && len) snprintf(msg, len, "%s", local_msg ? local_msg : "");
        return local;
    }
    const int me = ctx->rank, R = ctx->nranks;
    const int64_t tag = AGREE_TAG_BASE + 2 * ctx->agree_seq++;
    hyfi_agree_payload *mine = calloc(1, sizeof *mine);
    hyfi_agree_payload *all = me == 0 ? calloc((size_t)R, sizeof *all) : NULL;
    hyfi_agree_verdict v = {HYFI_OK, -1, 0, 0, ""};
    if (!mine || (me == 0 && !all)) {
        /* cannot take part: the others will wait; the watchdog ends them */
        free(mine);
        free(all);
        if (msg && len) snprintf(msg, len, "out of memory for the agreement between the ranks");
        return HYFI_ERR_NOMEM;
    }
    hyfi_agree_fill(mine, local, local_msg, sp);
    mine->flag = flag != 0;
    /* without settings (every rank calls with the same spec: SPMD) only the
     * head travels: the rounds of every training step stay small */
    const size_t bytes =
        mine->n > 0 ? sizeof *mine : offsetof(hyfi_agree_payload, item);
    hyfi_wait_begin(ctx, HYFI_WAIT_AGREE);
    if (me == 0) {
        all[0] = *mine;
        for (int r = 1; r < R; r++) coll_recv(&all[r], bytes, r, tag);
        hyfi_agree_judge(sp, all, R, &v);
        for (int r = 0; r < R; r++) v.any |= all[r].flag;
        for (int r = 1; r < R; r++) coll_send(&v, sizeof v, r, tag + 1);
    } else {
        coll_send(mine, bytes, 0, tag);
        coll_recv(&v, sizeof v, 0, tag + 1);
    }
    hyfi_wait_end(ctx);
    free(mine);
    free(all);
    if (any) *any = v.any != 0;
    if (local != HYFI_OK) {
        if (msg && len) snprintf(msg, len, "%s", local_msg ? local_msg : "");
        return local;
    }
    if (msg && len) snprintf(msg, len, "%s", v.msg);
    return (hyfi_status)v.status;
}

hyfi_status hyfi_agree(hyfi_ctx *ctx, hyfi_status local, const char *local_msg,
                       const hyfi_agree_spec *sp, char *msg, size_t len)
{
    return agree_round(ctx, local, local_msg, sp, 0, NULL, msg, len);
}

void hyfi_ctx_share_rows(hyfi_ctx *ctx, size_t *rows, size_t cols)
{
    if (!ctx || !ctx->mpi || ctx->nranks < 2 || ctx->fake_ranks) return;
    const int me = ctx->rank, R = ctx->nranks;
    const int64_t tag = AGREE_TAG_BASE + 2 * ctx->agree_seq++;
    const size_t row = cols * sizeof *rows;
    hyfi_wait_begin(ctx, "sharing the traffic prediction between the ranks");
    if (me == 0) {
        for (int r = 1; r < R; r++) coll_recv(rows + (size_t)r * cols, row, r, tag);
        for (int r = 1; r < R; r++) coll_send(rows, row * (size_t)R, r, tag + 1);
    } else {
        coll_send(rows + (size_t)me * cols, row, 0, tag);
        coll_recv(rows, row * (size_t)R, 0, tag + 1);
    }
    hyfi_wait_end(ctx);
}

/* A binomial tree over the ranks: v summed up to rank 0 (rank r sends to
 * r - d at the first d = 1, 2, 4, .. that divides r but not 2d), then the sum
 * sent back down the same edges: 2 (R - 1) messages of n floats, log2 R
 * rounds each way. Where every slot has one contributing rank and zeros
 * elsewhere, the sum is that rank's value bit for bit (x + 0 = x). */
void hyfi_ctx_sum_floats(hyfi_ctx *ctx, float *v, float *in, int n)
{
    if (!ctx || !ctx->mpi || ctx->nranks < 2 || ctx->fake_ranks || n <= 0) return;
    const int me = ctx->rank, R = ctx->nranks;
    const int64_t tag = AGREE_TAG_BASE + 2 * ctx->agree_seq++;
    const size_t bytes = (size_t)n * sizeof *v;
    hyfi_wait_begin(ctx, "summing the loss over the ranks");
    int top = 1;
    while (top < R) top *= 2;
    for (int d = 1; d < R; d *= 2) {
        if (me % (2 * d) == d) {
            coll_send(v, bytes, me - d, tag);
            break;
        }
        if (me + d < R) {
            coll_recv(in, bytes, me + d, tag);
            for (int i = 0; i < n; i++) v[i] += in[i];
        }
    }
    for (int d = top / 2; d >= 1; d /= 2) {
        if (me % (2 * d) == d) coll_recv(v, bytes, me - d, tag + 1);
        else if (me % (2 * d) == 0 && me + d < R) coll_send(v, bytes, me + d, tag + 1);
    }
    hyfi_wait_end(ctx);
}

hyfi_status hyfi_ctx_gather_floats(hyfi_ctx *ctx, const float *mine, int n, float *all)
{
    if (!ctx || n < 0 || (n > 0 && (!mine || !all)))
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_gather_floats: ctx, mine or all is NULL, or "
                                       "n < 0");
    const int me = ctx->rank, R = ctx->nranks > 0 ? ctx->nranks : 1;
    const size_t row = (size_t)n * sizeof *all;
    if (!ctx->mpi || R < 2 || ctx->fake_ranks) {
        for (int r = 0; r < R; r++) memset(all + (size_t)r * (size_t)n, 0, row);
        if (n > 0) memmove(all + (size_t)me * (size_t)n, mine, row);
        return HYFI_OK;
    }
    if (n == 0) return HYFI_OK;
    const int64_t tag = AGREE_TAG_BASE + 2 * ctx->agree_seq++;
    memmove(all + (size_t)me * (size_t)n, mine, row);
    hyfi_wait_begin(ctx, "gathering the ranks' figures (hyfi_ctx_gather_floats)");
    if (me == 0) {
        for (int r = 1; r < R; r++) coll_recv(all + (size_t)r * (size_t)n, row, r, tag);
        for (int r = 1; r < R; r++) coll_send(all, row * (size_t)R, r, tag + 1);
    } else {
        coll_send(all + (size_t)me * (size_t)n, row, 0, tag);
        coll_recv(all, row * (size_t)R, 0, tag + 1);
    }
    hyfi_wait_end(ctx);
    return HYFI_OK;
}

hyfi_status hyfi_ctx_agree(hyfi_ctx *ctx, hyfi_status local, const char *msg)
{
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_agree: ctx is NULL");
    char own[512], out[512];
    snprintf(own, sizeof own, "%s", msg ? msg : hyfi_last_error());
    const hyfi_status s = hyfi_agree(ctx, local, own, NULL, out, sizeof out);
    return s == HYFI_OK ? HYFI_OK : hyfi_fail(s, "%s", out);
}

hyfi_status hyfi_ctx_any(hyfi_ctx *ctx, bool local, bool *any)
{
    if (!ctx || !any) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_any: ctx or any is NULL");
    int a = local;
    agree_round(ctx, HYFI_OK, "", NULL, local, &a, NULL, 0);
    *any = a != 0;
    return HYFI_OK;
}

hyfi_status hyfi_ctx_agree_any(hyfi_ctx *ctx, hyfi_status local, const char *msg, bool flag,
                               bool *any)
{
    if (any) *any = flag;
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_ctx_agree_any: ctx is NULL");
    char own[512], out[512];
    snprintf(own, sizeof own, "%s", msg ? msg : hyfi_last_error());
    int a = flag;
    const hyfi_status s = agree_round(ctx, local, own, NULL, flag, &a, out, sizeof out);
    if (any) *any = a != 0;
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
    uint64_t hashes[HYFI_AGREE_MAX];
    for (int i = 0; i < n; i++) {
        names[i] = settings[i].name;
        values[i] = settings[i].value;
        hashes[i] = settings[i].hash;
    }
    if (!what || !*what) what = "arguments";
    char intro[160], fix[160], out[512];
    snprintf(intro, sizeof intro, "the ranks were started with different %s", what);
    snprintf(fix, sizeof fix, "start every rank with the same %s", what);
    const hyfi_agree_spec sp = {intro, fix, names, values, hashes, n};
    const hyfi_status s = hyfi_agree(ctx, local, lmsg, &sp, out, sizeof out);
    return s == HYFI_OK ? HYFI_OK : hyfi_fail(s, "%s", out);
}

/* ------------------------------------------------- graphs, plans, settings */

static uint64_t hash_int(uint64_t h, long long v) { return hyfi_hash_bytes(h, &v, sizeof v); }

/* The graph's structure: tensors (names, shapes, kinds, initialisation),
 * ops (kinds, names, inputs, outputs, parameters, layers, arguments) and the
 * layers' names. Argument structs are all int and float fields (no padding). */
static uint64_t graph_hash(const hyfi_graph *g)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    h = hash_int(h, g->ntensors);
    for (int i = 0; i < g->ntensors; i++) {
        const hyfi_tensor *t = g->tensors[i];
        h = hyfi_hash_str(h, t->name);
        h = hyfi_hash_bytes(h, t->dims, sizeof t->dims);
        h = hash_int(h, ((long long)t->kind << 32) | ((long long)t->is_int << 16) | t->init);
        h = hash_int(h, t->fan_in);
    }
    h = hash_int(h, g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        h = hash_int(h, nd->op);
        h = hyfi_hash_str(h, nd->name);
        h = hash_int(h, nd->layer);
        h = hash_int(h, nd->nin);
        for (int k = 0; k < nd->nin; k++) h = hash_int(h, nd->in[k] ? nd->in[k]->id : -1);
        h = hash_int(h, nd->out ? nd->out->id : -1);
        for (int k = 0; k < 4; k++) h = hash_int(h, nd->p[k] ? nd->p[k]->id : -1);
        for (int k = 0; k < 2; k++) h = hash_int(h, nd->s[k] ? nd->s[k]->id : -1);
        h = hyfi_op_hash(h, nd);
    }
    h = hash_int(h, g->nlayers);
    for (int i = 0; i < g->nlayers; i++) h = hyfi_hash_str(h, g->layer_names[i]);
    return h;
}

/* Append to buf (a running string of len bytes). */
__attribute__((format(printf, 3, 4)))
static void cat(char *buf, size_t len, const char *fmt, ...)
{
    const size_t used = strlen(buf);
    if (used + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

static void plan_text(const hyfi_plan_config *p, char *buf, size_t len)
{
    static const char *const gems[] = {"none", "mast", "master"};
    static const char *const ar[] = {"auto", "ring", "tree"};
    buf[0] = 0;
    cat(buf, len, "stages %d", p->stages > 1 ? p->stages : 1);
    if (p->balance && p->stages > 0) {
        cat(buf, len, " balance ");
        for (int i = 0; i < p->stages; i++) cat(buf, len, "%s%d", i ? "," : "", p->balance[i]);
    }
    cat(buf, len, ", parts %d %s", p->parts > 1 ? p->parts : 1,
        p->schedule == HYFI_SCHEDULE_1F1B ? "1f1b" : "gpipe");
    if (p->deterministic) cat(buf, len, " deterministic");
    if (p->spatial_stages > 0)
        cat(buf, len, ", spatial %d x %d tiles (slice %d)", p->spatial_stages, p->spatial_parts,
            (int)p->slice);
    if (p->fused_layers > 1) cat(buf, len, ", fused %d", p->fused_layers);
    if (p->gems >= HYFI_GEMS_MAST && p->gems <= HYFI_GEMS_MASTER)
        cat(buf, len, ", gems %s x%d", gems[p->gems], p->replications > 1 ? p->replications : 1);
    if (p->data_parallel > 1) cat(buf, len, ", data parallel %d", p->data_parallel);
    if (p->allreduce > HYFI_ALLREDUCE_AUTO && p->allreduce <= HYFI_ALLREDUCE_TREE)
        cat(buf, len, ", all-reduce %s", ar[p->allreduce]);
    if (p->bucket_kib) cat(buf, len, ", buckets %d KiB", p->bucket_kib);
    if (p->pack_stats) cat(buf, len, ", statistics %s", p->pack_stats > 0 ? "packed" : "each");
    if (p->recompute) cat(buf, len, ", recompute %d", (int)p->recompute);
    if (p->plain_layouts || p->plain_weights || p->no_fuse_bn_relu || p->no_fuse_conv_add ||
        p->no_grad_forwarding || p->submit_all)
        cat(buf, len, ", switches %d%d%d%d%d%d", p->plain_layouts, p->plain_weights,
            p->no_fuse_bn_relu, p->no_fuse_conv_add, p->no_grad_forwarding, p->submit_all);
}

hyfi_status hyfi_graph_agree(hyfi_graph *g, hyfi_status local, const char *local_msg,
                             const hyfi_train_config *tc)
{
    hyfi_ctx *ctx = g->ctx;
    if (!ctx->mpi || ctx->nranks < 2 || ctx->fake_ranks) return local;
    enum { INPUTS, SEED, LR, MOMENTUM, WD, PREC, PLAN, GRAPH, N };
    static const char *const names[N] = {"the input shapes", "the seed", "the learning rate",
                                         "the momentum", "the weight decay", "the precision",
                                         "the plan", "the graph"};
    char text[N][HYFI_AGREE_VALUE * 4];
    const char *values[N];
    uint64_t hashes[N] = {0};
    for (int i = 0; i < N; i++) {
        text[i][0] = 0;
        values[i] = text[i];
    }
    if (local == HYFI_OK) {
        for (int i = 0; i < g->ntensors; i++) {
            const hyfi_tensor *t = g->tensors[i];
            if (t->kind != T_INPUT && t->kind != T_LABELS) continue;
            if (t->kind == T_LABELS)
                cat(text[INPUTS], sizeof text[INPUTS], "%s%s(%d)", text[INPUTS][0] ? " " : "",
                    t->name, t->dims[0]);
            else
                cat(text[INPUTS], sizeof text[INPUTS], "%s%s(%d,%d,%d,%d)",
                    text[INPUTS][0] ? " " : "", t->name, t->dims[0], t->dims[1], t->dims[2],
                    t->dims[3]);
        }
        snprintf(text[SEED], sizeof text[SEED], "%" PRIu64, g->seed);
        snprintf(text[LR], sizeof text[LR], "%.9g", (double)tc->lr);
        snprintf(text[MOMENTUM], sizeof text[MOMENTUM], "%.9g", (double)tc->momentum);
        snprintf(text[WD], sizeof text[WD], "%.9g", (double)tc->weight_decay);
        snprintf(text[PREC], sizeof text[PREC], "%s",
                 tc->precision == HYFI_PRECISION_BF16 ? "bf16" : "fp32");
        plan_text(&g->plan_cfg, text[PLAN], sizeof text[PLAN]);
        const hyfi_plan_config *p = &g->plan_cfg;
        uint64_t ph = UINT64_C(0xcbf29ce484222325);
        const long long fields[] = {p->stages,         p->parts,          p->schedule,
                                    p->deterministic,  p->spatial_stages, p->spatial_parts,
                                    p->slice,          p->fused_layers,   p->gems,
                                    p->replications,   p->data_parallel,  p->allreduce,
                                    p->bucket_kib,     p->balance != NULL,
                                    p->recompute,      p->plain_layouts,
                                    p->plain_weights,  p->no_fuse_bn_relu,
                                    p->no_fuse_conv_add, p->no_grad_forwarding,
                                    p->submit_all,     p->pack_stats};
        ph = hyfi_hash_bytes(ph, fields, sizeof fields);
        if (p->balance && p->stages > 0)
            ph = hyfi_hash_bytes(ph, p->balance, (size_t)p->stages * sizeof *p->balance);
        hashes[PLAN] = ph;
        size_t params = 0;
        for (int i = 0; i < g->nparams; i++) params += g->params[i]->numel;
        snprintf(text[GRAPH], sizeof text[GRAPH], "%d ops in %d layers, %zu parameters",
                 g->nnodes, g->nlayers ? g->nlayers : g->nnodes, params);
        hashes[GRAPH] = graph_hash(g);
    }
    const hyfi_agree_spec sp = {
        "hyfi_graph_compile: the ranks built different graphs, plans or training settings",
        "every rank must build the same graph with the same seed, plan and training settings "
        "(SPMD: start every rank with the same arguments)",
        names, values, hashes, N};
    char msg[512];
    const hyfi_status s = hyfi_agree(ctx, local, local_msg, &sp, msg, sizeof msg);
    if (s == HYFI_OK || local != HYFI_OK) return s;
    if (s == HYFI_ERR_MISMATCH) return hyfi_graph_fail(g, s, "%s", msg);
    return hyfi_call_fail(g, s, "%s", msg);
}

/* Make the status of a collective call common to every rank (hyfi_agree):
 * root_only, only rank 0's counts (saving: rank 0 writes); else every rank's.
 * A rank that failed keeps its message; the others get "rank k: <message>"
 * of the lowest failing rank (just the message when all failed alike). Here,
 * not in io.c, so that run.c (region input) can use it without a circle. */
hyfi_status hyfi_io_agree(hyfi_graph *g, hyfi_status st, int root_only)
{
    hyfi_ctx *c = g->ctx;
    if (!c->mpi || c->nranks < 2 || c->fake_ranks) return st;
    if (root_only && c->rank != 0) st = HYFI_OK;
    char own[512], out[512];
    snprintf(own, sizeof own, "%s", st != HYFI_OK ? hyfi_last_error() : "");
    const hyfi_status s = hyfi_agree(c, st, own, NULL, out, sizeof out);
    return s == HYFI_OK ? HYFI_OK : hyfi_call_fail(g, s, "%s", out);
}
