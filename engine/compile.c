/* Compile: derive the backward pass and lower the graph to programs.
 *
 * Programs are flat lists of tasks in sequentially consistent order; StarPU
 * infers every dependency from the access modes. The train program is
 *   forward (batch norm with batch statistics)
 *   backward: one switch over ops, nodes in reverse order; a gradient that
 *     several consumers contribute to is written by the first (W) and
 *     accumulated by the next ones (RW, acc = 1), in a fixed order
 *   SGD update of every parameter that received a gradient.
 * The infer program is the forward with batch norm on running statistics;
 * fwd_train is the train program's forward alone.
 *
 * Memory: inputs, labels, parameters, state and momentum live in host memory
 * that StarPU manages (starpu_malloc, pinned when there are GPUs); activations,
 * gradients and saved tensors are registered without a home and allocated by
 * StarPU wherever a task needs them.
 */
#include "emit.h"
#include "pipeline.h"

#include <starpu_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hyfi_prog_push(program *p, prog_kind kind, struct starpu_codelet *cl, const char *name,
                   const hyfi_task_args *args)
{
    if (p->overflow) return -1;
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        prog_task *t = realloc(p->t, (size_t)nc * sizeof *t);
        if (!t) return -1;
        p->t = t;
        p->cap = nc;
    }
    prog_task *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    t->place = -1;
    t->kind = kind;
    t->cl = cl;
    t->worker = -1;
    if (args) t->args = *args;
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

void hyfi_prog_buf(program *p, starpu_data_handle_t h, enum starpu_data_access_mode mode)
{
    prog_task *t = &p->t[p->n - 1];
    if (t->nbuf == HYFI_MAX_TASK_BUFFERS) {
        p->overflow = 1;
        return;
    }
    t->buf[t->nbuf].handle = h;
    t->buf[t->nbuf].mode = mode;
    t->nbuf++;
}

void hyfi_programs_free(hyfi_graph *g)
{
    free(g->train_prog.t);
    free(g->infer_prog.t);
    free(g->fwd_train_prog.t);
    memset(&g->fwd_train_prog, 0, sizeof g->fwd_train_prog);
    memset(&g->train_prog, 0, sizeof g->train_prog);
    memset(&g->infer_prog, 0, sizeof g->infer_prog);
}

void hyfi_unreg(starpu_data_handle_t *h)
{
    if (*h) {
        starpu_data_unregister(*h);
        *h = NULL;
    }
}

void hyfi_handles_free(hyfi_graph *g)
{
    const int M = g->pl ? g->pl->nmb : 1, nrep = g->pl ? g->pl->nrep : 1;
    hyfi_spatial_free(g);
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        for (int m = 0; m < t->nh; m++) {
            if (t->h) hyfi_unreg(&t->h[m]);
            if (t->gh && t != g->loss) hyfi_unreg(&t->gh[m]);
        }
        if (t->gpart) {
            for (int k = 0; k < g->pl->nstages * t->nh; k++) hyfi_unreg(&t->gpart[k]);
            free(t->gpart);
            free(t->gpw);
            t->gpart = NULL;
            t->gpw = NULL;
        }
        free(t->h);
        if (t != g->loss) free(t->gh);
        free(t->gw);
        t->h = t->gh = NULL;
        t->gw = NULL;
        t->nh = 0;
        const size_t copies = t->kind == T_PARAM || t->kind == T_STATE ? (size_t)nrep : 1;
        for (int k = 0; t->mh && k < nrep; k++) hyfi_unreg(&t->mh[k]);
        hyfi_unreg(&t->rsave);
        free(t->mh);
        t->mh = NULL;
        if (t->host) starpu_free_noflag(t->host, copies * t->numel * 4);
        if (t->ghost) starpu_free_noflag(t->ghost, copies * t->numel * 4);
        if (t->mhost) starpu_free_noflag(t->mhost, copies * t->numel * 4);
        t->host = t->ghost = t->mhost = NULL;
    }
    for (int b = 0; b < g->nbuckets; b++) {
        hyfi_bucket *bk = &g->buckets[b];
        for (int k = 0; bk->h && bk->nparams > 1 && k < nrep; k++) hyfi_unreg(&bk->h[k]);
        for (int k = 0; bk->arc && k < nrep * nrep; k++) hyfi_unreg(&bk->arc[k]);
        free(bk->h);
        free(bk->arc);
        free(bk->params);
    }
    free(g->buckets);
    g->buckets = NULL;
    g->nbuckets = 0;
    if (g->dloss) {
        for (int m = 0; m < M; m++) hyfi_unreg(&g->dloss[m]);
        free(g->dloss);
        g->dloss = NULL;
    }
    if (g->dloss_host) starpu_free_noflag(g->dloss_host, (size_t)M * sizeof(float));
    g->dloss_host = NULL;
    for (int i = 0; i < g->ntokens; i++) hyfi_unreg(&g->tokens[i]);
    free(g->tokens);
    g->tokens = NULL;
    if (g->token_host) starpu_free_noflag(g->token_host, (size_t)g->ntokens * sizeof(float));
    g->token_host = NULL;
    g->ntokens = 0;
}

int hyfi_host_alloc(float **p, size_t n)
{
    return starpu_malloc((void **)p, (n ? n : 1) * sizeof(float)) == 0 ? 0 : -1;
}

/* Register one vector handle: with a home in host memory (ptr) on the owning
 * rank, lazily allocated elsewhere (and everywhere when ptr is NULL); known to
 * StarPU-MPI with its owner in MPI runs. */
void hyfi_reg(hyfi_graph *g, starpu_data_handle_t *h, float *ptr, size_t n, size_t elem,
              int owner, const char *name, const char *suffix, int m, int nm)
{
    if (ptr && owner == g->ctx->rank)
        starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)ptr, (uint32_t)n, elem);
    else
        starpu_vector_data_register(h, -1, 0, (uint32_t)n, elem);
    char buf[HYFI_NAME_MAX + 32];
    if (nm > 1) snprintf(buf, sizeof buf, "%s%s[%d]", name, suffix, m);
    else snprintf(buf, sizeof buf, "%s%s", name, suffix);
    starpu_data_set_name(*h, buf);
    if (g->ctx->mpi) starpu_mpi_data_register(*h, g->ctx->next_tag, owner);
    if (g->ctx->trace_dir) hyfi_trace_note_handle(g, *h, g->ctx->next_tag, owner, buf);
    g->ctx->next_tag++;
}

static struct starpu_codelet *redux_cl(void) { return &hyfi_cl_redux_add; }
static struct starpu_codelet *redux_init_cl(void) { return &hyfi_cl_redux_zero; }

