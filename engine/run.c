/* Running programs and moving data in and out of StarPU handles. */
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Submit a program. Single process: starpu_task_insert. MPI: each rank
 * submits with starpu_mpi_task_insert the tasks that concern it (see
 * mark_skips); a task runs on its place's rank (STARPU_EXECUTE_ON_NODE) and
 * StarPU-MPI moves the data it reads from, or writes back to, the ranks that
 * own it. */
static hyfi_status program_run(hyfi_graph *g, program *p);

hyfi_status hyfi_program_run(hyfi_graph *g, program *p)
{
    hyfi_wait_begin(g->ctx, p == &g->cc->train_prog   ? "a training step (hyfi_train_step)"
                            : p == &g->cc->infer_prog ? "an evaluation (hyfi_infer)"
                                                  : "a forward pass (hyfi_forward)");
    const hyfi_status s = program_run(g, p);
    hyfi_wait_end(g->ctx);
    return s;
}

/* Milliseconds of a clock (0 where it cannot be read). */
static double clock_ms(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts)) return 0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static hyfi_status program_run(hyfi_graph *g, program *p)
{
    const int mpi = g->ctx->mpi, me = g->ctx->rank;
    if (g->ctx->trace_dir) hyfi_trace_mark_program(g->ctx);
    if (hyfi_skips_ready(g) < 0)
        return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory preparing a program");
    hyfi_fake_fill(g, p);
    /* The submission's cost on this rank (-v, training steps): the CPU time
     * of this thread in the loop below, and the host's wall clock. Not
     * StarPU's clock: in a simulation that is simulated time, in which
     * submitting costs nothing. The thread's CPU time counts only the
     * submitting thread's own work, not waits for a core or for StarPU's
     * locks. Not so in a simulation, whose actors share one thread and switch
     * inside the loop: there it counts their work too (docs/simulation.md,
     * "Submission cost per rank"). */
    const int timed = g->ctx->verbose && p == &g->cc->train_prog;
    const double cpu0 = timed ? clock_ms(CLOCK_THREAD_CPUTIME_ID) : 0;
    const double wall0 = timed ? clock_ms(CLOCK_MONOTONIC) : 0;
    int submitted = 0;
    /* kernels run a thread fewer while this thread submits (ctx.c, submit_cap) */
    const int share = g->ctx->submit_cap;
    if (share) hyfi_ops_cores_submitting(1);
    /* A submission window (hyfi_ctx_config.submit_window, W): after every W/2
     * tasks this rank runs, wait until at most W/2 of its tasks are left, so
     * at most W are submitted and unfinished at a time. It cannot deadlock:
     * every rank's program is the same step in the same order, cut to its
     * share, and a task waits only on tasks before it in that order. When a
     * rank waits, the earliest unfinished task of the step is in some rank's
     * window (a rank whose window is full submitted everything before its
     * window's tasks), its inputs are done or on their way (their senders
     * reached it in their own order, or their windows would not be full), so
     * it runs. */
    const unsigned half = (unsigned)g->ctx->submit_window / 2;
    unsigned local = 0;
    for (int i = 0; i < p->n; i++) {
        prog_task *t = &p->t[i];
        if (p->skip && p->skip[i]) continue;
        if (t->kind == PT_BCAST) {
            if (mpi)
                starpu_mpi_get_data_on_all_nodes_detached(MPI_COMM_WORLD,
                                                          hyfi_ref_h(g->cc, prog_cbufs(t)[0].ref));
            continue;
        }
        if (t->kind == PT_FLUSH) {
            starpu_data_handle_t h = hyfi_ref_h(g->cc, prog_cbufs(t)[0].ref);
            if (mpi && (t->rank == me || starpu_mpi_data_get_rank(h) == me))
                starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
            continue;
        }
        if (t->kind == PT_RELEASE) {
            starpu_data_handle_t h = hyfi_ref_h(g->cc, prog_cbufs(t)[0].ref);
            if (mpi) starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
            if (!mpi || t->rank == me) starpu_data_invalidate_submit(h);
            continue;
        }
        int rc;
        /* task records: a callback per task (StarPU ignores a NULL one) */
        void (*cb)(void *) = g->ctx->records ? hyfi_record_task : NULL;
        hyfi_ctx *cx = g->ctx;
        /* the buffers' handles, from the handle table */
        struct starpu_data_descr bufs[HYFI_MAX_TASK_BUFFERS];
        const prog_buf *pb = prog_cbufs(t);
        for (int b = 0; b < t->nbuf; b++)
            bufs[b] = (struct starpu_data_descr){.handle = hyfi_ref_h(g->cc, pb[b].ref),
                                                 .mode = pb[b].mode};
        if (mpi && t->worker >= 0 && t->rank == me)
            rc = starpu_mpi_task_insert(
                MPI_COMM_WORLD, t->cl, STARPU_DATA_MODE_ARRAY, bufs, t->nbuf, STARPU_CL_ARGS_NFREE,
                t->args, sizeof *t->args, STARPU_NAME, t->name, STARPU_PRIORITY, t->prio,
                STARPU_FLOPS, t->flops, STARPU_EXECUTE_ON_NODE, t->rank, STARPU_EXECUTE_ON_WORKER,
                t->worker, STARPU_CALLBACK_WITH_ARG_NFREE, cb, cx, 0);
        else if (mpi)
            rc = starpu_mpi_task_insert(
                MPI_COMM_WORLD, t->cl, STARPU_DATA_MODE_ARRAY, bufs, t->nbuf, STARPU_CL_ARGS_NFREE,
                t->args, sizeof *t->args, STARPU_NAME, t->name, STARPU_PRIORITY, t->prio,
                STARPU_FLOPS, t->flops, STARPU_EXECUTE_ON_NODE, t->rank,
                STARPU_CALLBACK_WITH_ARG_NFREE, cb, cx, 0);
        else if (t->worker >= 0)
            rc = starpu_task_insert(t->cl, STARPU_DATA_MODE_ARRAY, bufs, t->nbuf,
                                    STARPU_CL_ARGS_NFREE, t->args, sizeof *t->args, STARPU_NAME,
                                    t->name, STARPU_PRIORITY, t->prio, STARPU_FLOPS, t->flops,
                                    STARPU_EXECUTE_ON_WORKER, t->worker,
                                    STARPU_CALLBACK_WITH_ARG_NFREE, cb, cx, 0);
        else
            rc = starpu_task_insert(t->cl, STARPU_DATA_MODE_ARRAY, bufs, t->nbuf,
                                    STARPU_CL_ARGS_NFREE, t->args, sizeof *t->args, STARPU_NAME,
                                    t->name, STARPU_PRIORITY, t->prio, STARPU_FLOPS, t->flops,
                                    STARPU_CALLBACK_WITH_ARG_NFREE, cb, cx, 0);
        if (rc != 0) {
            if (share) hyfi_ops_cores_submitting(0);
            if (mpi) starpu_mpi_wait_for_all(MPI_COMM_WORLD);
            else starpu_task_wait_for_all();
            return hyfi_call_fail(g, HYFI_ERR_RUNTIME, "submitting task %s failed (%d): no "
                                                       "worker can run %s here", t->name, rc,
                                  t->cl->name);
        }
        submitted++;
        if (half && (!mpi || t->rank == me) && ++local == half) {
            local = 0;
            if (share) hyfi_ops_cores_submitting(0); /* (kernels take every core meanwhile) */
            starpu_task_wait_for_n_submitted(half);
            if (share) hyfi_ops_cores_submitting(1);
        }
    }
    if (share) hyfi_ops_cores_submitting(0);
    if (timed)
        hyfi_ctx_log(g->ctx, HYFI_LOG_INFO, "rank %d submitted %d tasks of a training step in "
                     "%.3f ms of CPU time (%.3f ms wall)", me, submitted,
                clock_ms(CLOCK_THREAD_CPUTIME_ID) - cpu0, clock_ms(CLOCK_MONOTONIC) - wall0);
    if (mpi) starpu_mpi_wait_for_all(MPI_COMM_WORLD);
    else starpu_task_wait_for_all();
    char msg[256];
    if (hyfi_ops_take_error(msg, sizeof msg))
        return hyfi_call_fail(g, HYFI_ERR_RUNTIME, "%s", msg);
    return HYFI_OK;
}


