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
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int prog_push(program *p, struct starpu_codelet *cl, const char *name,
                     const hyfi_task_args *args)
{
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        prog_task *t = realloc(p->t, (size_t)nc * sizeof *t);
        if (!t) return -1;
        p->t = t;
        p->cap = nc;
    }
    prog_task *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    t->cl = cl;
    t->args = *args;
    snprintf(t->name, sizeof t->name, "%s", name);
    return 0;
}

static void prog_buf(program *p, starpu_data_handle_t h, enum starpu_data_access_mode mode)
{
    prog_task *t = &p->t[p->n - 1];
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

static void unreg(starpu_data_handle_t *h)
{
    if (*h) {
        starpu_data_unregister(*h);
        *h = NULL;
    }
}

void hyfi_handles_free(hyfi_graph *g)
{
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        unreg(&t->h);
        if (t->gh != g->dloss) unreg(&t->gh);
        t->gh = NULL;
        unreg(&t->mh);
        if (t->host) starpu_free_noflag(t->host, t->numel * 4);
        if (t->ghost) starpu_free_noflag(t->ghost, t->numel * 4);
        if (t->mhost) starpu_free_noflag(t->mhost, t->numel * 4);
        t->host = t->ghost = t->mhost = NULL;
    }
    unreg(&g->dloss);
    if (g->dloss_host) starpu_free_noflag(g->dloss_host, sizeof(float));
    g->dloss_host = NULL;
}

static int host_alloc(float **p, size_t n)
{
    return starpu_malloc((void **)p, (n ? n : 1) * sizeof(float)) == 0 ? 0 : -1;
}

static void reg_home(starpu_data_handle_t *h, float *ptr, size_t n, size_t elem,
                     const char *name, const char *suffix)
{
    starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)ptr, (uint32_t)n, elem);
    char nm[HYFI_NAME_MAX + 16];
    snprintf(nm, sizeof nm, "%s%s", name, suffix);
    starpu_data_set_name(*h, nm);
}

static void reg_lazy(starpu_data_handle_t *h, size_t n, const char *name, const char *suffix)
{
    starpu_vector_data_register(h, -1, 0, (uint32_t)n, sizeof(float));
    char nm[HYFI_NAME_MAX + 16];
    snprintf(nm, sizeof nm, "%s%s", name, suffix);
    starpu_data_set_name(*h, nm);
}

/* Register every tensor; allocate and initialise what lives in host memory. */
static hyfi_status register_tensors(hyfi_graph *g)
{
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (t->numel > UINT32_MAX)
            return hyfi_graph_fail(g, HYFI_ERR_SHAPE, "tensor \"%s\" has %zu elements; at most "
                                                      "2^32-1 per tensor (use spatial "
                                                      "parallelism or a smaller batch)",
                                   t->name, t->numel);
        switch (t->kind) {
        case T_INPUT:
        case T_LABELS:
            if (host_alloc(&t->host, t->numel)) goto oom;
            memset(t->host, 0, t->numel * 4);
            reg_home(&t->h, t->host, t->numel, t->is_int ? sizeof(int32_t) : sizeof(float),
                     t->name, "");
            if (!t->is_int) reg_lazy(&t->gh, t->numel, t->name, ".grad");
            break;
        case T_PARAM:
            if (host_alloc(&t->host, t->numel) || host_alloc(&t->ghost, t->numel) ||
                host_alloc(&t->mhost, t->numel))
                goto oom;
            hyfi_param_init(t->host, t, g->seed);
            memset(t->ghost, 0, t->numel * 4);
            memset(t->mhost, 0, t->numel * 4);
            reg_home(&t->h, t->host, t->numel, sizeof(float), t->name, "");
            reg_home(&t->gh, t->ghost, t->numel, sizeof(float), t->name, ".grad");
            reg_home(&t->mh, t->mhost, t->numel, sizeof(float), t->name, ".momentum");
            break;
        case T_STATE:
            if (host_alloc(&t->host, t->numel)) goto oom;
            hyfi_param_init(t->host, t, g->seed);
            reg_home(&t->h, t->host, t->numel, sizeof(float), t->name, "");
            break;
        case T_ACT:
            reg_lazy(&t->h, t->numel, t->name, "");
            if (t != g->loss) reg_lazy(&t->gh, t->numel, t->name, ".grad");
            break;
        case T_SAVED:
            reg_lazy(&t->h, t->numel, t->name, "");
            break;
        }
    }
    if (host_alloc(&g->dloss_host, 1)) goto oom;
    g->dloss_host[0] = 1.0f;
    reg_home(&g->dloss, g->dloss_host, 1, sizeof(float), g->loss->name, ".grad");
    g->loss->gh = g->dloss;
    return HYFI_OK;
