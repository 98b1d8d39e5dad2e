/* Graph builders: shape inference and validation for every op, parameter and
 * state tensors, unique names. Builders never abort: an error is recorded on
 * the graph (sticky) and the builder returns NULL; a NULL input propagates. */
#include "opdef.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


hyfi_train_config hyfi_train_config_default(void)
{
    return (hyfi_train_config){.lr = 0.01f};
}

hyfi_status hyfi_graph_create(hyfi_ctx *ctx, uint64_t seed, hyfi_graph **out)
{
    if (!out) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_create: graph pointer is NULL");
    *out = NULL;
    if (!ctx) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_create: context is NULL; create one "
                                             "with hyfi_ctx_create");
    hyfi_graph *g = calloc(1, sizeof *g);
    if (!g) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_graph_create: out of memory");
    g->ctx = ctx;
    g->serial = ctx->ngraphs++;
    g->seed = seed;
    g->train = hyfi_train_config_default(); /* hyfi_graph_compile's cfg NULL */
    *out = g;
    return HYFI_OK;
}

void hyfi_tensor_free(hyfi_tensor *t)
{
    if (!t) return;
    free(t->name);
    free(t);
}

void hyfi_graph_destroy(hyfi_graph *g)
{
    if (!g) return;
    if (g->cc) starpu_task_wait_for_all();
    hyfi_compiled_free(g);
    for (int i = 0; i < g->nnodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].in);
    }
    for (int i = 0; i < g->ntensors; i++) hyfi_tensor_free(g->tensors[i]);
    free(g->nodes);
    free(g->tensors);
    free(g->params);
    for (int i = 0; i < g->nlayers; i++) free(g->layer_names[i]);
    free(g->layer_names);
    free(g->plan_balance);
    free(g);
}

hyfi_status hyfi_graph_status(const hyfi_graph *g) { return g ? g->status : HYFI_ERR_ARG; }

const char *hyfi_graph_error(const hyfi_graph *g)
{
    if (!g) return "graph is NULL";
    return g->error;
}

/* ------------------------------------------------------------ tensors */

hyfi_tensor *hyfi_tensor_find(hyfi_graph *g, const char *name)
{
    if (!g || !name) return NULL;
    for (int i = 0; i < g->ntensors; i++)
        if (strcmp(g->tensors[i]->name, name) == 0) return g->tensors[i];
    return NULL;
}

const char *hyfi_tensor_name(const hyfi_tensor *t) { return t ? t->name : NULL; }

void hyfi_tensor_shape(const hyfi_tensor *t, int dims[4])
{
    for (int i = 0; i < 4; i++) dims[i] = t ? t->dims[i] : 0;
}

size_t hyfi_tensor_numel(const hyfi_tensor *t) { return t ? t->numel : 0; }

bool hyfi_tensor_is_param(const hyfi_tensor *t) { return t && t->kind == T_PARAM; }

int hyfi_param_count(const hyfi_graph *g) { return g ? g->nparams : 0; }

hyfi_tensor *hyfi_param(hyfi_graph *g, int i)
{
    return (g && i >= 0 && i < g->nparams) ? g->params[i] : NULL;
}

size_t hyfi_param_numel(const hyfi_graph *g)
{
    size_t n = 0;
    for (int i = 0; g && i < g->nparams; i++) n += g->params[i]->numel;
    return n;
}

