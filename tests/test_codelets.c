/* The buffer lists of the StarPU codelets (ops/codelet_common.h). The table
 * below is every codelet's signature, one letter per buffer in kernel order:
 * 'w' written, 'r' read. Each codelet checks its task's buffers against its
 * signature before its kernel runs (a wrong list, always an engine bug, is a
 * reported failure instead of a kernel on the wrong buffers): a task with the
 * first buffer read-only, and one with a buffer too few, must both be refused
 * with a message naming the codelet and the signature it takes, which must be
 * the table's. The 1F1B pipeline token (one more float, R or RW|COMMUTE) is
 * accepted after a right list, and nothing else is. sgd_update, whose buffers
 * never vary, declares them to StarPU instead (.nbuffers, .modes), as do the
 * reduction methods; the others keep STARPU_VARIABLE_NBUFFERS (see there).
 * The tiled batch norm's combines read their parts one per buffer or in
 * packets of consecutive parts (engine/spatial_bn.c): both give the same
 * bits. */
#include "codelet_common.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUF 12
#define LEN 16

typedef struct {
    struct starpu_codelet *cl;
    const char *op;
    hyfi_task_args args; /* what the variable parts depend on */
    const char *sig;
} entry;

static const entry table[] = {
    {&hyfi_cl_conv2d_forward, "conv2d_forward", {0}, "wrr"},
    {&hyfi_cl_conv2d_forward, "conv2d_forward", {.u.conv = {.has_bias = 1}}, "wrrr"},
    {&hyfi_cl_conv2d_backward_data, "conv2d_backward_data", {0}, "wrr"},
    {&hyfi_cl_conv2d_backward_weight, "conv2d_backward_weight", {0}, "wrr"},
    {&hyfi_cl_conv2d_backward_weight, "conv2d_backward_weight", {.u.conv = {.has_bias = 1}},
     "wwrr"},
    {&hyfi_cl_batchnorm_forward_train, "batchnorm_forward_train", {0}, "wwwwwrrr"},
    {&hyfi_cl_batchnorm_forward_eval, "batchnorm_forward_eval", {0}, "wrrrrr"},
    {&hyfi_cl_batchnorm_backward, "batchnorm_backward", {0}, "wwwrrrrr"},
    {&hyfi_cl_relu_forward, "relu_forward", {0}, "wr"},
    {&hyfi_cl_relu_backward, "relu_backward", {0}, "wrr"},
    {&hyfi_cl_add_forward, "add_forward", {0}, "wrr"},
    {&hyfi_cl_accumulate, "accumulate", {0}, "wr"},
    {&hyfi_cl_accumulate_n, "accumulate_n", {.u.elt = {.nsrc = 1}}, "wr"},
    {&hyfi_cl_accumulate_n, "accumulate_n", {.u.elt = {.nsrc = 3}}, "wrrr"},
    {&hyfi_cl_fill, "fill", {0}, "w"},
    {&hyfi_cl_maxpool_forward, "maxpool_forward", {0}, "wr"},
    {&hyfi_cl_maxpool_backward, "maxpool_backward", {0}, "wrr"},
    {&hyfi_cl_avgpool_forward, "avgpool_forward", {0}, "wr"},
    {&hyfi_cl_avgpool_backward, "avgpool_backward", {0}, "wr"},
    {&hyfi_cl_gap_forward, "gap_forward", {0}, "wr"},
    {&hyfi_cl_gap_backward, "gap_backward", {0}, "wr"},
    {&hyfi_cl_concat_forward, "concat_forward", {0}, "wr"},
    {&hyfi_cl_concat_backward, "concat_backward", {0}, "wr"},
    {&hyfi_cl_fc_forward, "fc_forward", {0}, "wrr"},
    {&hyfi_cl_fc_forward, "fc_forward", {.u.fc = {.has_bias = 1}}, "wrrr"},
    {&hyfi_cl_fc_backward_data, "fc_backward_data", {0}, "wrr"},
    {&hyfi_cl_fc_backward_weight, "fc_backward_weight", {0}, "wrr"},
    {&hyfi_cl_fc_backward_weight, "fc_backward_weight", {.u.fc = {.has_bias = 1}}, "wwrr"},
    {&hyfi_cl_xent_forward, "xent_forward", {0}, "wwrr"},
    {&hyfi_cl_xent_backward, "xent_backward", {0}, "wrrr"},
    {&hyfi_cl_copy_slice, "copy_slice", {0}, "wr"},
    {&hyfi_cl_running_combine, "running_combine", {.u.rcomb = {.nrep = 2}}, "wrr"},
    {&hyfi_cl_running_combine, "running_combine", {.u.rcomb = {.nrep = 4}}, "wrrrr"},
    {&hyfi_cl_tile_assemble, "tile_assemble", {.u.tile = {.npieces = 1}}, "wr"},
    {&hyfi_cl_tile_assemble, "tile_assemble", {.u.tile = {.npieces = 3}}, "wrrr"},
    {&hyfi_cl_tile_scatter, "tile_scatter", {.u.tile = {.npieces = 1}}, "wr"},
    {&hyfi_cl_tile_scatter, "tile_scatter", {.u.tile = {.npieces = 3}}, "wwwr"},
    {&hyfi_cl_bn_stats, "bn_stats", {0}, "wr"},
    {&hyfi_cl_bn_combine, "bn_combine", {.u.bnc = {.nparts = 2}}, "wwwwrr"},
    {&hyfi_cl_bn_combine, "bn_combine", {.u.bnc = {.nparts = 5, .npackets = 2}}, "wwwwrr"},
    {&hyfi_cl_bn_bwd_stats, "bn_bwd_stats", {0}, "wrrr"},
    {&hyfi_cl_bn_bwd_combine, "bn_bwd_combine", {.u.bnc = {.nparts = 2}}, "wwwrrr"},
    {&hyfi_cl_bn_bwd_combine, "bn_bwd_combine", {.u.bnc = {.nparts = 3, .npackets = 2}},
     "wwwrrr"},
    {&hyfi_cl_bn_bwd_apply, "bn_bwd_apply", {0}, "wrrrrrr"},
};