/* Register every tensor; allocate and initialise what lives in host memory. */
/* The all-reduce algorithm of a gradient of n floats over the replicas. */
static int use_ring(const hyfi_graph *g, size_t n)
{
    const hyfi_allreduce a = g->plan_cfg.allreduce;
    if (a == HYFI_ALLREDUCE_RING) return n >= (size_t)g->pl->nrep;
    if (a == HYFI_ALLREDUCE_TREE) return 0;
    return n * sizeof(float) >= HYFI_RING_MIN_BYTES && n >= (size_t)g->pl->nrep;
}

/* Chunk c of the ring: [c * n / R, (c+1) * n / R). */
static size_t chunk_lo(size_t n, int R, int c) { return n * (size_t)c / (size_t)R; }

int hyfi_handle_owner(const hyfi_graph *g, const hyfi_tensor *t, int k)
{
    const int per_mb = t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT ||
                       t->kind == T_SAVED;
    return hyfi_trank(g, t, per_mb ? HYFI_REP(g->pl, k) : k);
}

static hyfi_status register_tensors(hyfi_graph *g)
{
    const hyfi_plan *pl = g->pl;
    const int M = pl->nmb, me = g->ctx->rank, NR = pl->nrep;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        const int per_mb = t->kind == T_INPUT || t->kind == T_LABELS || t->kind == T_ACT ||
                           t->kind == T_SAVED;
        t->nh = per_mb ? M : NR;
        t->mb_numel = per_mb && t->batched ? t->numel / (size_t)M : t->numel;
        if (t->mb_numel > UINT32_MAX)
            return hyfi_graph_fail(g, HYFI_ERR_SHAPE, "tensor \"%s\" has %zu elements per "
                                                      "micro-batch; at most 2^32-1 per tensor "
                                                      "(use more --parts, spatial parallelism or "
                                                      "a smaller batch)", t->name, t->mb_numel);
        t->h = calloc((size_t)t->nh, sizeof *t->h);
        t->gw = calloc((size_t)t->nh, 1);
        if (!t->h || !t->gw) goto oom;
        /* this rank owns some handle of t */
        int own = 0;
        for (int k = 0; k < NR; k++) own |= hyfi_trank(g, t, k) == me;
        const size_t elem = t->is_int ? sizeof(int32_t) : sizeof(float);
        switch (t->kind) {
        case T_INPUT:
        case T_LABELS:
            if (own) {
                if (hyfi_host_alloc(&t->host, t->numel)) goto oom;
                memset(t->host, 0, t->numel * 4);
            }
            for (int m = 0; m < M; m++)
                hyfi_reg(g, &t->h[m], own ? t->host + (size_t)m * t->mb_numel : NULL, t->mb_numel,
                    elem, hyfi_handle_owner(g, t, m), t->name, "", m, M);
            if (!t->is_int) {
                t->gh = calloc((size_t)M, sizeof *t->gh);
                if (!t->gh) goto oom;
                for (int m = 0; m < M; m++)
                    hyfi_reg(g, &t->gh[m], NULL, t->mb_numel, elem, hyfi_handle_owner(g, t, m),
                             t->name, ".grad", m, M);
            }
            break;
        case T_PARAM:
            /* one copy per replica, all initialised alike */
            t->gh = calloc((size_t)NR, sizeof *t->gh);
            t->mh = calloc((size_t)NR, sizeof *t->mh);
            if (!t->gh || !t->mh) goto oom;
            if (own) {
                const size_t n = (size_t)NR * t->numel;
                if (hyfi_host_alloc(&t->host, n) || hyfi_host_alloc(&t->ghost, n) ||
                    hyfi_host_alloc(&t->mhost, n))
                    goto oom;
                for (int k = 0; k < NR; k++) hyfi_param_init(t->host + (size_t)k * t->numel, t, g->seed);
                memset(t->ghost, 0, n * 4);
                memset(t->mhost, 0, n * 4);
            }
            for (int k = 0; k < NR; k++) {
                const size_t o = (size_t)k * t->numel;
                const int r = hyfi_trank(g, t, k);
                hyfi_reg(g, &t->h[k], own ? t->host + o : NULL, t->numel, elem, r, t->name, "",
                         k, NR);
                hyfi_reg(g, &t->gh[k], own ? t->ghost + o : NULL, t->numel, elem, r, t->name,
                         ".grad", k, NR);
                hyfi_reg(g, &t->mh[k], own ? t->mhost + o : NULL, t->numel, elem, r, t->name,
                         ".momentum", k, NR);
                /* Summed over micro-batches by a StarPU reduction. */
                if (pl->mbr > 1 && !g->plan_cfg.deterministic)
                    starpu_data_set_reduction_methods(t->gh[k], redux_cl(), redux_init_cl());
            }
            break;
        case T_STATE:
            if (own) {
                if (hyfi_host_alloc(&t->host, (size_t)NR * t->numel)) goto oom;
                for (int k = 0; k < NR; k++) hyfi_param_init(t->host + (size_t)k * t->numel, t, g->seed);
            }
            for (int k = 0; k < NR; k++)
                hyfi_reg(g, &t->h[k], own ? t->host + (size_t)k * t->numel : NULL, t->numel, elem,
                         hyfi_trank(g, t, k), t->name, "", k, NR);
            break;
        case T_ACT:
            for (int m = 0; m < M; m++)
                hyfi_reg(g, &t->h[m], NULL, t->mb_numel, elem, hyfi_handle_owner(g, t, m), t->name,
                         "", m, M);
            if (t != g->loss) {
                t->gh = calloc((size_t)M, sizeof *t->gh);
                if (!t->gh) goto oom;
                for (int m = 0; m < M; m++)
                    hyfi_reg(g, &t->gh[m], NULL, t->mb_numel, elem, hyfi_handle_owner(g, t, m),
                             t->name, ".grad", m, M);
            }
            break;
        case T_SAVED:
            for (int m = 0; m < M; m++)
                hyfi_reg(g, &t->h[m], NULL, t->mb_numel, elem, hyfi_handle_owner(g, t, m), t->name,
                         "", m, M);
            break;
        }
    }
    /* Partial gradients of activations consumed by other stages. */
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++) {
            hyfi_tensor *t = nd->in[k];
            if (t->kind != T_ACT || !t->requires_grad || nd->stage == t->stage) continue;
            const int S = g->pl->nstages;
            if (!t->gpart) {
                t->gpart = calloc((size_t)S * M, sizeof *t->gpart);
                t->gpw = calloc((size_t)S * M, 1);
                if (!t->gpart || !t->gpw) goto oom;
            }
            if (t->gpart[(size_t)nd->stage * M]) continue;
            char sfx[32];
            snprintf(sfx, sizeof sfx, ".grad.stage%d", nd->stage);
            for (int m = 0; m < M; m++)
                hyfi_reg(g, &t->gpart[(size_t)nd->stage * M + m], NULL, t->mb_numel, sizeof(float),
                    hyfi_stage_rank(pl, HYFI_REP(pl, m), nd->stage), t->name, sfx, m, M);
        }
    }
    /* Replicas: saved running statistics. */
    for (int i = 0; NR > 1 && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->kind == T_STATE)
            hyfi_reg(g, &t->rsave, NULL, t->numel, sizeof(float), hyfi_trank(g, t, 0), t->name,
                     ".start", 0, 1);
    }
    /* The seed of the backward: d(mean over the batch)/d(micro-batch loss) = 1/M. */
    if (hyfi_host_alloc(&g->dloss_host, (size_t)M)) goto oom;
    g->dloss = calloc((size_t)M, sizeof *g->dloss);
    if (!g->dloss) goto oom;
    for (int m = 0; m < M; m++) {
        g->dloss_host[m] = 1.0f / (float)M;
        hyfi_reg(g, &g->dloss[m], g->dloss_host + m, 1, sizeof(float),
                 hyfi_handle_owner(g, g->loss, m), g->loss->name, ".grad", m, M);
    }
    g->loss->gh = g->dloss;
    /* 1F1B: per stage, one token per activation slot (see emit_events). */
    if (pl->schedule == HYFI_SCHEDULE_1F1B && pl->mbr > 1) {
        for (int q = 0; q < pl->nplaces; q++) g->ntokens += pl->inflight[pl->place_stage[q]];
        g->tokens = calloc((size_t)g->ntokens, sizeof *g->tokens);
        if (!g->tokens || hyfi_host_alloc(&g->token_host, (size_t)g->ntokens)) goto oom;
        memset(g->token_host, 0, (size_t)g->ntokens * sizeof(float));
        for (int q = 0, k = 0; q < pl->nplaces; q++)
            for (int j = 0; j < pl->inflight[pl->place_stage[q]]; j++, k++) {
                char nm[48];
                snprintf(nm, sizeof nm, "place%d.token", q);
                hyfi_reg(g, &g->tokens[k], g->token_host + k, 1, sizeof(float), pl->place_rank[q],
                    nm, "", j, 2);
            }
    }
    return HYFI_OK;