static hyfi_status check_tensor(hyfi_graph *g, const hyfi_tensor *t, size_t count,
                                const char *who)
{
    if (!t || t->g != g)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "%s: the tensor is NULL or from another graph",
                              who);
    if (count != t->numel)
        return hyfi_call_fail(g, HYFI_ERR_SHAPE, "%s: \"%s\" has %zu elements (%d,%d,%d,%d) but "
                                                 "%zu were given", who, t->name, t->numel,
                              t->dims[0], t->dims[1], t->dims[2], t->dims[3], count);
    return HYFI_OK;
}

void hyfi_handle_read(hyfi_graph *g, hyfi_ref r, int root, void *host, size_t bytes)
{
    const int me = g->ctx->rank;
    starpu_data_handle_t h = hyfi_ref_h(g->cc, r);
    if (!h) return; /* not registered here (share.c): neither its owner nor a reader */
    if (g->ctx->fake_ranks) { /* the other ranks' values were never sent (keyed.h, hyfi_fake_fill) */
        memset(host, 0, bytes);
        return;
    }
    if (g->ctx->mpi) {
        if (root < 0) starpu_mpi_get_data_on_all_nodes_detached(MPI_COMM_WORLD, h);
        else starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, root, NULL, NULL);
    }
    if (root < 0 || root == me) {
        hyfi_wait_begin(g->ctx, "reading a tensor from its rank (the loss, hyfi_tensor_read, "
                                "hyfi_save_params)");
        starpu_data_acquire(h, STARPU_R);
        if (starpu_vector_get_elemsize(h) == sizeof(uint16_t)) /* bf16 storage: widen */
            hyfi_bf16_widen((float *)host, (const uint16_t *)starpu_vector_get_local_ptr(h),
                            bytes / sizeof(float));
        else memcpy(host, (void *)starpu_vector_get_local_ptr(h), bytes);
        starpu_data_release(h);
        hyfi_wait_end(g->ctx);
    }
    /* No received copy stays behind: the ranks that do not write h may not
     * see the tasks that do (mark_skips) */
    if (g->ctx->mpi) starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
}

