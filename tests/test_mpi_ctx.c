/* StarPU-MPI context life cycle under mpiexec: every rank initialises
 * StarPU-MPI through hyfi_ctx_create, sees the right rank and size, trains the
 * test network for two steps with one stage per rank (every rank reads the
 * same loss), refuses a plan with fewer places than ranks, and shuts down
 * cleanly. Ranks that disagree fail together with the same message, and the
 * context trains afterwards: a graph with another seed, another width or a
 * builder error on the last rank only is refused at compile on every rank;
 * hyfi_ctx_check_same and hyfi_ctx_agree make one rank's setting or failure
 * every rank's. Without hyfi_ctx_config.death_notice the context forks no
 * watcher process.
 * Run as: mpiexec -n 2 test_mpi_ctx */
#include "hyfi.h"
#include "tu_env.h"
#include "testnet.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Four layers (one stage per rank up to 4 ranks); seed, width and a builder
 * error may depend on the rank. */
static hyfi_status tiny_compile(hyfi_ctx *ctx, uint64_t seed, int width, int broken,
                                hyfi_graph **out)
{
    hyfi_graph *g;
    *out = NULL;
    if (hyfi_graph_create(ctx, seed, &g) != HYFI_OK) return HYFI_ERR_NOMEM;
    *out = g;
    hyfi_tensor *x = hyfi_input(g, "x", 4, 1, 8, 8);
    hyfi_tensor *y = hyfi_labels(g, "y", 4);
    hyfi_layer_begin(g, "conv");
    hyfi_tensor *h = hyfi_conv2d(g, "conv", x, (hyfi_conv2d_params){
        .out_channels = broken ? 0 : width, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1});
    hyfi_layer_begin(g, "relu");
    h = hyfi_relu(g, "relu", h);
    hyfi_layer_begin(g, "gap");
    h = hyfi_global_avgpool(g, "gap", h);
    hyfi_layer_begin(g, "head");
    h = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = 3, .bias = true});
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, y);
    hyfi_plan_config plan = {.stages = hyfi_ctx_nranks(ctx)};
    hyfi_graph_set_plan(g, &plan);
    return hyfi_graph_compile(g, loss, NULL);
}

/* Every rank got status `want` and a message containing `text`. */
static void expect_all(hyfi_status got, hyfi_status want, const char *msg, const char *text,
                       int rank, const char *what)
{
    const int ok = got == want && strstr(msg, text) != NULL;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) printf("rank %d: %s: %s: %s\n", rank, what, hyfi_status_name(got), msg);
    tu_check(!all, what);
    if (rank == 0 && all) printf("%s: %s\n", what, msg);
}

static void disagreements(hyfi_ctx *ctx)
{
    const int rank = hyfi_ctx_rank(ctx), size = hyfi_ctx_nranks(ctx), last = rank == size - 1;
    char want[128];
    hyfi_graph *g;
    snprintf(want, sizeof want, "rank %d differs from rank 0 in the seed (rank %d: 8; rank 0: 7)",
             size - 1, size - 1);
    hyfi_status st = tiny_compile(ctx, last ? 8 : 7, 4, 0, &g);
    expect_all(st, HYFI_ERR_MISMATCH, hyfi_graph_error(g), want, rank, "another seed on one rank");
    tu_check(hyfi_graph_status(g) != HYFI_ERR_MISMATCH, "the mismatch is the graph's status");
    hyfi_graph_destroy(g);
    st = tiny_compile(ctx, 7, last ? 6 : 4, 0, &g);
    expect_all(st, HYFI_ERR_MISMATCH, hyfi_graph_error(g), "differs from rank 0 in the graph",
               rank, "another width on one rank");
    hyfi_graph_destroy(g);
    st = tiny_compile(ctx, 7, 4, last, &g);
    snprintf(want, sizeof want, last ? "builder error" : "rank %d: hyfi_graph_compile: the graph "
             "has a builder error", size - 1);
    expect_all(st, HYFI_ERR_ARG, hyfi_last_error(), want, rank, "a builder error on one rank");
    hyfi_graph_destroy(g);
    /* the context still works: a graph that agrees compiles */
    st = tiny_compile(ctx, 7, 4, 0, &g);
    tu_check(st != HYFI_OK, "the same graph on every rank compiles after the refusals");
    hyfi_graph_destroy(g);

    const hyfi_setting set[] = {{"--steps", last ? "4" : "3", 0}, {"--data", "x", 0}};
    st = hyfi_ctx_check_same(ctx, "arguments", set, 2);
    snprintf(want, sizeof want, "different arguments: rank %d differs from rank 0 in --steps "
             "(rank %d: 4; rank 0: 3)", size - 1, size - 1);
    expect_all(st, HYFI_ERR_MISMATCH, hyfi_last_error(), want, rank, "hyfi_ctx_check_same");
    st = hyfi_ctx_check_same(ctx, "arguments", set + 1, 1);
    expect_all(st, HYFI_OK, "", "", rank, "hyfi_ctx_check_same, equal settings");
    st = hyfi_ctx_agree(ctx, rank == 0 ? HYFI_ERR_IO : HYFI_OK, "cannot open m.json");
    expect_all(st, HYFI_ERR_IO, hyfi_last_error(), rank == 0 ? "cannot open m.json"
                                                             : "rank 0: cannot open m.json",
               rank, "hyfi_ctx_agree, a failure on rank 0");
    st = hyfi_ctx_agree(ctx, HYFI_OK, NULL);
    expect_all(st, HYFI_OK, "", "", rank, "hyfi_ctx_agree, no failure");
}