oom:
    return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of host memory registering the tensors "
                                              "(%d tensors); use a smaller batch or model",
                           g->ntensors);
}

#define TASK(prog, cl, nm, args)                                                            \
    do {                                                                                    \
        if (prog_push((prog), (cl), (nm), (args))) return -1;                              \
    } while (0)
#define R(h) prog_buf(P, (h), STARPU_R)
#define W(h) prog_buf(P, (h), STARPU_W)
#define RW(h) prog_buf(P, (h), STARPU_RW)
/* A gradient output: overwritten by its first writer, accumulated afterwards. */
#define GRAD_OUT(t) prog_buf(P, (t)->gh, (t)->gwritten ? STARPU_RW : STARPU_W)

static void task_name(char *out, size_t len, const node *nd, const char *pass)
{
    snprintf(out, len, "%s.%s", nd->name, pass);
}

static int emit_forward(hyfi_graph *g, program *P, const node *nd, int training)
{
    char nm[64];
    hyfi_task_args a = {0};
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    task_name(nm, sizeof nm, nd, "fwd");
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv = nd->a.conv;
        TASK(P, &hyfi_cl_conv2d_forward, nm, &a);
        W(y->h), R(x->h), R(nd->p[0]->h);
        if (nd->p[1]) R(nd->p[1]->h);
        break;
    case OP_BATCHNORM:
        a.u.bn = nd->a.bn;
        if (training) {
            TASK(P, &hyfi_cl_batchnorm_forward_train, nm, &a);
            W(y->h), W(nd->s[0]->h), W(nd->s[1]->h), RW(nd->p[2]->h), RW(nd->p[3]->h);
            R(x->h), R(nd->p[0]->h), R(nd->p[1]->h);
        } else {
            TASK(P, &hyfi_cl_batchnorm_forward_eval, nm, &a);
            W(y->h), R(x->h), R(nd->p[0]->h), R(nd->p[1]->h), R(nd->p[2]->h), R(nd->p[3]->h);
        }
        break;
    case OP_RELU:
        a.u.elt.count = y->numel;
        TASK(P, &hyfi_cl_relu_forward, nm, &a);
        W(y->h), R(x->h);
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        a.u.pool = nd->a.pool;
        TASK(P, nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_forward
                : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_forward
                                       : &hyfi_cl_gap_forward,
             nm, &a);
        W(y->h), R(x->h);
        break;
    case OP_ADD:
        a.u.elt.count = y->numel;
        TASK(P, &hyfi_cl_add_forward, nm, &a);
        W(y->h), R(nd->in[0]->h), R(nd->in[1]->h);
        break;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            a.u.concat = (hyfi_concat_args){.n = y->dims[0], .hw = y->dims[2] * y->dims[3],
                                            .c_part = xi->dims[1], .c_offset = off,
                                            .c_total = y->dims[1]};
            snprintf(nm, sizeof nm, "%s.fwd%d", nd->name, i);
            TASK(P, &hyfi_cl_concat_forward, nm, &a);
            prog_buf(P, y->h, i == 0 ? STARPU_W : STARPU_RW);
            R(xi->h);
            off += xi->dims[1];
        }
        break;
    }
    case OP_FC:
        a.u.fc = nd->a.fc;
        TASK(P, &hyfi_cl_fc_forward, nm, &a);
        W(y->h), R(x->h), R(nd->p[0]->h);
        if (nd->p[1]) R(nd->p[1]->h);
        break;
    case OP_XENT:
        a.u.xent = nd->a.xent;
        TASK(P, &hyfi_cl_xent_forward, nm, &a);
        W(y->h), W(nd->s[0]->h), R(x->h), R(nd->in[1]->h);
        break;
    case OP_COUNT:
        break;
    }
    return 0;
}

/* dst += src (or dst = src for the first writer) */
static int emit_accumulate(program *P, hyfi_tensor *dst, starpu_data_handle_t src,
                           const char *name)
{
    hyfi_task_args a = {.acc = dst->gwritten, .u.elt.count = dst->numel};
    TASK(P, &hyfi_cl_accumulate, name, &a);
    GRAD_OUT(dst), R(src);
    dst->gwritten = 1;
    return 0;
}