void hyfi_handle_write(hyfi_graph *g, hyfi_ref r, int owner, const void *host, size_t bytes)
{
    starpu_data_handle_t h = hyfi_ref_h(g->cc, r);
    if (!h) return; /* not registered here (share.c): another rank's */
    if (g->ctx->mpi) starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
    if (g->ctx->mpi && owner != g->ctx->rank) return;
    hyfi_wait_begin(g->ctx, "writing a tensor (hyfi_set_input, hyfi_tensor_write, "
                            "hyfi_load_params)");
    starpu_data_acquire(h, STARPU_W);
    if (starpu_vector_get_elemsize(h) == sizeof(uint16_t)) { /* bf16 storage: narrow */
        hyfi_bf16_narrow((uint16_t *)starpu_vector_get_local_ptr(h), (const float *)host,
                         bytes / sizeof(float));
    } else {
        memcpy((void *)starpu_vector_get_local_ptr(h), host, bytes);
        if (hyfi_handle_bf16(h)) hyfi_round_bf16((float *)starpu_vector_get_local_ptr(h), bytes / 4);
    }
    starpu_data_release(h);
    hyfi_wait_end(g->ctx);
}

/* Copy between a whole micro-batch (n, C, H, W) and tile q of a tiled tensor
 * (n, C, th, tw) at (y0, x0): to_tile 1: whole -> tile. */