static int grow(void **arr, int *cap, int need, size_t elem)
{
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* A builder may run only on a live, uncompiled, error-free graph. */
static int builder_ok(hyfi_graph *g, const char *who)
{
    if (!g) {
        hyfi_fail(HYFI_ERR_ARG, "%s: graph is NULL", who);
        return 0;
    }
    if (g->status != HYFI_OK) return 0;
    if (g->cc) {
        hyfi_graph_fail(g, HYFI_ERR_STATE, "%s: the graph is compiled; build every op before "
                                           "hyfi_graph_compile", who);
        return 0;
    }
    return 1;
}

static hyfi_tensor *new_tensor(hyfi_graph *g, const char *name, tensor_kind kind, int n, int c,
                               int h, int w)
{
    if (hyfi_tensor_find(g, name)) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "tensor name \"%s\" is used twice; give every op a "
                                         "unique name", name);
        return NULL;
    }
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "tensor \"%s\" would have shape (%d,%d,%d,%d); every "
                                           "dimension must be positive", name, n, c, h, w);
        return NULL;
    }
    if (grow((void **)&g->tensors, &g->cap_tensors, g->ntensors + 1, sizeof *g->tensors)) {
        hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory adding tensor \"%s\"", name);
        return NULL;
    }
    hyfi_tensor *t = calloc(1, sizeof *t);
    char *nm = strdup(name);
    if (!t || !nm) {
        free(t);
        free(nm);
        hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory adding tensor \"%s\"", name);
        return NULL;
    }
    t->g = g;
    t->id = g->ntensors;
    t->name = nm;
    t->dims[0] = n;
    t->dims[1] = c;
    t->dims[2] = h;
    t->dims[3] = w;
    t->numel = (size_t)n * (size_t)c * (size_t)h * (size_t)w;
    t->kind = kind;
    t->producer = -1;
    t->batched = kind == T_INPUT || kind == T_LABELS || kind == T_ACT;
    g->tensors[g->ntensors++] = t;
    return t;
}

static hyfi_tensor *new_param(hyfi_graph *g, const char *op, const char *suffix,
                              tensor_kind kind, init_kind init, int fan_in, int n, int c, int h,
                              int w)
{
    char name[HYFI_NAME_MAX + 32];
    snprintf(name, sizeof name, "%s.%s", op, suffix);
    hyfi_tensor *t = new_tensor(g, name, kind, n, c, h, w);
    if (!t) return NULL;
    t->init = init;
    t->fan_in = fan_in;
    if (kind == T_PARAM) {
        if (grow((void **)&g->params, &g->cap_params, g->nparams + 1, sizeof *g->params)) {
            hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory adding parameter \"%s\"", name);
            return NULL;
        }
        g->params[g->nparams++] = t;
        t->requires_grad = 1;
    }
    return t;
}

/* Name an op: the user's, or "<op><index>". Fails when too long. */
static int op_name(hyfi_graph *g, const char *name, op_kind op, char out[HYFI_NAME_MAX])
{
    if (name) {
        if (strlen(name) >= HYFI_NAME_MAX - 1 || !*name) {
            hyfi_graph_fail(g, HYFI_ERR_ARG, "op name \"%.40s...\" is empty or longer than %d "
                                             "characters", name, HYFI_NAME_MAX - 2);
            return -1;
        }
        snprintf(out, HYFI_NAME_MAX, "%s", name);
    } else {
        snprintf(out, HYFI_NAME_MAX, "%s%d", hyfi_op_names[op], g->nnodes);
    }
    return 0;
}

static int check_input(hyfi_graph *g, const char *who, const char *name, const hyfi_tensor *x)
{
    if (!x) {
        /* A NULL input follows an earlier error; report only if there was none. */
        if (g->status == HYFI_OK)
            hyfi_graph_fail(g, HYFI_ERR_ARG, "%s \"%s\": input tensor is NULL", who, name);
        return -1;
    }
    if (x->g != g) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "%s \"%s\": input \"%s\" belongs to another graph",
                        who, name, x->name);
        return -1;
    }
    if (x->is_int) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "%s \"%s\": input \"%s\" is a label tensor; labels only "
                                         "feed hyfi_softmax_cross_entropy", who, name, x->name);
        return -1;
    }
    if (x->kind == T_PARAM || x->kind == T_STATE || x->kind == T_SAVED) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "%s \"%s\": input \"%s\" is a parameter or state tensor; "
                                         "ops take activations or inputs", who, name, x->name);
        return -1;
    }
    return 0;
}