static starpu_data_handle_t h[NBUF], token;

/* Submit `cl` with buffers of the given letters ('w': W, 'r': R) and wait;
 * returns 1 if the codelet reported a failure (its message in msg). */
static int run(struct starpu_codelet *cl, const hyfi_task_args *args, const char *letters,
               int with_token, enum starpu_data_access_mode token_mode, char *msg, size_t len)
{
    struct starpu_data_descr d[NBUF + 1];
    int n = 0;
    for (; letters[n]; n++) d[n] = (struct starpu_data_descr){h[n], letters[n] == 'w' ? STARPU_W
                                                                                   : STARPU_R};
    if (with_token) d[n++] = (struct starpu_data_descr){token, token_mode};
    hyfi_task_args a = *args;
    const int rc = starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, d, n, STARPU_CL_ARGS_NFREE, &a,
                                      sizeof a, STARPU_NAME, "test.task", 0);
    starpu_task_wait_for_all();
    tu_check(rc != 0, "task submitted");
    msg[0] = 0;
    return hyfi_ops_take_error(msg, len);
}

/* A wrong list must be refused, naming the codelet and e's signature. */
static void expect_refused(const entry *e, const char *letters, const char *what)
{
    char msg[256], want_op[64], want_sig[32];
    const int failed = run(e->cl, &e->args, letters, 0, STARPU_R, msg, sizeof msg);
    snprintf(want_op, sizeof want_op, "codelet %s:", e->op);
    snprintf(want_sig, sizeof want_sig, "takes \"%s\"", e->sig);
    const int ok = failed && strstr(msg, want_op) && strstr(msg, want_sig);
    printf("%-4s %s %s (\"%s\"): %s\n", ok ? "ok" : "FAIL", e->op, what, letters, msg);
    tu_check(!ok, what);
}