static void tile_copy(const hyfi_tensor *t, int q, float *whole, float *tile, int to_tile)
{
    const hyfi_tiles *tl = t->tl;
    const int r = q / tl->cols, c = q % tl->cols;
    const int y0 = tl->rcut[r], x0 = tl->ccut[c];
    const int th = tl->rcut[r + 1] - y0, tw = tl->ccut[c + 1] - x0;
    const size_t planes = (size_t)(t->dims[0] / t->g->cc->pl->nmb) * t->dims[1];
    const int H = t->dims[2], W = t->dims[3];
    for (size_t p = 0; p < planes; p++)
        for (int y = 0; y < th; y++) {
            float *a = whole + (p * H + (size_t)(y0 + y)) * W + x0;
            float *b = tile + (p * th + (size_t)y) * tw;
            if (to_tile) memcpy(b, a, (size_t)tw * sizeof(float));
            else memcpy(a, b, (size_t)tw * sizeof(float));
        }
}

/* Write a batch tensor's host data into its micro-batch handles (and tiles). */
static hyfi_status write_batch(hyfi_graph *g, hyfi_tensor *t, const void *data, size_t elem)
{
    if (!t->tl || t->tl->full)
        for (int m = 0; m < t->nh; m++)
            hyfi_handle_write(g, TH(t, m), hyfi_handle_owner(g, t, m),
                              (const char *)data + (size_t)m * t->mb_numel * elem,
                              t->mb_numel * elem);
    if (!t->tl) return HYFI_OK;
    const int P = g->cc->pl->P;
    for (int m = 0; m < t->nh; m++)
        for (int q = 0; q < P; q++) {
            const int owner = hyfi_tile_rank(g, t->tl, q, HYFI_REP(g->cc->pl, m));
            /* another rank's tile: only its cache flushed (hyfi_handle_write), no copy */
            if (!TTILE(t, (uint64_t)m * P + q)) continue;
            if (g->ctx->mpi && owner != g->ctx->rank) {
                hyfi_handle_write(g, TTILE(t, (uint64_t)m * P + q), owner, NULL, 0);
                continue;
            }
            const size_t n = hyfi_tile_numel(t, q);
            float *tmp = malloc(n * sizeof(float));
            if (!tmp) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory writing tiles");
            tile_copy(t, q, (float *)data + (size_t)m * t->mb_numel, tmp, 1);
            hyfi_handle_write(g, TTILE(t, (uint64_t)m * P + q), owner, tmp, n * sizeof(float));
            free(tmp);
        }
    return HYFI_OK;
}

hyfi_status hyfi_set_input(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_set_input");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_set_input");
    if (s != HYFI_OK) return s;
    if (t->kind != T_INPUT || !data)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_input: \"%s\" is not an input tensor or "
                                               "the data is NULL", t->name);
    return write_batch(g, t, data, sizeof(float));
}

hyfi_status hyfi_set_labels(hyfi_graph *g, hyfi_tensor *t, const int32_t *labels, size_t count)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_set_labels");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_set_labels");
    if (s != HYFI_OK) return s;
    if (t->kind != T_LABELS || !labels)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_labels: \"%s\" is not a label tensor or "
                                               "the labels are NULL", t->name);
    /* The consumer's class count bounds the labels: check here, with a clear message. */
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (nd->op != OP_XENT || nd->in[1] != t) continue;
        for (size_t j = 0; j < count; j++)
            if (labels[j] < 0 || labels[j] >= nd->a.xent.k)
                return hyfi_call_fail(g, HYFI_ERR_DATA, "hyfi_set_labels: label %d at index %zu "
                                                        "is outside [0, %d) of \"%s\"; check "
                                                        "--num-classes and the data", labels[j], j,
                                      nd->a.xent.k, nd->name);
    }
    if ((s = write_batch(g, t, labels, sizeof(int32_t))) != HYFI_OK) return s;
    return HYFI_OK;
}

/* ------------------------------------------------------------ region input */
/* The handles of an input tensor, in a fixed order (micro-batch, then the
 * whole-batch view where untiled ops read it, then the tiles): region k of
 * the tensor, its handle and its owning rank. Returns the number of handles. */