oom:
    return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of host memory registering the tensors "
                                              "(%d tensors); use a smaller batch or model",
                           g->ntensors);
}

/* Handles of micro-batch m. */
#define HV(t) TH((t), e->m)
#define HG(t) TGH((t), e->m)
/* The gradient of t that the emitting stage writes for micro-batch m: t's own
 * where the stage owns t, else the stage's partial of it; with its flag. */
static starpu_data_handle_t gtarget(const emit_ctx *e, hyfi_tensor *t, unsigned char **flag)
{
    if (t->stage == e->stage || !t->gpart) {
        *flag = &TGW(t, e->m);
        return TGH(t, e->m);
    }
    const size_t k = (size_t)e->stage * t->nh + e->m;
    *flag = &t->gpw[k];
    return t->gpart[k];
}

static int gacc(const emit_ctx *e, hyfi_tensor *t)
{
    unsigned char *f;
    gtarget(e, t, &f);
    return *f;
}

static void grad_out(const emit_ctx *e, program *P, hyfi_tensor *t)
{
    unsigned char *f;
    starpu_data_handle_t h = gtarget(e, t, &f);
    hyfi_prog_buf(P, h, *f ? STARPU_RW : STARPU_W);
}

static void grad_done(const emit_ctx *e, hyfi_tensor *t)
{
    unsigned char *f;
    gtarget(e, t, &f);
    *f = 1;
    t->gwritten = 1;
}

/* An activation gradient output: overwritten by its first writer, accumulated after. */
#define GRAD_OUT(t) grad_out(e, P, (t))
#define GRAD_DONE(t) grad_done(e, (t))
#define GACC(t) gacc(e, (t))

void hyfi_task_name(char *out, size_t len, const node *nd, const char *pass, const emit_ctx *e)
{
    if (e->M > 1) snprintf(out, len, "%s.%s.mb%d", nd->name, pass, e->m);
    else snprintf(out, len, "%s.%s", nd->name, pass);
}

/* The op's arguments for one micro-batch: the batch dimension divided by M. */
hyfi_task_args hyfi_node_args(const node *nd, int M)
{
    hyfi_task_args a = {0};
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv = nd->a.conv;
        a.u.conv.n /= M;
        break;
    case OP_BATCHNORM:
        a.u.bn = nd->a.bn;
        a.u.bn.n /= M;
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        a.u.pool = nd->a.pool;
        a.u.pool.n /= M;
        break;
    case OP_FC:
        a.u.fc = nd->a.fc;
        a.u.fc.n /= M;
        break;
    case OP_XENT:
        a.u.xent = nd->a.xent;
        a.u.xent.n /= M;
        a.u.xent.scale = 1.0f / (float)a.u.xent.n; /* the mean over the micro-batch */
        break;
    case OP_RELU:
    case OP_ADD:
        a.u.elt.count = nd->out->numel / (size_t)M;
        break;
    case OP_CONCAT:
    case OP_COUNT:
        break;
    }
    return a;
}

static int emit_forward(emit_ctx *e, const node *nd, int training)
{
    program *P = e->P;
    char nm[64];
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    hyfi_task_name(nm, sizeof nm, nd, "fwd", e);
    switch (nd->op) {
    case OP_CONV2D:
        TASK(&hyfi_cl_conv2d_forward, nm, &a);
        W(HV(y)), R(HV(x)), R(PH(nd->p[0]));
        if (nd->p[1]) R(PH(nd->p[1]));
        break;
    case OP_BATCHNORM:
        if (training) {
            TASK(&hyfi_cl_batchnorm_forward_train, nm, &a);
            W(HV(y)), W(HV(nd->s[0])), W(HV(nd->s[1])), RW(PH(nd->p[2])), RW(PH(nd->p[3]));
            R(HV(x)), R(PH(nd->p[0])), R(PH(nd->p[1]));
        } else {
            TASK(&hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(HV(y)), R(HV(x)), R(PH(nd->p[0])), R(PH(nd->p[1])), R(PH(nd->p[2]));
            R(PH(nd->p[3]));
        }
        break;
    case OP_RELU:
        TASK(&hyfi_cl_relu_forward, nm, &a);
        W(HV(y)), R(HV(x));
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        TASK(nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_forward
             : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_forward
                                    : &hyfi_cl_gap_forward,
             nm, &a);
        W(HV(y)), R(HV(x));
        break;
    case OP_ADD:
        TASK(&hyfi_cl_add_forward, nm, &a);
        W(HV(y)), R(HV(nd->in[0])), R(HV(nd->in[1]));
        break;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M, .hw = y->dims[2] * y->dims[3],
                                            .c_part = xi->dims[1], .c_offset = off,
                                            .c_total = y->dims[1]};
            char pass[16];
            snprintf(pass, sizeof pass, "fwd%d", i);
            hyfi_task_name(nm, sizeof nm, nd, pass, e);
            TASK(&hyfi_cl_concat_forward, nm, &a);
            hyfi_prog_buf(P, HV(y), i == 0 ? STARPU_W : STARPU_RW);
            R(HV(xi));
            off += xi->dims[1];
        }
        break;
    }
    case OP_FC:
        TASK(&hyfi_cl_fc_forward, nm, &a);
        W(HV(y)), R(HV(x)), R(PH(nd->p[0]));
        if (nd->p[1]) R(PH(nd->p[1]));
        break;
    case OP_XENT:
        TASK(&hyfi_cl_xent_forward, nm, &a);
        W(HV(y)), W(HV(nd->s[0])), R(HV(x)), R(HV(nd->in[1]));
        break;
    case OP_COUNT:
        break;
    }
    return 0;
}