/* Append a node whose output is a new activation named like the op. */
static node *add_node(hyfi_graph *g, op_kind op, const char *name, int nin,
                      hyfi_tensor *const *in, int n, int c, int h, int w)
{
    if (grow((void **)&g->nodes, &g->cap_nodes, g->nnodes + 1, sizeof *g->nodes)) {
        hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory adding op \"%s\"", name);
        return NULL;
    }
    hyfi_tensor *out = new_tensor(g, name, T_ACT, n, c, h, w);
    if (!out) return NULL;
    node *nd = &g->nodes[g->nnodes];
    memset(nd, 0, sizeof *nd);
    nd->op = op;
    nd->layer = g->nlayers - 1;
    nd->name = strdup(name);
    nd->in = calloc((size_t)nin, sizeof *nd->in);
    if (!nd->name || !nd->in) {
        free(nd->name);
        free(nd->in);
        hyfi_graph_fail(g, HYFI_ERR_NOMEM, "out of memory adding op \"%s\"", name);
        return NULL;
    }
    nd->nin = nin;
    for (int i = 0; i < nin; i++) {
        nd->in[i] = in[i];
        if (in[i]->requires_grad) out->requires_grad = 1;
    }
    nd->out = out;
    out->producer = g->nnodes;
    g->nnodes++;
    return nd;
}

/* ------------------------------------------------------------ builders */

hyfi_tensor *hyfi_input(hyfi_graph *g, const char *name, int n, int c, int h, int w)
{
    if (!builder_ok(g, "hyfi_input")) return NULL;
    char nm[HYFI_NAME_MAX];
    if (!name) snprintf(nm, sizeof nm, "input%d", g->ntensors);
    else if (op_name(g, name, OP_COUNT - 1, nm)) return NULL;
    return new_tensor(g, nm, T_INPUT, n, c, h, w);
}

hyfi_tensor *hyfi_labels(hyfi_graph *g, const char *name, int n)
{
    if (!builder_ok(g, "hyfi_labels")) return NULL;
    char nm[HYFI_NAME_MAX];
    if (!name) snprintf(nm, sizeof nm, "labels%d", g->ntensors);
    else if (op_name(g, name, OP_COUNT - 1, nm)) return NULL;
    hyfi_tensor *t = new_tensor(g, nm, T_LABELS, n, 1, 1, 1);
    if (t) t->is_int = 1;
    return t;
}