static int input_handles(hyfi_graph *g, const hyfi_tensor *t, int k, hyfi_input_region *r,
                         starpu_data_handle_t *h, int *owner)
{
    const int P = t->tl ? g->cc->pl->P : 0, whole = !t->tl || t->tl->full;
    const int per_mb = whole + P, n = t->dims[0] / t->nh;
    if (k < 0) return t->nh * per_mb;
    const int m = k / per_mb, j = k % per_mb;
    const int q = j - whole; /* tile, or -1: the whole images */
    r->micro_batch = m;
    r->first = m * n;
    r->count = n;
    r->channels = t->dims[1];
    r->tile = q;
    if (q < 0) {
        r->y0 = r->x0 = 0;
        r->h = t->dims[2];
        r->w = t->dims[3];
        *h = hyfi_ref_h(g->cc, TH(t, m));
        *owner = hyfi_handle_owner(g, t, m);
    } else {
        const hyfi_tiles *tl = t->tl;
        const int row = q / tl->cols, col = q % tl->cols;
        r->y0 = tl->rcut[row];
        r->x0 = tl->ccut[col];
        r->h = tl->rcut[row + 1] - r->y0;
        r->w = tl->ccut[col + 1] - r->x0;
        *h = hyfi_ref_h(g->cc, TTILE(t, (uint64_t)m * P + q));
        *owner = hyfi_tile_rank(g, tl, q, HYFI_REP(g->cc->pl, m));
    }
    return t->nh * per_mb;
}

static hyfi_status check_input(hyfi_graph *g, const hyfi_tensor *t, const char *who)
{
    hyfi_status s = hyfi_need_compiled(g, who);
    if (s != HYFI_OK) return s;
    if (!t || t->g != g || t->kind != T_INPUT)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "%s: the tensor is NULL, from another graph or "
                                               "not an input (hyfi_input)", who);
    return HYFI_OK;
}

hyfi_status hyfi_input_regions(hyfi_graph *g, const hyfi_tensor *t, hyfi_input_region *out,
                               int cap, int *count)
{
    hyfi_status s = check_input(g, t, "hyfi_input_regions");
    if (s != HYFI_OK) return s;
    if (!count || (cap > 0 && !out) || cap < 0)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_input_regions: count is NULL, or cap %d "
                                               "is negative or positive with out NULL", cap);
    hyfi_input_region r;
    starpu_data_handle_t h;
    int owner, n = 0;
    const int all = input_handles(g, t, -1, &r, &h, &owner);
    for (int k = 0; k < all; k++) {
        input_handles(g, t, k, &r, &h, &owner);
        if (g->ctx->mpi && owner != g->ctx->rank) continue;
        if (n < cap) out[n] = r;
        n++;
    }
    *count = n;
    return HYFI_OK;
}

hyfi_status hyfi_set_input_fn(hyfi_graph *g, hyfi_tensor *t, hyfi_input_fill_fn fill, void *user)
{
    hyfi_status s = check_input(g, t, "hyfi_set_input_fn");
    if (s == HYFI_OK && !fill)
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_input_fn: the fill function is NULL");
    if (s != HYFI_OK) return g ? hyfi_io_agree(g, s, 0) : s;
    hyfi_input_region r;
    starpu_data_handle_t h;
    int owner;
    const int all = input_handles(g, t, -1, &r, &h, &owner);
    for (int k = 0; k < all; k++) {
        input_handles(g, t, k, &r, &h, &owner);
        /* every rank flushes every handle (StarPU-MPI's cache is kept alike on all ranks);
         * only the owner fills it, in place */
        if (g->ctx->mpi && h) starpu_mpi_cache_flush(MPI_COMM_WORLD, h); /* h NULL: share.c */
        if (s != HYFI_OK || (g->ctx->mpi && owner != g->ctx->rank)) continue;
        hyfi_wait_begin(g->ctx, "writing an input region (hyfi_set_input_fn)");
        starpu_data_acquire(h, STARPU_W);
        const int rc = fill(user, &r, (float *)starpu_vector_get_local_ptr(h));
        if (hyfi_handle_bf16(h))
            hyfi_round_bf16((float *)starpu_vector_get_local_ptr(h), starpu_vector_get_nx(h));
        starpu_data_release(h);
        hyfi_wait_end(g->ctx);
        if (rc != 0)
            s = hyfi_call_fail(g, HYFI_ERR_DATA, "hyfi_set_input_fn: the fill function returned "
                                                 "%d for \"%s\" micro-batch %d (images %d..%d, "
                                                 "rows %d..%d, columns %d..%d); see its own "
                                                 "message", rc, t->name, r.micro_batch, r.first,
                               r.first + r.count - 1, r.y0, r.y0 + r.h - 1, r.x0,
                               r.x0 + r.w - 1);
    }
    return hyfi_io_agree(g, s, 0);
}