/* dst += src (or dst = src for the first writer) */
static int emit_accumulate(emit_ctx *e, hyfi_tensor *dst, starpu_data_handle_t src,
                           const char *name)
{
    program *P = e->P;
    hyfi_task_args a = {.acc = GACC(dst), .u.elt.count = dst->mb_numel};
    TASK(&hyfi_cl_accumulate, name, &a);
    GRAD_OUT(dst), R(src);
    GRAD_DONE(dst);
    return 0;
}

/* The mode (and acc flag) of a parameter gradient output: written once per step
 * with one micro-batch; with several, zeroed by a fill task before the first
 * contribution and summed by a StarPU reduction (contributions accumulate into
 * per-worker copies that StarPU adds up when the update reads the gradient), or
 * with `deterministic` accumulated in emission order, which is micro-batch
 * order under both schedules. */
int hyfi_grad_sum_mode(emit_ctx *e, starpu_data_handle_t h, unsigned char *written, size_t numel,
                       const char *name, enum starpu_data_access_mode *mode, int *acc)
{
    program *P = e->P;
    if (e->g->pl->mbr == 1) {
        *mode = STARPU_W;
        *acc = 0;
    } else if (e->g->plan_cfg.deterministic) {
        /* micro-batch order: the first contribution writes, the next ones add */
        *acc = *written;
        *mode = *acc ? STARPU_RW : STARPU_W;
    } else {
        *acc = 1;
        if (!*written) {
            char nm[HYFI_NAME_MAX + 16];
            snprintf(nm, sizeof nm, "%.50s.zero_grad", name);
            hyfi_task_args a = {.u.elt = {.count = numel, .value = 0.0f}};
            TASK(&hyfi_cl_fill, nm, &a);
            W(h);
        }
        *mode = STARPU_REDUX;
    }
    *written = 1;
    return 0;
}

static int param_grad_mode(emit_ctx *e, hyfi_tensor *p, enum starpu_data_access_mode *mode,
                           int *acc)
{
    p->gwritten = 1;
    return hyfi_grad_sum_mode(e, PGH(p), &PGW(p), p->numel, p->name, mode, acc);
}

/* Backward of an op with a weight and an optional bias (conv2d, fc): the data
 * gradient (skipped when x needs none) and the parameter gradients. */
static int emit_weighted_backward(emit_ctx *e, const node *nd, hyfi_task_args *a,
                                  struct starpu_codelet *cl_data,
                                  struct starpu_codelet *cl_weight)
{
    program *P = e->P;
    char nm[64];
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    if (x->requires_grad) {
        hyfi_task_name(nm, sizeof nm, nd, "bwd_data", e);
        a->acc = GACC(x);
        TASK(cl_data, nm, a);
        GRAD_OUT(x), R(HG(y)), R(PH(nd->p[0]));
        GRAD_DONE(x);
    }
    enum starpu_data_access_mode mw, mb = STARPU_W;
    int accw, accb;
    if (param_grad_mode(e, nd->p[0], &mw, &accw)) return -1;
    if (nd->p[1] && param_grad_mode(e, nd->p[1], &mb, &accb)) return -1;
    hyfi_task_name(nm, sizeof nm, nd, "bwd_weight", e);
    a->acc = accw; /* weight and bias are always written together */
    TASK(cl_weight, nm, a);
    hyfi_prog_buf(P, PGH(nd->p[0]), mw);
    if (nd->p[1]) hyfi_prog_buf(P, PGH(nd->p[1]), mb);
    R(HG(y)), R(HV(x));
    return 0;
}

static int emit_backward(emit_ctx *e, const node *nd)
{
    program *P = e->P;
    char nm[64];
    hyfi_task_args a = hyfi_node_args(nd, e->M);
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    switch (nd->op) {
    case OP_CONV2D:
        return emit_weighted_backward(e, nd, &a, &hyfi_cl_conv2d_backward_data,
                                      &hyfi_cl_conv2d_backward_weight);
    case OP_BATCHNORM: {
        /* One kernel writes dx, dgamma and dbeta; its acc bits say which add. */
        enum starpu_data_access_mode mg, mb;
        int accg, accb;
        if (param_grad_mode(e, nd->p[0], &mg, &accg) || param_grad_mode(e, nd->p[1], &mb, &accb))
            return -1;
        a.acc = (GACC(x) ? HYFI_BN_ACC_DX : 0) | (accg ? HYFI_BN_ACC_PARAMS : 0);
        hyfi_task_name(nm, sizeof nm, nd, "bwd", e);
        TASK(&hyfi_cl_batchnorm_backward, nm, &a);
        GRAD_OUT(x);
        hyfi_prog_buf(P, PGH(nd->p[0]), mg);
        hyfi_prog_buf(P, PGH(nd->p[1]), mb);
        R(HG(y)), R(HV(x)), R(PH(nd->p[0])), R(HV(nd->s[0])), R(HV(nd->s[1]));
        GRAD_DONE(x);
        break;
    }
    case OP_RELU:
        if (!x->requires_grad) break;
        a.acc = GACC(x);
        hyfi_task_name(nm, sizeof nm, nd, "bwd", e);
        TASK(&hyfi_cl_relu_backward, nm, &a);
        GRAD_OUT(x), R(HG(y)), R(HV(y));
        GRAD_DONE(x);
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        if (!x->requires_grad) break;
        a.acc = GACC(x);
        hyfi_task_name(nm, sizeof nm, nd, "bwd", e);
        TASK(nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_backward
             : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_backward
                                    : &hyfi_cl_gap_backward,
             nm, &a);
        GRAD_OUT(x), R(HG(y));
        if (nd->op == OP_MAXPOOL) R(HV(x));
        GRAD_DONE(x);
        break;
    case OP_ADD:
        for (int i = 0; i < 2; i++) {
            if (!nd->in[i]->requires_grad) continue;
            char pass[16];
            snprintf(pass, sizeof pass, "bwd%d", i);
            hyfi_task_name(nm, sizeof nm, nd, pass, e);
            if (emit_accumulate(e, nd->in[i], HG(y), nm)) return -1;
        }
        break;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            if (xi->requires_grad) {
                a.u.concat = (hyfi_concat_args){.n = y->dims[0] / e->M,
                                                .hw = y->dims[2] * y->dims[3],
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                a.acc = GACC(xi);
                char pass[16];
                snprintf(pass, sizeof pass, "bwd%d", i);
                hyfi_task_name(nm, sizeof nm, nd, pass, e);
                TASK(&hyfi_cl_concat_backward, nm, &a);
                GRAD_OUT(xi), R(HG(y));
                GRAD_DONE(xi);
            }
            off += xi->dims[1];
        }
        break;
    }
    case OP_FC:
        return emit_weighted_backward(e, nd, &a, &hyfi_cl_fc_backward_data,
                                      &hyfi_cl_fc_backward_weight);
    case OP_XENT:
        a.acc = GACC(x);
        hyfi_task_name(nm, sizeof nm, nd, "bwd", e);
        TASK(&hyfi_cl_xent_backward, nm, &a);
        GRAD_OUT(x), R(HV(nd->s[0])), R(HV(nd->in[1])), R(HG(y));
        GRAD_DONE(x);
        break;
    case OP_COUNT:
        break;
    }
    return 0;
}