hyfi_tensor *hyfi_conv2d(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_conv2d_params p)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_conv2d") || op_name(g, name, OP_CONV2D, nm) ||
        check_input(g, "conv2d", nm, x))
        return NULL;
    int sh = p.stride_h ? p.stride_h : 1, sw = p.stride_w ? p.stride_w : 1;
    int groups = p.groups ? p.groups : 1;
    int cin = x->dims[1];
    if (p.out_channels <= 0 || p.kernel_h <= 0 || p.kernel_w <= 0 || sh < 0 || sw < 0 ||
        p.pad_h < 0 || p.pad_w < 0 || groups < 0) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "conv2d \"%s\": out_channels %d, kernel %dx%d, stride "
                                         "%dx%d, padding %dx%d, groups %d: channels and kernel "
                                         "must be positive, the rest non-negative",
                        nm, p.out_channels, p.kernel_h, p.kernel_w, sh, sw, p.pad_h, p.pad_w,
                        groups);
        return NULL;
    }
    if (cin % groups || p.out_channels % groups) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "conv2d \"%s\": groups %d must divide both the input "
                                           "channels (%d) and out_channels (%d)",
                        nm, groups, cin, p.out_channels);
        return NULL;
    }
    if (p.pad_h >= p.kernel_h || p.pad_w >= p.kernel_w) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "conv2d \"%s\": padding %dx%d must be smaller than "
                                           "the kernel %dx%d", nm, p.pad_h, p.pad_w, p.kernel_h,
                        p.kernel_w);
        return NULL;
    }
    int ho = hyfi_conv_out_size(x->dims[2], p.kernel_h, sh, p.pad_h);
    int wo = hyfi_conv_out_size(x->dims[3], p.kernel_w, sw, p.pad_w);
    if (ho <= 0 || wo <= 0) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "conv2d \"%s\": a %dx%d kernel with padding %dx%d "
                                           "does not fit the %dx%d input; use a smaller kernel or "
                                           "a larger image", nm, p.kernel_h, p.kernel_w, p.pad_h,
                        p.pad_w, x->dims[2], x->dims[3]);
        return NULL;
    }
    int fan_in = cin / groups * p.kernel_h * p.kernel_w;
    hyfi_tensor *w = new_param(g, nm, "weight", T_PARAM, INIT_HE_NORMAL, fan_in, p.out_channels,
                               cin / groups, p.kernel_h, p.kernel_w);
    hyfi_tensor *b = NULL;
    if (w && p.bias) b = new_param(g, nm, "bias", T_PARAM, INIT_ZERO, fan_in, p.out_channels, 1, 1, 1);
    if (!w || (p.bias && !b)) return NULL;
    node *nd = add_node(g, OP_CONV2D, nm, 1, &x, x->dims[0], p.out_channels, ho, wo);
    if (!nd) return NULL;
    nd->p[0] = w;
    nd->p[1] = b;
    nd->a.conv = (hyfi_conv2d_args){.n = x->dims[0], .c_in = cin, .h = x->dims[2],
                                    .w = x->dims[3], .c_out = p.out_channels, .ho = ho, .wo = wo,
                                    .kh = p.kernel_h, .kw = p.kernel_w, .sh = sh, .sw = sw,
                                    .ph = p.pad_h, .pw = p.pad_w, .groups = groups,
                                    .has_bias = b != NULL};
    nd->out->requires_grad = 1;
    return nd->out;
}

hyfi_tensor *hyfi_batchnorm(hyfi_graph *g, const char *name, hyfi_tensor *x,
                            hyfi_batchnorm_params p)
{
    const float momentum = p.momentum, eps = p.eps;
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_batchnorm") || op_name(g, name, OP_BATCHNORM, nm) ||
        check_input(g, "batchnorm", nm, x))
        return NULL;
    if (momentum > 1.0f || eps > 1.0f) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "batchnorm \"%s\": momentum %g and eps %g must be in "
                                         "[0, 1] (0 picks 0.1 and 1e-5)", nm, momentum, eps);
        return NULL;
    }
    int c = x->dims[1];
    hyfi_tensor *ga = new_param(g, nm, "gamma", T_PARAM, INIT_ONE, 1, c, 1, 1, 1);
    hyfi_tensor *be = ga ? new_param(g, nm, "beta", T_PARAM, INIT_ZERO, 1, c, 1, 1, 1) : NULL;
    hyfi_tensor *rm = be ? new_param(g, nm, "running_mean", T_STATE, INIT_ZERO, 1, c, 1, 1, 1) : NULL;
    hyfi_tensor *rv = rm ? new_param(g, nm, "running_var", T_STATE, INIT_ONE, 1, c, 1, 1, 1) : NULL;
    hyfi_tensor *sm = rv ? new_param(g, nm, "batch_mean", T_SAVED, INIT_ZERO, 1, c, 1, 1, 1) : NULL;
    hyfi_tensor *sv = sm ? new_param(g, nm, "batch_var", T_SAVED, INIT_ZERO, 1, c, 1, 1, 1) : NULL;
    if (!sv) return NULL;
    node *nd = add_node(g, OP_BATCHNORM, nm, 1, &x, x->dims[0], c, x->dims[2], x->dims[3]);
    if (!nd) return NULL;
    nd->p[0] = ga;
    nd->p[1] = be;
    nd->p[2] = rm;
    nd->p[3] = rv;
    nd->s[0] = sm;
    nd->s[1] = sv;
    nd->a.bn = (hyfi_batchnorm_args){.n = x->dims[0], .c = c, .h = x->dims[2], .w = x->dims[3],
                                     .eps = eps > 0 ? eps : 1e-5f,
                                     .momentum = momentum > 0 ? momentum : 0.1f};
    nd->out->requires_grad = 1;
    return nd->out;
}