/* Children of this process (every thread's, /proc/self/task/T/children). */
static int child_processes(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
        FILE *f = fopen(path, "r");
        int pid;
        while (f && fscanf(f, "%d", &pid) == 1) n++;
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

int main(void)
{
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = 1, .ncpus = 1};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    int rank = hyfi_ctx_rank(ctx), size = hyfi_ctx_nranks(ctx);
    {
        /* without death_notice the library forks no watcher (its signal
         * handlers come with it; MPI's transport installs its own) */
        const int kids = child_processes();
        printf("%s rank %d: no watcher process (%d children)\n", kids == 0 ? "ok  " : "FAIL",
               rank, kids);
        tu_check(kids != 0, "no watcher process without death_notice");
    }
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tu_check(size != world || rank < 0 || rank >= size, "rank and size from StarPU-MPI");
    if (size > 1) disagreements(ctx);
    testnet n;
    float loss[2] = {0, 0};
    if (size > 1 && testnet_build(ctx, &n, 0) == 0) {
        /* one stage, several ranks: refused, naming the fix */
        hyfi_status st = hyfi_graph_compile(n.g, n.loss, NULL);
        tu_check(st != HYFI_ERR_ARG || !strstr(hyfi_graph_error(n.g), "mpiexec -n 1"),
                 "fewer places than ranks refused");
        if (rank == 0) printf("message: %s\n", hyfi_graph_error(n.g));
        hyfi_graph_destroy(n.g);
    }
    hyfi_plan_config plan = {.stages = size};
    int nan_status = -1;
    if (testnet_build(ctx, &n, 0) == 0 && hyfi_graph_set_plan(n.g, &plan) == HYFI_OK &&
        hyfi_graph_compile(n.g, n.loss, NULL) == HYFI_OK) {
        for (int s = 0; s < 2; s++) {
            testnet_batch(&n, 9 + (uint64_t)s);
            tu_check(hyfi_train_step(n.g, &loss[s]) != HYFI_OK, "train step");
        }
        /* a NaN in the batch: every rank returns the error (the health sums
         * are sent to every rank inside the step) */
        float x[TN_BATCH * 3 * 9 * 8];
        uint64_t st = 3;
        tu_fill(x, sizeof x / sizeof *x, &st, -1, 1);
        x[5] = NAN;
        hyfi_set_input(n.g, n.x, x, sizeof x / sizeof *x);
        nan_status = hyfi_train_step(n.g, NULL);
        hyfi_graph_destroy(n.g);
    } else {
        tu_check(1, "build and compile");
    }
    float all[2 * 64];
    MPI_Allgather(loss, 2, MPI_FLOAT, all, 2, MPI_FLOAT, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 0; r < size && r < 64; r++) same &= all[2 * r] == loss[0] && all[2 * r + 1] == loss[1];
    tu_check(!same, "every rank computes the same losses");
    int sts[64];
    MPI_Allgather(&nan_status, 1, MPI_INT, sts, 1, MPI_INT, MPI_COMM_WORLD);
    int all_data = 1;
    for (int r = 0; r < size && r < 64; r++) all_data &= sts[r] == HYFI_ERR_DATA;
    tu_check(!all_data, "a NaN batch is HYFI_ERR_DATA on every rank");
    printf("rank %d/%d: losses %.6f %.6f; NaN batch: %s\n", rank, size, loss[0], loss[1],
           hyfi_status_name((hyfi_status)nan_status));
    hyfi_ctx_destroy(ctx);
    /* MPI is finalised now and cannot be initialised again: a clear error, not
     * MPI aborting the process */
    hyfi_ctx *again = (hyfi_ctx *)&again;
    tu_ctx_env(&cfg);
    tu_check(hyfi_ctx_create(&cfg, &again) != HYFI_ERR_STATE || again != NULL ||
                 !strstr(hyfi_last_error(), "finalised"),
             "a second MPI context in the process is HYFI_ERR_STATE");
    if (rank == 0) printf("second MPI context: %s\n", hyfi_last_error());
    return rank == 0 ? tu_finish() : 0;
}