int main(void)
{
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = 1;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.sched_policy_name = "eager";
    if (starpu_init(&conf) != 0) {
        printf("starpu_init failed\n");
        return 1;
    }
    static float data[NBUF][LEN], token_data[1];
    for (int i = 0; i < NBUF; i++)
        starpu_vector_data_register(&h[i], STARPU_MAIN_RAM, (uintptr_t)data[i], LEN,
                                    sizeof(float));
    starpu_vector_data_register(&token, STARPU_MAIN_RAM, (uintptr_t)token_data, 1, sizeof(float));

    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        const entry *e = &table[i];
        tu_check(e->cl->nbuffers != STARPU_VARIABLE_NBUFFERS, "variable buffers");
        char wrong[NBUF + 1];
        snprintf(wrong, sizeof wrong, "r%s", e->sig + 1); /* the first output read-only */
        expect_refused(e, wrong, "output passed read-only");
        snprintf(wrong, sizeof wrong, "%.*s", (int)strlen(e->sig) - 1, e->sig);
        expect_refused(e, wrong, "one buffer too few");
    }

    /* a right list runs, with or without the pipeline token (fill of LEN floats) */
    char msg[256];
    const hyfi_task_args fill = {.u.elt = {.count = LEN, .value = 1.0f}};
    tu_check(run(&hyfi_cl_fill, &fill, "w", 0, STARPU_R, msg, sizeof msg), "fill");
    tu_check(run(&hyfi_cl_fill, &fill, "w", 1, STARPU_R, msg, sizeof msg), "fill, forward token");
    tu_check(run(&hyfi_cl_fill, &fill, "w", 1, STARPU_RW | STARPU_COMMUTE, msg, sizeof msg),
             "fill, backward token");
    tu_check(data[0][LEN - 1] != 1.0f, "fill ran");
    tu_check(!run(&hyfi_cl_fill, &fill, "w", 1, STARPU_W, msg, sizeof msg),
             "a token written (W) is refused");
    printf("token W: %s\n", msg);
    tu_check(!run(&hyfi_cl_fill, &fill, "wr", 0, STARPU_R, msg, sizeof msg),
             "an extra buffer of more than one float is refused");
    printf("extra buffer: %s\n", msg);

    /* the combines: 3 parts (C = 2: 2C doubles = 8 floats each) one per buffer,
     * and as a packet of parts 0 and 1 (16 floats) then part 2: the same bits */
    double parts[3][4] = {{0.25, -1.5, 3.0, 0.125}, {1.0 / 3, 2.5, 0.75, 7.0},
                          {-0.1, 0.2, 1e-3, 5.5}};
    for (int k = 0; k < 3; k++) memcpy(data[4 + k], parts[k], sizeof parts[k]);
    memcpy(data[7], parts[0], sizeof parts[0]);
    memcpy((char *)data[7] + sizeof parts[0], parts[1], sizeof parts[1]);
    memcpy(data[8], parts[2], sizeof parts[2]);
    hyfi_task_args comb = {.u.bnc = {.c = 2, .nparts = 3, .eps = 1e-5f, .momentum = 0.1f,
                                     .count = {12, 20, 7}}};
    for (int bwd = 0; bwd < 2; bwd++) {
        struct starpu_codelet *cl = bwd ? &hyfi_cl_bn_bwd_combine : &hyfi_cl_bn_combine;
        float got[2][4][LEN];
        for (int packed = 0; packed < 2; packed++) {
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < LEN; j++) data[i][j] = 0.5f + (float)j; /* var > 0 */
            struct starpu_data_descr d[7];
            int n = 0;
            for (int i = 0; i < 4; i++)
                d[n++] = (struct starpu_data_descr){h[i], bwd && i == 3 ? STARPU_R : STARPU_W};
            if (!bwd) d[2].mode = d[3].mode = STARPU_RW;
            if (packed) {
                d[n++] = (struct starpu_data_descr){h[7], STARPU_R};
                d[n++] = (struct starpu_data_descr){h[8], STARPU_R};
            } else {
                for (int k = 0; k < 3; k++) d[n++] = (struct starpu_data_descr){h[4 + k], STARPU_R};
            }
            hyfi_task_args a = comb;
            a.u.bnc.npackets = packed ? 2 : 0;
            tu_check(starpu_task_insert(cl, STARPU_DATA_MODE_ARRAY, d, n, STARPU_CL_ARGS_NFREE,
                                        &a, sizeof a, STARPU_NAME, "test.combine", 0) != 0,
                     "combine submitted");
            starpu_task_wait_for_all();
            tu_check(hyfi_ops_take_error(msg, sizeof msg), "combine ran");
            for (int i = 0; i < 4; i++) {
                starpu_data_acquire(h[i], STARPU_R);
                memcpy(got[packed][i], data[i], sizeof data[i]);
                starpu_data_release(h[i]);
            }
        }
        const int same = !memcmp(got[0], got[1], sizeof got[0]);
        printf("%-4s %s: packed parts give the same bits\n", same ? "ok" : "FAIL",
               bwd ? "bn_bwd_combine" : "bn_combine");
        tu_check(!same, "packed combine");
    }

    /* the codelets with fixed buffers declare them to StarPU */
    const struct starpu_codelet *sgd = &hyfi_cl_sgd_update;
    tu_check(sgd->nbuffers != 4 || sgd->modes[0] != STARPU_RW || sgd->modes[1] != STARPU_RW ||
                 sgd->modes[2] != STARPU_W || sgd->modes[3] != STARPU_R,
             "sgd_update: 4 buffers, RW RW W R");
    tu_check(hyfi_cl_redux_zero.nbuffers != 1 || hyfi_cl_redux_zero.modes[0] != STARPU_W,
             "redux_zero: 1 buffer, W");
    tu_check(hyfi_cl_redux_add.nbuffers != 2 ||
                 hyfi_cl_redux_add.modes[0] != (STARPU_RW | STARPU_COMMUTE) ||
                 hyfi_cl_redux_add.modes[1] != STARPU_R,
             "redux_add: 2 buffers, RW|COMMUTE R");

    for (int i = 0; i < NBUF; i++) starpu_data_unregister(h[i]);
    starpu_data_unregister(token);
    starpu_shutdown();
    return tu_finish();
}