hyfi_tensor *hyfi_relu(hyfi_graph *g, const char *name, hyfi_tensor *x)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_relu") || op_name(g, name, OP_RELU, nm) ||
        check_input(g, "relu", nm, x))
        return NULL;
    node *nd = add_node(g, OP_RELU, nm, 1, &x, x->dims[0], x->dims[1], x->dims[2], x->dims[3]);
    return nd ? nd->out : NULL;
}

static hyfi_tensor *pool(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_pool_params p,
                         op_kind op, const char *who)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, who) || op_name(g, name, op, nm) || check_input(g, who, nm, x))
        return NULL;
    int sh = p.stride_h ? p.stride_h : p.kernel_h, sw = p.stride_w ? p.stride_w : p.kernel_w;
    if (p.kernel_h <= 0 || p.kernel_w <= 0 || sh <= 0 || sw <= 0 || p.pad_h < 0 ||
        p.pad_w < 0) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "%s \"%s\": kernel %dx%d and stride %dx%d must be "
                                         "positive, padding %dx%d non-negative",
                        who, nm, p.kernel_h, p.kernel_w, sh, sw, p.pad_h, p.pad_w);
        return NULL;
    }
    if (2 * p.pad_h > p.kernel_h || 2 * p.pad_w > p.kernel_w) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "%s \"%s\": padding %dx%d must be at most half the "
                                           "kernel %dx%d", who, nm, p.pad_h, p.pad_w, p.kernel_h,
                        p.kernel_w);
        return NULL;
    }
    int ho = hyfi_conv_out_size(x->dims[2], p.kernel_h, sh, p.pad_h);
    int wo = hyfi_conv_out_size(x->dims[3], p.kernel_w, sw, p.pad_w);
    if (ho <= 0 || wo <= 0) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "%s \"%s\": a %dx%d window does not fit the %dx%d "
                                           "input", who, nm, p.kernel_h, p.kernel_w, x->dims[2],
                        x->dims[3]);
        return NULL;
    }
    node *nd = add_node(g, op, nm, 1, &x, x->dims[0], x->dims[1], ho, wo);
    if (!nd) return NULL;
    nd->a.pool = (hyfi_pool_args){.n = x->dims[0], .c = x->dims[1], .h = x->dims[2],
                                  .w = x->dims[3], .ho = ho, .wo = wo, .kh = p.kernel_h,
                                  .kw = p.kernel_w, .sh = sh, .sw = sw, .ph = p.pad_h,
                                  .pw = p.pad_w, .count_include_pad = p.count_include_pad};
    return nd->out;
}

hyfi_tensor *hyfi_maxpool(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_pool_params p)
{
    return pool(g, name, x, p, OP_MAXPOOL, "maxpool");
}

hyfi_tensor *hyfi_avgpool(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_pool_params p)
{
    return pool(g, name, x, p, OP_AVGPOOL, "avgpool");
}

hyfi_tensor *hyfi_global_avgpool(hyfi_graph *g, const char *name, hyfi_tensor *x)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_global_avgpool") || op_name(g, name, OP_GAP, nm) ||
        check_input(g, "global_avgpool", nm, x))
        return NULL;
    node *nd = add_node(g, OP_GAP, nm, 1, &x, x->dims[0], x->dims[1], 1, 1);
    if (!nd) return NULL;
    nd->a.pool = (hyfi_pool_args){.n = x->dims[0], .c = x->dims[1], .h = x->dims[2],
                                  .w = x->dims[3], .ho = 1, .wo = 1, .kh = x->dims[2],
                                  .kw = x->dims[3], .sh = 1, .sw = 1};
    return nd->out;
}