/* The loss of the step: the mean of the micro-batches' losses, on every rank.
 * Each loss is read on its owner, the others' slots are zeros, and the ranks
 * sum them (a tree of host messages, not a broadcast of every loss to every
 * rank: that was M x R messages per rank and step); the mean is then taken in
 * micro-batch order, the same on every rank and for every plan. */
static float loss_value(hyfi_graph *g)
{
    const int M = g->loss->nh, mpi = g->ctx->mpi;
    float *l = g->cc->loss_sum;
    memset(l, 0, (size_t)M * sizeof *l);
    for (int m = 0; m < M; m++) {
        const hyfi_ref h = TH(g->loss, m);
        if (!hyfi_ref_h(g->cc, h) || (mpi && hyfi_ref_rank(g, h) != g->ctx->rank)) continue;
        hyfi_handle_read(g, h, g->ctx->rank, &l[m], sizeof l[m]);
    }
    if (mpi) hyfi_ctx_sum_floats(g->ctx, l, l + M, M);
    float sum = 0;
    for (int m = 0; m < M; m++) sum += l[m];
    return sum / (float)M;
}

static hyfi_status read_loss(hyfi_graph *g, float *loss)
{
    const float l = loss_value(g);
    if (loss) *loss = l;
    /* a simulation runs no kernel: its loss and health sums are garbage */
    if (!isfinite(l) && !HYFI_SIMULATION)
        return hyfi_call_fail(g, HYFI_ERR_DATA, "the loss is %g (not finite): lower the learning "
                                                "rate or check the input data", (double)l);
    return HYFI_OK;
}

/* After a train step: the health sums (on every rank, sent inside the
 * program); when they are not finite, the first parameter whose own sums are
 * not (every rank reads them alike). */
static hyfi_status read_health(hyfi_graph *g)
{
    float h[2] = {0, 0};
    hyfi_handle_read(g, hyfi_kref(g->cc, HK_HEALTH, 0, (uint64_t)g->cc->health_root), -1, h,
                     sizeof h);
    g->cc->grad_norm = sqrt((double)h[0]);
    g->cc->weight_norm = sqrt((double)h[1]);
    if ((isfinite(h[0]) && isfinite(h[1])) || HYFI_SIMULATION) return HYFI_OK;
    const char *bad = "?", *what = "gradient";
    for (int i = 0; i < g->nparams; i++) {
        const hyfi_tensor *p = g->params[i];
        if (!p->gwritten) continue;
        float n[2];
        hyfi_handle_read(g, TK(p, HK_NORMS, 0), -1, n, sizeof n);
        if (!isfinite(n[0]) || !isfinite(n[1])) {
            bad = p->name;
            what = isfinite(n[0]) ? "updated weight" : "gradient";
            break;
        }
    }
    return hyfi_call_fail(g, HYFI_ERR_DATA,
                          "a non-finite %s (NaN, infinity or a square sum above 3e38) in "
                          "\"%s\", the first such parameter: the update has made the weights "
                          "unusable; check the input data for NaN/infinite values, lower the "
                          "learning rate, and reload saved parameters before training on",
                          what, bad);
}

hyfi_status hyfi_train_step(hyfi_graph *g, float *loss)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_train_step");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, &g->cc->train_prog);
    if (s != HYFI_OK) return s;
    g->cc->stepped = 1;
    g->cc->last_train = 1;
    s = read_loss(g, loss);
    const hyfi_status h = read_health(g);
    return h != HYFI_OK ? h : s;
}

hyfi_status hyfi_train_norms(hyfi_graph *g, double *grad_norm, double *weight_norm)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_train_norms");
    if (s != HYFI_OK) return s;
    if (!g->cc->stepped)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_train_norms: no train step has run yet");
    if (grad_norm) *grad_norm = g->cc->grad_norm;
    if (weight_norm) *weight_norm = g->cc->weight_norm;
    return HYFI_OK;
}

