/* StarPU-MPI context life cycle under mpiexec: every rank initialises
 * StarPU-MPI through hyfi_ctx_create, sees the right rank and size, trains the
 * test network for two steps with one stage per rank (every rank reads the
 * same loss), refuses a plan with fewer places than ranks, and shuts down
 * cleanly.
 * Run as: mpiexec -n 2 test_mpi_ctx */
#include "hyfi.h"
#include "testnet.h"
#include "testutil.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = 1, .ncpus = 1};
    hyfi_ctx *ctx;
    if (hyfi_ctx_create(&ctx, &cfg) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    int rank = hyfi_ctx_rank(ctx), size = hyfi_ctx_nranks(ctx);
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tu_check(size != world || rank < 0 || rank >= size, "rank and size from StarPU-MPI");
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
    return rank == 0 ? tu_finish() : 0;
}