static int emit_fill_zero(program *P, hyfi_tensor *t, const char *name)
{
    hyfi_task_args a = {.u.elt = {.count = t->numel, .value = 0.0f}};
    TASK(P, &hyfi_cl_fill, name, &a);
    W(t->gh);
    t->gwritten = 1;
    return 0;
}

/* Backward of an op with a weight and an optional bias (conv2d, fc): the data
 * gradient (skipped when x needs none) and the parameter gradients. */
static int emit_weighted_backward(program *P, const node *nd, hyfi_task_args *a,
                                  struct starpu_codelet *cl_data,
                                  struct starpu_codelet *cl_weight)
{
    char nm[64];
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    if (x->requires_grad) {
        task_name(nm, sizeof nm, nd, "bwd_data");
        a->acc = x->gwritten;
        TASK(P, cl_data, nm, a);
        GRAD_OUT(x), R(y->gh), R(nd->p[0]->h);
        x->gwritten = 1;
    }
    task_name(nm, sizeof nm, nd, "bwd_weight");
    a->acc = 0;
    TASK(P, cl_weight, nm, a);
    W(nd->p[0]->gh);
    if (nd->p[1]) W(nd->p[1]->gh);
    R(y->gh), R(x->h);
    nd->p[0]->gwritten = 1;
    if (nd->p[1]) nd->p[1]->gwritten = 1;
    return 0;
}

static int emit_backward(program *P, const node *nd)
{
    char nm[64];
    hyfi_task_args a = {0};
    hyfi_tensor *y = nd->out, *x = nd->in[0];
    switch (nd->op) {
    case OP_CONV2D:
        a.u.conv = nd->a.conv;
        return emit_weighted_backward(P, nd, &a, &hyfi_cl_conv2d_backward_data,
                                      &hyfi_cl_conv2d_backward_weight);
    case OP_BATCHNORM:
        /* One kernel writes dx, dgamma and dbeta with one acc flag: when dx
         * accumulates, the parameter gradients are zeroed first. */
        a.u.bn = nd->a.bn;
        a.acc = x->gwritten;
        if (a.acc) {
            task_name(nm, sizeof nm, nd, "zero_dgamma");
            if (emit_fill_zero(P, nd->p[0], nm)) return -1;
            task_name(nm, sizeof nm, nd, "zero_dbeta");
            if (emit_fill_zero(P, nd->p[1], nm)) return -1;
        }
        task_name(nm, sizeof nm, nd, "bwd");
        TASK(P, &hyfi_cl_batchnorm_backward, nm, &a);
        GRAD_OUT(x);
        prog_buf(P, nd->p[0]->gh, a.acc ? STARPU_RW : STARPU_W);
        prog_buf(P, nd->p[1]->gh, a.acc ? STARPU_RW : STARPU_W);
        R(y->gh), R(x->h), R(nd->p[0]->h), R(nd->s[0]->h), R(nd->s[1]->h);
        x->gwritten = nd->p[0]->gwritten = nd->p[1]->gwritten = 1;
        break;
    case OP_RELU:
        if (!x->requires_grad) break;
        a.u.elt.count = x->numel;
        a.acc = x->gwritten;
        task_name(nm, sizeof nm, nd, "bwd");
        TASK(P, &hyfi_cl_relu_backward, nm, &a);
        GRAD_OUT(x), R(y->gh), R(y->h);
        x->gwritten = 1;
        break;
    case OP_MAXPOOL:
    case OP_AVGPOOL:
    case OP_GAP:
        if (!x->requires_grad) break;
        a.u.pool = nd->a.pool;
        a.acc = x->gwritten;
        task_name(nm, sizeof nm, nd, "bwd");
        TASK(P, nd->op == OP_MAXPOOL   ? &hyfi_cl_maxpool_backward
                : nd->op == OP_AVGPOOL ? &hyfi_cl_avgpool_backward
                                       : &hyfi_cl_gap_backward,
             nm, &a);
        GRAD_OUT(x), R(y->gh);
        if (nd->op == OP_MAXPOOL) R(x->h);
        x->gwritten = 1;
        break;
    case OP_ADD:
        for (int i = 0; i < 2; i++) {
            if (!nd->in[i]->requires_grad) continue;
            snprintf(nm, sizeof nm, "%s.bwd%d", nd->name, i);
            if (emit_accumulate(P, nd->in[i], y->gh, nm)) return -1;
        }
        break;
    case OP_CONCAT: {
        int off = 0;
        for (int i = 0; i < nd->nin; i++) {
            hyfi_tensor *xi = nd->in[i];
            if (xi->requires_grad) {
                a.u.concat = (hyfi_concat_args){.n = y->dims[0], .hw = y->dims[2] * y->dims[3],
                                                .c_part = xi->dims[1], .c_offset = off,
                                                .c_total = y->dims[1]};
                a.acc = xi->gwritten;
                snprintf(nm, sizeof nm, "%s.bwd%d", nd->name, i);
                TASK(P, &hyfi_cl_concat_backward, nm, &a);
                GRAD_OUT(xi), R(y->gh);
                xi->gwritten = 1;
            }
            off += xi->dims[1];
        }
        break;
    }
    case OP_FC:
        a.u.fc = nd->a.fc;
        return emit_weighted_backward(P, nd, &a, &hyfi_cl_fc_backward_data,
                                      &hyfi_cl_fc_backward_weight);
    case OP_XENT:
        a.u.xent = nd->a.xent;
        a.acc = x->gwritten;
        task_name(nm, sizeof nm, nd, "bwd");
        TASK(P, &hyfi_cl_xent_backward, nm, &a);
        GRAD_OUT(x), R(nd->s[0]->h), R(nd->in[1]->h), R(y->gh);
        x->gwritten = 1;
        break;
    case OP_COUNT:
        break;
    }
    return 0;
}