hyfi_status hyfi_infer(hyfi_graph *g, float *loss)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_infer");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, &g->cc->infer_prog);
    if (s != HYFI_OK) return s;
    g->cc->last_train = 0;
    return read_loss(g, loss);
}

hyfi_status hyfi_forward(hyfi_graph *g, bool training, float *loss)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_forward");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, training ? &g->cc->fwd_train_prog : &g->cc->infer_prog);
    if (s != HYFI_OK) return s;
    g->cc->last_train = 0;
    return read_loss(g, loss);
}

hyfi_status hyfi_set_lr(hyfi_graph *g, float lr)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_set_lr");
    if (s != HYFI_OK) return s;
    if (!(lr > 0))
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_lr: learning rate %g must be > 0", lr);
    g->train.lr = lr;
    program *P = &g->cc->train_prog;
    for (int i = 0; i < P->n; i++)
        if (P->t[i].cl == &hyfi_cl_sgd_update || P->t[i].cl == &hyfi_cl_sgd_update_n)
            P->t[i].args->u.sgd.lr = lr;
    return HYFI_OK;
}

/* Read a tensor's handles (h: values or gradients) into out, on every rank;
 * tiles: their handles th, gathered. */
static hyfi_status read_tensor(hyfi_graph *g, hyfi_tensor *t, int grad, float *out)
{
    if (grad) t = hyfi_grad_source(t); /* a forwarded gradient (compile.c) */
    if (t->tl && (!t->tl->full || t->kind == T_INPUT)) {
        const int P = g->cc->pl->P;
        for (int m = 0; m < t->nh; m++)
            for (int q = 0; q < P; q++) {
                const size_t n = hyfi_tile_numel(t, q);
                float *tmp = malloc(n * sizeof(float));
                if (!tmp) continue;
                hyfi_handle_read(g, hyfi_handle_need(g, t, grad, 1, m * P + q), -1, tmp,
                                 n * sizeof(float));
                tile_copy(t, q, out + (size_t)m * t->mb_numel, tmp, 0);
                free(tmp);
            }
        return HYFI_OK;
    }
    if (t->nh == 1 || t->kind == T_PARAM || t->kind == T_STATE) {
        /* parameters and state: replica 0's copy (the replicas hold the same) */
        hyfi_handle_read(g, grad ? TGH(t, 0) : TH(t, 0), -1, out, t->numel * sizeof(float));
    } else if (t->batched) {
        for (int m = 0; m < t->nh; m++)
            hyfi_handle_read(g, hyfi_handle_need(g, t, grad, 0, m), -1,
                             out + (size_t)m * t->mb_numel, t->mb_numel * sizeof(float));
    } else {
        /* per micro-batch but not cut (batch-norm statistics): the last one */
        hyfi_handle_read(g, hyfi_handle_need(g, t, grad, 0, t->nh - 1), -1, out,
                         t->numel * sizeof(float));
    }
    /* kept blocked between tasks (layout.c): the caller gets NCHW / OIHW */
    if (hyfi_layout_convert(t, out, 1))
        return hyfi_call_fail(g, HYFI_ERR_NOMEM, "out of memory reading \"%s\"", t->name);
    return HYFI_OK;
}

static hyfi_status check_released(hyfi_graph *g, const hyfi_tensor *t, const char *who)
{
    if (t->released && g->cc->last_train)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "%s: \"%s\" was released after its backward "
                                                 "(plans with several stages or micro-batches "
                                                 "free activations as soon as they can); read it "
                                                 "after hyfi_forward or hyfi_infer instead", who,
                              t->name);
    return HYFI_OK;
}

/* A batch norm's output fused with its ReLU, or a convolution's with the add
 * after it, is never made (layout.c). */