hyfi_tensor *hyfi_add(hyfi_graph *g, const char *name, hyfi_tensor *a, hyfi_tensor *b)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_add") || op_name(g, name, OP_ADD, nm) ||
        check_input(g, "add", nm, a) || check_input(g, "add", nm, b))
        return NULL;
    if (memcmp(a->dims, b->dims, sizeof a->dims) != 0) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "add \"%s\": \"%s\" is (%d,%d,%d,%d) but \"%s\" is "
                                           "(%d,%d,%d,%d); shapes must be equal (use a 1x1 conv "
                                           "shortcut to match channels and stride)", nm, a->name,
                        a->dims[0], a->dims[1], a->dims[2], a->dims[3], b->name, b->dims[0],
                        b->dims[1], b->dims[2], b->dims[3]);
        return NULL;
    }
    hyfi_tensor *in[2] = {a, b};
    node *nd = add_node(g, OP_ADD, nm, 2, in, a->dims[0], a->dims[1], a->dims[2], a->dims[3]);
    return nd ? nd->out : NULL;
}

hyfi_tensor *hyfi_concat(hyfi_graph *g, const char *name, hyfi_tensor *const *xs, int count)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_concat") || op_name(g, name, OP_CONCAT, nm)) return NULL;
    if (count < 1 || !xs) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "concat \"%s\": needs at least one input (count %d)", nm,
                        count);
        return NULL;
    }
    if (count > HYFI_OP_MAX_IN) { /* an op's view holds at most this many inputs */
        hyfi_graph_fail(g, HYFI_ERR_UNSUPPORTED, "concat \"%s\": %d inputs, at most %d; "
                                                 "concatenate in two steps", nm, count,
                        HYFI_OP_MAX_IN);
        return NULL;
    }
    int c = 0;
    for (int i = 0; i < count; i++) {
        if (check_input(g, "concat", nm, xs[i])) return NULL;
        if (xs[i]->dims[0] != xs[0]->dims[0] || xs[i]->dims[2] != xs[0]->dims[2] ||
            xs[i]->dims[3] != xs[0]->dims[3]) {
            hyfi_graph_fail(g, HYFI_ERR_SHAPE, "concat \"%s\": input %d \"%s\" is %dx%d with "
                                               "batch %d, input 0 is %dx%d with batch %d; "
                                               "batch and spatial sizes must be equal", nm, i,
                            xs[i]->name, xs[i]->dims[2], xs[i]->dims[3], xs[i]->dims[0],
                            xs[0]->dims[2], xs[0]->dims[3], xs[0]->dims[0]);
            return NULL;
        }
        c += xs[i]->dims[1];
    }
    node *nd = add_node(g, OP_CONCAT, nm, count, xs, xs[0]->dims[0], c, xs[0]->dims[2],
                        xs[0]->dims[3]);
    return nd ? nd->out : NULL;
}

hyfi_tensor *hyfi_fc(hyfi_graph *g, const char *name, hyfi_tensor *x, hyfi_fc_params p)
{
    const int out_features = p.out_features;
    const bool bias = p.bias;
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_fc") || op_name(g, name, OP_FC, nm) || check_input(g, "fc", nm, x))
        return NULL;
    if (out_features <= 0) {
        hyfi_graph_fail(g, HYFI_ERR_ARG, "fc \"%s\": out_features %d must be positive", nm,
                        out_features);
        return NULL;
    }
    size_t in64 = x->numel / (size_t)x->dims[0];
    if (in64 > (size_t)1 << 30) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "fc \"%s\": %zu input features is too many; pool "
                                           "first (hyfi_global_avgpool)", nm, in64);
        return NULL;
    }
    int in = (int)in64;
    hyfi_tensor *w = new_param(g, nm, "weight", T_PARAM, INIT_UNIFORM, in, out_features, in, 1, 1);
    hyfi_tensor *b = NULL;
    if (w && bias) b = new_param(g, nm, "bias", T_PARAM, INIT_UNIFORM, in, out_features, 1, 1, 1);
    if (!w || (bias && !b)) return NULL;
    node *nd = add_node(g, OP_FC, nm, 1, &x, x->dims[0], out_features, 1, 1);
    if (!nd) return NULL;
    nd->p[0] = w;
    nd->p[1] = b;
    nd->a.fc = (hyfi_fc_args){.n = x->dims[0], .in = in, .out = out_features, .has_bias = bias};
    nd->out->requires_grad = 1;
    return nd->out;
}