/* The forward of stage e->stage for micro-batch e->m: the tiled tensors it
 * reads whole are gathered first, then its ops in order. */
static int emit_stage_forward(emit_ctx *e, const int *first, int training)
{
    hyfi_graph *g = e->g;
    const int s = e->stage;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->tl && t->tl->full && t->stage == s && hyfi_spatial_gather(e, t)) return -1;
    }
    for (int i = first[s]; i < first[s + 1]; i++) {
        const node *nd = &g->nodes[i];
        if (hyfi_spatial_tiled(g, nd) ? hyfi_spatial_forward(e, nd, training)
                                      : emit_forward(e, nd, training))
            return -1;
    }
    return 0;
}

/* First token of each place (1F1B: inflight[stage] slots per place). */
static int token_base(const hyfi_plan *pl, int place)
{
    int b = 0;
    for (int q = 0; q < place; q++) b += pl->inflight[pl->place_stage[q]];
    return b;
}

/* Give the tasks emitted since `from` their place (the event's where the
 * emitter set none), its rank and worker, the event's priority and the place's
 * 1F1B token (appended as their last buffer: the kernels never see it). */
static void finish_tasks(emit_ctx *e, int from)
{
    const hyfi_plan *pl = e->g->pl;
    for (int k = from; k < e->P->n; k++) {
        prog_task *t = &e->P->t[k];
        if (t->kind != PT_TASK) continue;
        if (t->place < 0) t->place = e->place;
        t->rank = pl->place_rank[t->place];
        t->worker = pl->place_worker[t->place];
        t->prio = e->prio;
        if (e->g->tokens) {
            if (t->nbuf == HYFI_MAX_TASK_BUFFERS) {
                e->P->overflow = 1;
                continue;
            }
            const int slot = (e->m % pl->mbr) % pl->inflight[pl->place_stage[t->place]];
            t->buf[t->nbuf].handle = e->g->tokens[token_base(pl, t->place) + slot];
            t->buf[t->nbuf].mode = e->token_mode;
            t->nbuf++;
        }
    }
}

/* Every rank reads the loss after a program: send each micro-batch's loss to
 * every rank inside the program, so that the program's final wait covers it. */
static int emit_loss_bcast(hyfi_graph *g, program *P)
{
    if (g->ctx->nranks < 2) return 0;
    for (int m = 0; m < g->loss->nh; m++) {
        if (hyfi_prog_push(P, PT_BCAST, NULL, "loss.bcast", NULL)) return -1;
        P->t[P->n - 1].rank = hyfi_handle_owner(g, g->loss, m);
        hyfi_prog_buf(P, g->loss->h[m], STARPU_R);
    }
    return 0;
}

int hyfi_emit_release(program *P, starpu_data_handle_t h, int owner)
{
    if (hyfi_prog_push(P, PT_RELEASE, NULL, "release", NULL)) return -1;
    P->t[P->n - 1].rank = owner;
    hyfi_prog_buf(P, h, STARPU_W);
    return 0;
}

/* Nodes of stage s: [first[s], first[s + 1]). */
static int *stage_nodes(hyfi_graph *g)
{
    const int S = g->pl->nstages;
    int *first = malloc((size_t)(S + 1) * sizeof *first);
    if (!first) return NULL;
    for (int s = 0; s <= S; s++) first[s] = g->nnodes;
    for (int i = g->nnodes - 1; i >= 0; i--) first[g->nodes[i].stage] = i;
    for (int s = S - 1; s >= 0; s--)
        if (first[s] > first[s + 1]) first[s] = first[s + 1];
    return first;
}

static int clamp_prio(int p)
{
    const int lo = starpu_sched_get_min_priority(), hi = starpu_sched_get_max_priority();
    return p < lo ? lo : p > hi ? hi : p;
}

/* The last task pushed runs on `place` with priority prio. */
static void on_place(hyfi_graph *g, program *P, int place, int prio)
{
    prog_task *t = &P->t[P->n - 1];
    t->place = place;
    t->rank = g->pl->place_rank[place];
    t->worker = g->pl->place_worker[place];
    t->prio = prio;
}

/* ---------------------------------------------------------------- replicas
 *
 * Running statistics. A batch norm's running statistic follows
 *     r <- a r + m s_j   (a = 1 - momentum, s_j: the statistic of micro-batch j)
 * over the step's micro-batches in order. Replica k applies it to its own
 * micro-batches [k B, (k+1) B) from the common start r0, giving r_k; the
 * one-place value after all of them is then exactly
 *     x_0 = r_0,  x_k = a^B x_(k-1) + (r_k - a^B r0),  r = x_(R-1),
 * computed on replica 0 (r0 saved at the start of the step) and copied to the
 * other replicas. Linear, so equal up to round-off. */
static int emit_state_save(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->pl;
    if (pl->nrep < 2) return 0;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->kind != T_STATE || !t->rsave) continue;
        hyfi_task_args a = {.acc = 0, .u.elt.count = t->numel};
        char nm[64];
        snprintf(nm, sizeof nm, "%.50s.save", t->name);
        TASK(&hyfi_cl_accumulate, nm, &a);
        W(t->rsave), R(t->h[0]);
        on_place(g, P, pl->stage_place0[t->stage], clamp_prio(pl->nticks + 1));
    }
    return 0;
}

