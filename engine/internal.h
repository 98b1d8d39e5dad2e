/* Engine internals: the logical graph (tensors and nodes), the compiled
 * programs (lists of tasks over StarPU handles) and error plumbing.
 *
 * Data flow: builders (graph.c) append nodes and tensors; hyfi_graph_compile
 * (compile.c) derives the backward pass from one switch over ops and lowers
 * the graph to two programs — train (forward, backward, SGD) and infer
 * (eval-mode forward) — each a flat, sequentially consistent list of tasks;
 * run.c submits a program as StarPU tasks and waits.
 */
#ifndef HYFI_ENGINE_INTERNAL_H
#define HYFI_ENGINE_INTERNAL_H

#include "hyfi.h"
#include "codelet_common.h"

#include <starpu.h>
#include <stdarg.h>

#define HYFI_MAX_TASK_BUFFERS 16
#define HYFI_NAME_MAX 128

typedef enum {
    T_INPUT,   /* images, written by the user each step */
    T_LABELS,  /* int32 labels */
    T_PARAM,   /* trainable; has a gradient and a momentum buffer */
    T_STATE,   /* running statistics: saved with the parameters, not trained */
    T_ACT,     /* an op's output */
    T_SAVED    /* forward results kept for the backward (batch stats, probabilities) */
} tensor_kind;

typedef enum {
    INIT_ZERO,
    INIT_ONE,
    INIT_HE_NORMAL,  /* N(0, sqrt(2 / fan_in)) */
    INIT_UNIFORM     /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
} init_kind;

struct hyfi_tensor {
    hyfi_graph *g;
    int id;
    char *name;
    int dims[4];
    size_t numel;
    tensor_kind kind;
    int is_int;           /* labels */
    int requires_grad;    /* a gradient flows into it (params and what depends on them) */
    int producer;         /* node index, -1 for inputs/params/state */
    init_kind init;
    int fan_in;

    /* after compile */
    float *host;          /* host memory for inputs, labels, params, state (StarPU-allocated) */
    starpu_data_handle_t h;
    float *ghost;         /* gradient host memory (params) */
    starpu_data_handle_t gh; /* gradient (NULL when none) */
    int gwritten;         /* compile-time: a backward task already wrote the gradient */
    float *mhost;         /* momentum (params) */
    starpu_data_handle_t mh;
};

typedef enum {
    OP_CONV2D,
    OP_BATCHNORM,
    OP_RELU,
    OP_MAXPOOL,
    OP_AVGPOOL,
    OP_GAP,
    OP_ADD,
    OP_CONCAT,
    OP_FC,
    OP_XENT,
    OP_COUNT
} op_kind;

extern const char *const hyfi_op_names[OP_COUNT];

typedef struct {
    op_kind op;
    char *name;
    int nin;
    hyfi_tensor **in;     /* activation inputs (xent: logits, labels) */
    hyfi_tensor *out;
    hyfi_tensor *p[4];    /* conv/fc: weight, bias; bn: gamma, beta, running mean, running var */
    hyfi_tensor *s[2];    /* saved: bn mean, var; xent prob */
    union {
        hyfi_conv2d_args conv;
        hyfi_batchnorm_args bn;
        hyfi_pool_args pool;
        hyfi_fc_args fc;
        hyfi_xent_args xent;
    } a;
} node;

typedef struct {
    struct starpu_codelet *cl;
    int nbuf;
    struct starpu_data_descr buf[HYFI_MAX_TASK_BUFFERS];
    hyfi_task_args args;
    char name[64];
} prog_task;

typedef struct {
    prog_task *t;
    int n, cap;
} program;

struct hyfi_ctx {
    int rank, nranks;
    int mpi;
    int ncpu, ncuda;
    int cpu_threads;
    int verbose;
};

struct hyfi_graph {
    hyfi_ctx *ctx;
    uint64_t seed;
    hyfi_tensor **tensors;
    int ntensors, cap_tensors;
    node *nodes;
    int nnodes, cap_nodes;
    hyfi_tensor **params;  /* trainable, creation order */
    int nparams, cap_params;

    hyfi_status status;    /* sticky builder status */
    char error[512];       /* message of the first builder error or the last failed call */

    int compiled;
    hyfi_tensor *loss;
    hyfi_train_config train;
    program train_prog, infer_prog, fwd_train_prog;
    float *dloss_host;     /* constant 1: the seed of the backward pass */
    starpu_data_handle_t dloss;
    int stepped;           /* a train step has run: gradients are readable */
};

/* errors.c */
hyfi_status hyfi_fail(hyfi_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Record a builder error on g (sticky: the first one is kept) and return s. */
hyfi_status hyfi_graph_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Record the failure of a non-builder call on g (not sticky) and return s. */
hyfi_status hyfi_call_fail(hyfi_graph *g, hyfi_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* graph.c */
void hyfi_tensor_free(hyfi_tensor *t);

/* compile.c */
void hyfi_programs_free(hyfi_graph *g);
void hyfi_handles_free(hyfi_graph *g);

/* run.c */
hyfi_status hyfi_program_run(hyfi_graph *g, program *p);

/* init.c: deterministic parameter initialisation from (seed, name). */
void hyfi_param_init(float *dst, const hyfi_tensor *t, uint64_t seed);

#endif