hyfi_tensor *hyfi_softmax_cross_entropy(hyfi_graph *g, const char *name, hyfi_tensor *logits,
                                        hyfi_tensor *labels)
{
    char nm[HYFI_NAME_MAX];
    if (!builder_ok(g, "hyfi_softmax_cross_entropy") || op_name(g, name, OP_XENT, nm) ||
        check_input(g, "softmax_cross_entropy", nm, logits))
        return NULL;
    if (!labels || labels->g != g || !labels->is_int) {
        if (g->status == HYFI_OK)
            hyfi_graph_fail(g, HYFI_ERR_ARG, "softmax_cross_entropy \"%s\": the labels must be a "
                                             "tensor made by hyfi_labels", nm);
        return NULL;
    }
    if (labels->dims[0] != logits->dims[0]) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "softmax_cross_entropy \"%s\": %d labels for a batch "
                                           "of %d logits; use one label per image", nm,
                        labels->dims[0], logits->dims[0]);
        return NULL;
    }
    if (logits->dims[2] != 1 || logits->dims[3] != 1) {
        hyfi_graph_fail(g, HYFI_ERR_SHAPE, "softmax_cross_entropy \"%s\": logits \"%s\" are "
                                           "%dx%d per channel; pass (N,K,1,1) logits, e.g. from "
                                           "hyfi_fc", nm, logits->name, logits->dims[2],
                        logits->dims[3]);
        return NULL;
    }
    int n = logits->dims[0], k = logits->dims[1];
    hyfi_tensor *prob = new_param(g, nm, "prob", T_SAVED, INIT_ZERO, 1, n, k, 1, 1);
    if (!prob) return NULL;
    prob->batched = 1;
    hyfi_tensor *in[2] = {logits, labels};
    node *nd = add_node(g, OP_XENT, nm, 2, in, 1, 1, 1, 1);
    if (!nd) return NULL;
    nd->s[0] = prob;
    nd->out->batched = 0; /* the loss: one value per micro-batch */
    nd->a.xent = (hyfi_xent_args){.n = n, .k = k, .scale = 1.0f / (float)n};
    return nd->out;
}

/* ------------------------------------------------------------ summaries */

int hyfi_graph_op_count(const hyfi_graph *g) { return g ? g->nnodes : 0; }

hyfi_status hyfi_graph_op_info(const hyfi_graph *g, int i, hyfi_op_info *info)
{
    if (!g || !info) return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_op_info: graph or info is NULL");
    if (i < 0 || i >= g->nnodes)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_graph_op_info: op %d does not exist (the graph has "
                                       "%d ops)", i, g->nnodes);
    const node *nd = &g->nodes[i];
    memset(info, 0, sizeof *info);
    info->name = nd->name;
    info->kind = hyfi_op_names[nd->op];
    memcpy(info->out_dims, nd->out->dims, sizeof info->out_dims);
    for (int k = 0; k < 4; k++)
        if (nd->p[k] && nd->p[k]->kind == T_PARAM) info->params += nd->p[k]->numel;
    info->flops = hyfi_op_flops(nd);
    info->act_bytes = nd->out->numel * sizeof(float);
    info->layer = g->nlayers ? (nd->layer < 0 ? 0 : nd->layer) : i;
    info->layer_name = g->nlayers ? g->layer_names[info->layer] : nd->name;
    info->stage = g->cc && g->cc->pl ? nd->stage : 0;
    info->out_blk = g->cc ? nd->out->blk : 0;
    return HYFI_OK;
}