static int emit_state_combine(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->pl;
    if (pl->nrep < 2) return 0;
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (nd->op != OP_BATCHNORM) continue;
        for (int j = 2; j < 4; j++) {
            hyfi_tensor *t = nd->p[j];
            if (!t->rsave) continue;
            hyfi_task_args a = {.u.rcomb = {.count = t->numel, .nrep = pl->nrep,
                                            .decay = pow(1.0 - (double)nd->a.bn.momentum,
                                                         (double)pl->mbr)}};
            char nm[64];
            snprintf(nm, sizeof nm, "%.50s.combine", t->name);
            TASK(&hyfi_cl_running_combine, nm, &a);
            RW(t->h[0]), R(t->rsave);
            for (int k = 1; k < pl->nrep; k++) R(t->h[k]);
            on_place(g, P, pl->stage_place0[t->stage], clamp_prio(pl->nticks + 1));
            for (int k = 1; k < pl->nrep; k++) {
                hyfi_task_args c = {.acc = 0, .u.elt.count = t->numel};
                snprintf(nm, sizeof nm, "%.44s.copy.r%d", t->name, k);
                TASK(&hyfi_cl_accumulate, nm, &c);
                W(t->h[k]), R(t->h[0]);
                on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[t->stage]),
                         clamp_prio(pl->nticks + 1));
            }
        }
    }
    return 0;
}

/* All-reduce (sum) of every parameter gradient over the replicas, as tasks:
 * each replica's gradient is complete when its last micro-batch's backward
 * (and, on tiled stages, the sum over tiles) has run, and StarPU starts these
 * tasks then: the gradients of the last layers travel while the first layers
 * still run their backward. Every replica ends with the same floats.
 *   ring: gradient k split into R chunks C[k][c]; reduce-scatter: R-1 steps,
 *         replica k adds replica k-1's chunk (k-1-s) mod R into its own; then
 *         replica k holds chunk (k+1) mod R summed; all-gather: R-1 steps,
 *         replica k copies chunk (k-s) mod R from replica k-1; join.
 *   tree: binomial reduce into replica 0 (replica k adds k+d for d = 1, 2,
 *         4, ...), then the sum copied back down the same tree. */
/* One all-reduce over h[0 .. R) (n floats each, on stage `stage`'s first
 * place of every replica); arc: the ring's R x R chunk handles, or NULL (tree). */
static int emit_allreduce_one(hyfi_graph *g, program *P, const char *name,
                              starpu_data_handle_t *h, starpu_data_handle_t *arc, size_t n,
                              int stage)
{
    const hyfi_plan *pl = g->pl;
    const int R = pl->nrep, prio = clamp_prio(pl->nticks + 1);
    char nm[128];
#define RPLACE(k) HYFI_PLACE(pl, (k), pl->stage_place0[stage])
    if (!arc) { /* tree */
        int top = 1;
        while (top * 2 < R) top *= 2;
        for (int d = 1; d < R; d *= 2)
            for (int k = 0; k + d < R; k += 2 * d) {
                hyfi_task_args a = {.acc = 1, .u.elt.count = n};
                snprintf(nm, sizeof nm, "%.36s.allreduce.add.r%d.r%d", name, k, k + d);
                TASK(&hyfi_cl_accumulate, nm, &a);
                RW(h[k]), R(h[k + d]);
                on_place(g, P, RPLACE(k), prio);
            }
        for (int d = top; d >= 1; d /= 2)
            for (int k = 0; k + d < R; k += 2 * d) {
                hyfi_task_args a = {.acc = 0, .u.elt.count = n};
                snprintf(nm, sizeof nm, "%.36s.allreduce.copy.r%d.r%d", name, k + d, k);
                TASK(&hyfi_cl_accumulate, nm, &a);
                W(h[k + d]), R(h[k]);
                on_place(g, P, RPLACE(k + d), prio);
            }
        return 0;
    }
#define CH(k, c) arc[(size_t)(k) * R + (c)]
#define CN(c) (chunk_lo(n, R, (c) + 1) - chunk_lo(n, R, (c)))
    for (int k = 0; k < R; k++)
        for (int c = 0; c < R; c++) {
            hyfi_task_args a = {.u.slice = {.count = CN(c), .src_off = chunk_lo(n, R, c)}};
            snprintf(nm, sizeof nm, "%.36s.allreduce.split.r%d.c%d", name, k, c);
            TASK(&hyfi_cl_copy_slice, nm, &a);
            W(CH(k, c)), R(h[k]);
            on_place(g, P, RPLACE(k), prio);
        }
    for (int st = 0; st < R - 1; st++)
        for (int k = 0; k < R; k++) {
            const int c = ((k - 1 - st) % R + R) % R, from = (k + R - 1) % R;
            hyfi_task_args a = {.acc = 1, .u.elt.count = CN(c)};
            snprintf(nm, sizeof nm, "%.36s.allreduce.rs%d.r%d.c%d", name, st, k, c);
            TASK(&hyfi_cl_accumulate, nm, &a);
            RW(CH(k, c)), R(CH(from, c));
            on_place(g, P, RPLACE(k), prio);
        }
    for (int st = 0; st < R - 1; st++)
        for (int k = 0; k < R; k++) {
            const int c = ((k - st) % R + R) % R, from = (k + R - 1) % R;
            hyfi_task_args a = {.acc = 0, .u.elt.count = CN(c)};
            snprintf(nm, sizeof nm, "%.36s.allreduce.ag%d.r%d.c%d", name, st, k, c);
            TASK(&hyfi_cl_accumulate, nm, &a);
            W(CH(k, c)), R(CH(from, c));
            on_place(g, P, RPLACE(k), prio);
        }
    for (int k = 0; k < R; k++)
        for (int c = 0; c < R; c++) {
            hyfi_task_args a = {.u.slice = {.count = CN(c), .dst_off = chunk_lo(n, R, c)}};
            snprintf(nm, sizeof nm, "%.36s.allreduce.join.r%d.c%d", name, k, c);
            TASK(&hyfi_cl_copy_slice, nm, &a);
            RW(h[k]), R(CH(k, c));
            on_place(g, P, RPLACE(k), prio);
        }
#undef CN
#undef CH
#undef RPLACE
    return 0;
}

/* Gradients travel in buckets: the parameters of one stage, in the order the
 * backward completes them (last layers first), packed into one handle per
 * replica up to the bucket size, so that a few large messages replace many
 * small ones (batch-norm parameters are tens of floats). A bucket is packed as
 * its gradients complete (a chain of slice copies), all-reduced, and unpacked.
 * A bucket of one parameter is all-reduced in place. */