static hyfi_status check_fused(hyfi_graph *g, const hyfi_tensor *t, const char *who)
{
    if (!t->fused) return HYFI_OK;
    if (t->producer >= 0 && g->nodes[t->producer].add_out)
        return hyfi_call_fail(g, HYFI_ERR_STATE,
                              "%s: \"%s\" is not kept: on CPUs its convolution and the add "
                              "after it run as one task that writes only the add's output "
                              "\"%s\"; read that, or set hyfi_plan_config.no_fuse_conv_add "
                              "(hyfi-train: HYFI_FUSE_CONV_ADD=0) to keep both",
                              who, t->name, g->nodes[t->producer].add_out->name);
    const char *relu = "its ReLU";
    for (int k = 0; k < g->nnodes; k++)
        if (g->nodes[k].op == OP_RELU && g->nodes[k].fused && g->nodes[k].in[0] == t)
            relu = g->nodes[k].name;
    return hyfi_call_fail(g, HYFI_ERR_STATE,
                          "%s: \"%s\" is not kept: on CPUs its batch norm and %s run as one "
                          "task that writes only the ReLU's output; read that, or set "
                          "hyfi_plan_config.no_fuse_bn_relu (hyfi-train: HYFI_FUSE_BN_RELU=0) "
                          "to keep both",
                          who, t->name, relu);
}

hyfi_status hyfi_tensor_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_tensor_read");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_tensor_read");
    if (s != HYFI_OK) return s;
    if (!out) return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_read: output buffer is NULL");
    if (t->is_int)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_read: \"%s\" holds int32 labels",
                              t->name);
    if ((s = check_released(g, t, "hyfi_tensor_read")) != HYFI_OK) return s;
    if ((s = check_fused(g, t, "hyfi_tensor_read")) != HYFI_OK) return s;
    if (t == g->loss) {
        out[0] = loss_value(g);
        return HYFI_OK;
    }
    return read_tensor(g, (hyfi_tensor *)t, 0, out);
}

hyfi_status hyfi_grad_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_grad_read");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_grad_read");
    if (s != HYFI_OK) return s;
    if (!out) return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_grad_read: output buffer is NULL");
    if ((s = check_fused(g, t, "hyfi_grad_read")) != HYFI_OK) return s;
    if (t->gclob)
        return hyfi_call_fail(g, HYFI_ERR_STATE,
                              "hyfi_grad_read: the gradient of \"%s\" is not kept: its buffer "
                              "went on to hold the gradient of a residual block's input (adds "
                              "forward gradients without copies); set "
                              "hyfi_plan_config.no_grad_forwarding (hyfi-train: "
                              "HYFI_GRAD_ALIAS=0) to keep it",
                              t->name);
    if (!g->cc->stepped || !hyfi_tensor_has_grad(t) || !t->gwritten)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_grad_read: \"%s\" has no gradient%s",
                              t->name, g->cc->stepped ? " (it is not on the loss's path)"
                                                  : " yet; run hyfi_train_step first");
    if (t == g->loss) {
        out[0] = 1.0f;
        return HYFI_OK;
    }
    if ((s = check_released(g, t, "hyfi_grad_read")) != HYFI_OK) return s;
    return read_tensor(g, (hyfi_tensor *)t, 1, out);
}

hyfi_status hyfi_tensor_write(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count)
{
    hyfi_status s = hyfi_need_compiled(g, "hyfi_tensor_write");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_tensor_write");
    if (s != HYFI_OK) return s;
    if ((t->kind != T_PARAM && t->kind != T_STATE) || !data)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_write: \"%s\" is not a parameter or "
                                               "state tensor (use hyfi_set_input for inputs), or "
                                               "the data is NULL", t->name);
    float *tmp = NULL;
    if (t->blk) { /* stored blocked (layout.c) */
        if (!(tmp = malloc(count * sizeof *tmp)))
            return hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_tensor_write: out of memory");
        memcpy(tmp, data, count * sizeof *tmp);
        if (hyfi_layout_convert(t, tmp, 0)) {
            free(tmp);
            return hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_tensor_write: out of memory");
        }
        data = tmp;
    }
    for (int k = 0; k < t->nh; k++)
        hyfi_handle_write(g, TH(t, k), hyfi_trank(g, t, k), data, count * sizeof(float));
    free(tmp);
    return HYFI_OK;
}