static int build_programs(hyfi_graph *g)
{
    program *P = &g->train_prog;
    for (int i = 0; i < g->nnodes; i++)
        if (emit_forward(g, P, &g->nodes[i], 1)) return -1;
    for (int i = 0; i < g->ntensors; i++) g->tensors[i]->gwritten = 0;
    g->loss->gwritten = 1;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const node *nd = &g->nodes[i];
        /* Only ops whose output received a gradient propagate one. */
        if (!nd->out->requires_grad || !nd->out->gwritten) continue;
        if (emit_backward(P, nd)) return -1;
    }
    for (int i = 0; i < g->nparams; i++) {
        hyfi_tensor *p = g->params[i];
        if (!p->gwritten) continue; /* not on the loss's path: left alone, as PyTorch does */
        hyfi_task_args a = {.u.sgd = {.count = p->numel, .lr = g->train.lr,
                                      .momentum = g->train.momentum,
                                      .weight_decay = g->train.weight_decay}};
        char nm[64];
        snprintf(nm, sizeof nm, "%.50s.sgd", p->name);
        TASK(P, &hyfi_cl_sgd_update, nm, &a);
        RW(p->h), RW(p->mh), R(p->gh);
    }
    P = &g->infer_prog;
    for (int i = 0; i < g->nnodes; i++)
        if (emit_forward(g, P, &g->nodes[i], 0)) return -1;
    P = &g->fwd_train_prog;
    for (int i = 0; i < g->nnodes; i++)
        if (emit_forward(g, P, &g->nodes[i], 1)) return -1;
    return 0;
}

hyfi_status hyfi_graph_compile(hyfi_graph *g, hyfi_tensor *loss, const hyfi_train_config *cfg)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_compile: graph is NULL");
    if (g->status != HYFI_OK)
        return hyfi_fail(g->status, "hyfi_graph_compile: the graph has a builder error: %s",
                         g->error);
    if (g->compiled)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_graph_compile: already compiled");
    if (!loss || loss->g != g || loss->producer < 0 ||
        g->nodes[loss->producer].op != OP_XENT)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: the loss must be the output "
                                               "of hyfi_softmax_cross_entropy in this graph");
    if (cfg) {
        if (!(cfg->lr > 0) || cfg->momentum < 0 || cfg->momentum >= 1 ||
            cfg->weight_decay < 0)
            return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_graph_compile: lr %g must be > 0, "
                                                   "momentum %g in [0, 1), weight decay %g >= 0",
                                  cfg->lr, cfg->momentum, cfg->weight_decay);
        g->train = *cfg;
    }
    g->loss = loss;
    hyfi_status s = register_tensors(g);
    if (s != HYFI_OK) {
        hyfi_handles_free(g);
        return s;
    }
    if (build_programs(g)) {
        hyfi_programs_free(g);
        hyfi_handles_free(g);
        return hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory building the task programs");
    }
    g->compiled = 1;
    return HYFI_OK;
}