static int emit_allreduce(hyfi_graph *g, program *P)
{
    const hyfi_plan *pl = g->pl;
    const int R = pl->nrep, prio = clamp_prio(pl->nticks + 1);
    if (R < 2) return 0;
    const int kib = g->plan_cfg.bucket_kib;
    const size_t cap = kib < 0 ? 0 : (size_t)(kib ? kib : HYFI_BUCKET_KIB) * 1024;
    g->buckets = calloc((size_t)g->nparams, sizeof *g->buckets);
    if (!g->buckets) return -1;
    char nm[128];
    for (int i = g->nparams - 1; i >= 0; i--) {
        hyfi_tensor *p = g->params[i];
        if (!p->gwritten) continue;
        hyfi_bucket *b = g->nbuckets ? &g->buckets[g->nbuckets - 1] : NULL;
        if (!b || b->stage != p->stage || (b->numel + p->numel) * sizeof(float) > cap) {
            b = &g->buckets[g->nbuckets++];
            b->stage = p->stage;
            b->params = calloc((size_t)g->nparams, sizeof *b->params);
            if (!b->params) return -1;
        }
        b->params[b->nparams++] = p;
        b->numel += p->numel;
    }
    for (int bi = 0; bi < g->nbuckets; bi++) {
        hyfi_bucket *b = &g->buckets[bi];
        const int ring = use_ring(g, b->numel);
        char bname[HYFI_NAME_MAX];
        if (b->nparams == 1) snprintf(bname, sizeof bname, "%s", b->params[0]->name);
        else snprintf(bname, sizeof bname, "bucket%d", bi);
        b->h = calloc((size_t)R, sizeof *b->h);
        if (!b->h || (ring && !(b->arc = calloc((size_t)R * R, sizeof *b->arc)))) return -1;
        for (int k = 0; k < R; k++) {
            if (b->nparams == 1) {
                b->h[k] = b->params[0]->gh[k];
                continue;
            }
            hyfi_reg(g, &b->h[k], NULL, b->numel, sizeof(float), hyfi_stage_rank(pl, k, b->stage),
                     bname, ".grad", k, R);
        }
        for (int k = 0; ring && k < R; k++)
            for (int c = 0; c < R; c++) {
                char sfx[48];
                snprintf(sfx, sizeof sfx, ".grad.r%d.chunk%d", k, c);
                hyfi_reg(g, &b->arc[k * R + c], NULL,
                         chunk_lo(b->numel, R, c + 1) - chunk_lo(b->numel, R, c), sizeof(float),
                         hyfi_stage_rank(pl, k, b->stage), bname, sfx, 0, 1);
            }
        /* pack */
        for (int k = 0; b->nparams > 1 && k < R; k++)
            for (int j = 0, off = 0; j < b->nparams; off += (int)b->params[j]->numel, j++) {
                hyfi_tensor *p = b->params[j];
                hyfi_task_args a = {.u.slice = {.count = p->numel, .dst_off = (size_t)off}};
                snprintf(nm, sizeof nm, "%.30s.allreduce.pack.r%d", p->name, k);
                TASK(&hyfi_cl_copy_slice, nm, &a);
                hyfi_prog_buf(P, b->h[k], j ? STARPU_RW : STARPU_W);
                R(p->gh[k]);
                on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[b->stage]), prio);
            }
        if (emit_allreduce_one(g, P, bname, b->h, b->arc, b->numel, b->stage)) return -1;
        /* unpack */
        for (int k = 0; b->nparams > 1 && k < R; k++)
            for (int j = 0, off = 0; j < b->nparams; off += (int)b->params[j]->numel, j++) {
                hyfi_tensor *p = b->params[j];
                hyfi_task_args a = {.u.slice = {.count = p->numel, .src_off = (size_t)off}};
                snprintf(nm, sizeof nm, "%.30s.allreduce.unpack.r%d", p->name, k);
                TASK(&hyfi_cl_copy_slice, nm, &a);
                W(p->gh[k]), R(b->h[k]);
                on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[b->stage]), prio);
            }
    }
    return 0;
}

static int build_train(hyfi_graph *g, const int *first)
{
    const hyfi_plan *pl = g->pl;
    const int M = pl->nmb;
    emit_ctx ec = {.g = g, .P = &g->train_prog, .M = M};
    emit_ctx *e = &ec;
    if (emit_state_save(g, ec.P)) return -1;
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        memset(t->gw, 0, (size_t)t->nh);
        if (t->gpw) memset(t->gpw, 0, (size_t)pl->nstages * t->nh);
        if (t->tl) memset(t->tl->gw, 0, (size_t)M * pl->P);
        t->gwritten = 0;
    }
    memset(g->loss->gw, 1, (size_t)g->loss->nh);
    int rc = 0;
    for (int k = 0; k < pl->nevents && !rc; k++) {
        const hyfi_pipe_event *ev = &pl->events[k];
        const int s = ev->stage;
        ec.m = ev->mb;
        ec.rep = HYFI_REP(pl, ev->mb);
        ec.stage = s;
        ec.place = HYFI_PLACE(pl, ec.rep, pl->stage_place0[s]);
        ec.prio = clamp_prio(pl->nticks - ev->tick);
        /* 1F1B: forwards read the slot's token, backwards write it (commuting among
         * themselves), so forward m + inflight waits for backward m. */
        ec.token_mode = ev->backward ? (STARPU_RW | STARPU_COMMUTE) : STARPU_R;
        const int from = ec.P->n;
        if (!ev->backward) {
            rc = emit_stage_forward(e, first, 1);
            finish_tasks(e, from);
            continue;
        }
        /* Add the partial gradients that later stages summed for the stage's
         * tensors, latest stage first (the order the contributions would
         * have had without partials). */
        for (int i = 0; i < g->ntensors && !rc; i++) {
            hyfi_tensor *t = g->tensors[i];
            if (!t->gpart || t->stage != s) continue;
            for (int c = pl->nstages - 1; c > s && !rc; c--) {
                const size_t k = (size_t)c * t->nh + ev->mb;
                if (!t->gpart[k] || !t->gpw[k]) continue;
                char nm[64];
                snprintf(nm, sizeof nm, "%.40s.grad_from_stage%d", t->name, c & 0xffff);
                rc = emit_accumulate(e, t, t->gpart[k], nm);
            }
        }
        for (int i = first[s + 1] - 1; i >= first[s] && !rc; i--) {
            const node *nd = &g->nodes[i];
            const int tiled = hyfi_spatial_tiled(g, nd);
            /* Only ops whose output received a gradient propagate one. */
            if (!nd->out->requires_grad ||
                !(tiled ? nd->out->tl->gw[ev->mb * pl->P] : TGW(nd->out, ev->mb)))
                continue;
            rc = tiled ? hyfi_spatial_backward(e, nd) : emit_backward(e, nd);
        }
        /* Tiled tensors this stage gathered: their gradient back to the tiles. */
        for (int i = 0; i < g->ntensors && !rc; i++) {
            hyfi_tensor *t = g->tensors[i];
            if (t->tl && t->tl->full && t->stage == s) rc = hyfi_spatial_gather_back(e, t);
        }
        finish_tasks(e, from);
        if (rc || pl->trivial) continue;
        if (s < pl->K) rc = hyfi_spatial_release(e, s);
        /* Micro-batch m is done on stage s: release what the stage produced for it. */
        for (int i = 0; i < g->ntensors && !rc; i++) {
            hyfi_tensor *t = g->tensors[i];
            if (t->stage != s || t == g->loss || (t->kind != T_ACT && t->kind != T_SAVED))
                continue;
            t->released = 1;
            const int own = hyfi_handle_owner(g, t, ev->mb);
            rc = hyfi_emit_release(ec.P, t->h[ev->mb], own);
            if (!rc && t->gh) rc = hyfi_emit_release(ec.P, t->gh[ev->mb], own);
            for (int c = 0; t->gpart && c < pl->nstages && !rc; c++) {
                starpu_data_handle_t h = t->gpart[(size_t)c * t->nh + ev->mb];
                if (h) rc = hyfi_emit_release(ec.P, h, hyfi_stage_rank(pl, ec.rep, c));
            }
        }
    }
    if (rc) return rc;
    program *P = ec.P;
    if (hyfi_spatial_param_sums(e)) return -1;
    if (emit_state_combine(g, P) || emit_allreduce(g, P)) return -1;
    for (int k = 0; k < pl->nrep; k++)
        for (int i = 0; i < g->nparams; i++) {
            hyfi_tensor *p = g->params[i];
            if (!p->gwritten) continue; /* not on the loss's path: left alone, as PyTorch does */
            hyfi_task_args a = {.u.sgd = {.count = p->numel, .lr = g->train.lr,
                                          .momentum = g->train.momentum,
                                          .weight_decay = g->train.weight_decay}};
            char nm[128];
            if (pl->nrep > 1) snprintf(nm, sizeof nm, "%.40s.sgd.r%d", p->name, k);
            else snprintf(nm, sizeof nm, "%.50s.sgd", p->name);
            TASK(&hyfi_cl_sgd_update, nm, &a);
            RW(p->h[k]), RW(p->mh[k]), R(p->gh[k]);
            on_place(g, P, HYFI_PLACE(pl, k, pl->stage_place0[p->stage]), 0);
        }
    return emit_loss_bcast(g, P);
}

