/* Running programs and moving data in and out of StarPU handles. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

hyfi_status hyfi_program_run(hyfi_graph *g, program *p)
{
    for (int i = 0; i < p->n; i++) {
        prog_task *t = &p->t[i];
        int rc = starpu_task_insert(t->cl, STARPU_DATA_MODE_ARRAY, t->buf, t->nbuf,
                                    STARPU_CL_ARGS_NFREE, &t->args, sizeof t->args, STARPU_NAME,
                                    t->name, 0);
        if (rc != 0) {
            starpu_task_wait_for_all();
            return hyfi_call_fail(g, HYFI_ERR_RUNTIME, "submitting task %s failed (%d): no "
                                                       "worker can run %s here", t->name, rc,
                                  t->cl->name);
        }
    }
    starpu_task_wait_for_all();
    char msg[256];
    if (hyfi_ops_take_error(msg, sizeof msg))
        return hyfi_call_fail(g, HYFI_ERR_RUNTIME, "%s", msg);
    return HYFI_OK;
}

static hyfi_status need_compiled(hyfi_graph *g, const char *who)
{
    if (!g) return hyfi_fail(HYFI_ERR_ARG, "%s: graph is NULL", who);
    if (!g->compiled)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "%s: compile the graph first "
                                                 "(hyfi_graph_compile)", who);
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

/* Copy between host memory and a handle: acquire in the given mode on main RAM. */
static void copy_handle(starpu_data_handle_t h, void *host, size_t bytes, int to_handle)
{
    starpu_data_acquire(h, to_handle ? STARPU_W : STARPU_R);
    void *ptr = (void *)starpu_vector_get_local_ptr(h);
    if (to_handle) memcpy(ptr, host, bytes);
    else memcpy(host, ptr, bytes);
    starpu_data_release(h);
}

hyfi_status hyfi_set_input(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count)
{
    hyfi_status s = need_compiled(g, "hyfi_set_input");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_set_input");
    if (s != HYFI_OK) return s;
    if (t->kind != T_INPUT || !data)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_input: \"%s\" is not an input tensor or "
                                               "the data is NULL", t->name);
    copy_handle(t->h, (void *)data, count * sizeof(float), 1);
    return HYFI_OK;
}

hyfi_status hyfi_set_labels(hyfi_graph *g, hyfi_tensor *t, const int32_t *labels, size_t count)
{
    hyfi_status s = need_compiled(g, "hyfi_set_labels");
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
    copy_handle(t->h, (void *)labels, count * sizeof(int32_t), 1);
    return HYFI_OK;
}

static hyfi_status read_loss(hyfi_graph *g, float *loss)
{
    float l;
    copy_handle(g->loss->h, &l, sizeof l, 0);
    if (loss) *loss = l;
    if (!isfinite(l))
        return hyfi_call_fail(g, HYFI_ERR_DATA, "the loss is %g (not finite): lower the learning "
                                                "rate or check the input data", (double)l);
    return HYFI_OK;
}

hyfi_status hyfi_train_step(hyfi_graph *g, float *loss)
{
    hyfi_status s = need_compiled(g, "hyfi_train_step");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, &g->train_prog);
    if (s != HYFI_OK) return s;
    g->stepped = 1;
    return read_loss(g, loss);
}

hyfi_status hyfi_infer(hyfi_graph *g, float *loss)
{
    hyfi_status s = need_compiled(g, "hyfi_infer");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, &g->infer_prog);
    if (s != HYFI_OK) return s;
    return read_loss(g, loss);
}

hyfi_status hyfi_forward(hyfi_graph *g, bool training, float *loss)
{
    hyfi_status s = need_compiled(g, "hyfi_forward");
    if (s != HYFI_OK) return s;
    s = hyfi_program_run(g, training ? &g->fwd_train_prog : &g->infer_prog);
    if (s != HYFI_OK) return s;
    return read_loss(g, loss);
}

hyfi_status hyfi_set_lr(hyfi_graph *g, float lr)
{
    hyfi_status s = need_compiled(g, "hyfi_set_lr");
    if (s != HYFI_OK) return s;
    if (!(lr > 0))
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_set_lr: learning rate %g must be > 0", lr);
    g->train.lr = lr;
    for (int i = 0; i < g->train_prog.n; i++)
        if (g->train_prog.t[i].cl == &hyfi_cl_sgd_update) g->train_prog.t[i].args.u.sgd.lr = lr;
    return HYFI_OK;
}

hyfi_status hyfi_tensor_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count)
{
    hyfi_status s = need_compiled(g, "hyfi_tensor_read");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_tensor_read");
    if (s != HYFI_OK) return s;
    if (!out) return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_read: output buffer is NULL");
    if (t->is_int)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_read: \"%s\" holds int32 labels",
                              t->name);
    copy_handle(t->h, out, count * sizeof(float), 0);
    return HYFI_OK;
}

hyfi_status hyfi_grad_read(hyfi_graph *g, const hyfi_tensor *t, float *out, size_t count)
{
    hyfi_status s = need_compiled(g, "hyfi_grad_read");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_grad_read");
    if (s != HYFI_OK) return s;
    if (!out) return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_grad_read: output buffer is NULL");
    if (!g->stepped || !t->gh || !t->gwritten)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_grad_read: \"%s\" has no gradient%s",
                              t->name, g->stepped ? " (it is not on the loss's path)"
                                                  : " yet; run hyfi_train_step first");
    copy_handle(t->gh, out, count * sizeof(float), 0);
    return HYFI_OK;
}

hyfi_status hyfi_tensor_write(hyfi_graph *g, hyfi_tensor *t, const float *data, size_t count)
{
    hyfi_status s = need_compiled(g, "hyfi_tensor_write");
    if (s == HYFI_OK) s = check_tensor(g, t, count, "hyfi_tensor_write");
    if (s != HYFI_OK) return s;
    if ((t->kind != T_PARAM && t->kind != T_STATE) || !data)
        return hyfi_call_fail(g, HYFI_ERR_ARG, "hyfi_tensor_write: \"%s\" is not a parameter or "
                                               "state tensor (use hyfi_set_input for inputs), or "
                                               "the data is NULL", t->name);
    copy_handle(t->h, (void *)data, count * sizeof(float), 1);
    return HYFI_OK;
}