/* Forward-only programs: the forward events of the schedule. */
static int build_forward(hyfi_graph *g, program *P, const int *first, int training)
{
    const hyfi_plan *pl = g->pl;
    emit_ctx ec = {.g = g, .P = P, .M = pl->nmb};
    if (training && emit_state_save(g, P)) return -1;
    for (int k = 0; k < pl->nevents; k++) {
        const hyfi_pipe_event *ev = &pl->events[k];
        if (ev->backward) continue;
        ec.m = ev->mb;
        ec.rep = HYFI_REP(pl, ev->mb);
        ec.stage = ev->stage;
        ec.place = HYFI_PLACE(pl, ec.rep, pl->stage_place0[ev->stage]);
        const int from = P->n;
        if (emit_stage_forward(&ec, first, training)) return -1;
        finish_tasks(&ec, from);
    }
    if (training && emit_state_combine(g, P)) return -1;
    return emit_loss_bcast(g, P);
}

static int build_programs(hyfi_graph *g)
{
    int *first = stage_nodes(g);
    if (!first) return -1;
    int rc = build_train(g, first);
    if (!rc) rc = build_forward(g, &g->infer_prog, first, 0);
    if (!rc) rc = build_forward(g, &g->fwd_train_prog, first, 1);
    free(first);
    return rc;
}

hyfi_status hyfi_graph_compile(hyfi_graph *g, hyfi_tensor *loss, const hyfi_train_config *cfg)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_compile: graph is NULL");
    hyfi_status s = HYFI_OK;
    if (g->status != HYFI_OK)
        s = hyfi_fail(g->status, "hyfi_graph_compile: the graph has a builder error: %s",
                      g->error);
    else if (g->compiled)
        s = hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_graph_compile: already compiled");
    else if (!loss || loss->g != g || loss->producer < 0 ||
             g->nodes[loss->producer].op != OP_XENT)
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: the loss must be the output "
                                            "of hyfi_softmax_cross_entropy in this graph");
    else if (cfg && (!(cfg->lr > 0) || cfg->momentum < 0 || cfg->momentum >= 1 ||
                     cfg->weight_decay < 0))
        s = hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: lr %g must be > 0, "
                                            "momentum %g in [0, 1), weight decay %g >= 0",
                           cfg->lr, cfg->momentum, cfg->weight_decay);
    /* MPI: every rank learns every rank's outcome and compares the graph, the
     * plan and the settings, before any handle takes a StarPU-MPI tag (a rank
     * that stopped here alone, or built another task graph, would leave the
     * others waiting forever or exchanging the wrong data). */
    if (g->ctx->mpi && g->ctx->nranks > 1) {
        char own[512];
        snprintf(own, sizeof own, "%s", s != HYFI_OK ? hyfi_last_error() : "");
        s = hyfi_graph_agree(g, s, own, cfg ? cfg : &g->train);
    }
    if (s != HYFI_OK) return s;
    if (cfg) g->train = *cfg;
    g->loss = loss;
    s = hyfi_plan_build(g);
    if (s != HYFI_OK) return s;
    s = register_tensors(g);
    if (s != HYFI_OK) {
        hyfi_handles_free(g);
        hyfi_plan_free(g);
        return s;
    }
    if (hyfi_spatial_register(g)) {
        hyfi_handles_free(g);
        hyfi_plan_free(g);
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory registering the tiles");
    }
    if (build_programs(g)) {
        const int overflow =
            g->train_prog.overflow || g->infer_prog.overflow || g->fwd_train_prog.overflow;
        hyfi_programs_free(g);
        hyfi_handles_free(g);
        hyfi_plan_free(g);
        if (overflow)
            return hyfi_graph_fail(g, HYFI_ERR_UNSUPPORTED,
                                   "a task of this plan needs more than %d buffers; use fewer "
                                   "spatial parts or replicas",
                                   HYFI_MAX_TASK_BUFFERS);
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory building the task programs");
    }
    hyfi_plan_predict_comm(g);
    if (g->ctx->trace_dir) hyfi_trace_note_plan(g);
    g->compiled = 1;
    return HYFI_OK;
}
