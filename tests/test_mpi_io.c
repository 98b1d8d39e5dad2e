/* Parameter files under mpiexec: hyfi_save_params and hyfi_load_params are
 * collective and return the same status, with the message, on every rank.
 *   - a save to a folder that does not exist fails on every rank (rank 0
 *     writes; the others used to return HYFI_OK);
 *   - a save and a load that work, work everywhere and restore the values;
 *   - a damaged file fails alike on every rank;
 *   - a file only rank 1 cannot read fails on every rank, naming rank 1, and
 *     no rank applies anything (a rank applying alone would wait forever).
 * The network has one stage per rank, so every rank owns parameters.
 * Run as: mpiexec -n 2 test_mpi_io DIR (DIR: a folder the ranks share). */
#include "hyfi.h"
#include "tu_env.h"
#include "testnet.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int g_rank;

static void check(hyfi_status got, hyfi_status want, const char *has, const char *what)
{
    const char *msg = hyfi_last_error();
    int ok = got == want && (!has || strstr(msg, has));
    printf("rank %d: %-4s %-46s -> %s: %s\n", g_rank, ok ? "ok" : "FAIL", what,
           hyfi_status_name(got), got == HYFI_OK ? "" : msg);
    tu_check(!ok, what);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mpiexec -n 2 test_mpi_io DIR\n");
        return 2;
    }
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = 1, .ncpus = 1};
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    g_rank = hyfi_ctx_rank(ctx);
    const int size = hyfi_ctx_nranks(ctx);
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) printf("mkdir %s failed\n", argv[1]);
    char good[4096], damaged[4096], mine[4096];
    snprintf(good, sizeof good, "%s/params.hyfi", argv[1]);
    snprintf(damaged, sizeof damaged, "%s/damaged.hyfi", argv[1]);
    testnet n;
    hyfi_plan_config plan = {.stages = size};
    if (testnet_build(ctx, &n, 0) || hyfi_graph_set_plan(n.g, &plan) != HYFI_OK ||
        hyfi_graph_compile(n.g, n.loss, NULL) != HYFI_OK) {
        printf("rank %d: build: %s\n", g_rank, hyfi_last_error());
        hyfi_ctx_destroy(ctx);
        return 1;
    }
    hyfi_tensor *w = hyfi_tensor_find(n.g, "fc.weight"); /* on the last rank */
    const size_t cnt = hyfi_tensor_numel(w);
    float *a = tu_alloc(cnt), *b = tu_alloc(cnt), *z = tu_alloc(cnt);

    check(hyfi_save_params(n.g, "/nonexistent-hyfi-dir/params.hyfi"), HYFI_ERR_IO,
          "/nonexistent-hyfi-dir", "save to a missing folder fails on every rank");
    check(hyfi_save_params(n.g, good), HYFI_OK, NULL, "save");
    hyfi_tensor_read(n.g, w, a, cnt);
    hyfi_tensor_write(n.g, w, z, cnt);
    check(hyfi_load_params(n.g, good), HYFI_OK, NULL, "load");
    hyfi_tensor_read(n.g, w, b, cnt);
    tu_check(memcmp(a, b, cnt * sizeof *a) != 0, "load restores the saved values");

    if (g_rank == 0) { /* the same damaged file for every rank */
        FILE *in = fopen(good, "rb"), *out = fopen(damaged, "wb");
        int c;
        for (long i = 0; in && out && (c = fgetc(in)) != EOF; i++) fputc(i == 40 ? c ^ 1 : c, out);
        if (in) fclose(in);
        if (out) fclose(out);
    }
    /* the save is collective: after it every rank sees the file rank 0 wrote */
    check(hyfi_save_params(n.g, good), HYFI_OK, NULL, "save again (a meeting point)");
    check(hyfi_load_params(n.g, damaged), HYFI_ERR_IO, "corrupt",
          "a damaged file fails alike on every rank");
    tu_check(strstr(hyfi_last_error(), "rank ") != NULL, "an error of every rank names none");

    /* rank 1 cannot read its file: nobody applies anything */
    hyfi_tensor_write(n.g, w, z, cnt);
    snprintf(mine, sizeof mine, "%s", g_rank == 1 ? "/nonexistent-hyfi-dir/params.hyfi" : good);
    check(hyfi_load_params(n.g, mine), HYFI_ERR_IO,
          g_rank == 1 ? "/nonexistent-hyfi-dir" : "rank 1: ",
          "a file rank 1 cannot read fails on every rank");
    hyfi_tensor_read(n.g, w, b, cnt);
    tu_check(memcmp(z, b, cnt * sizeof *z) != 0, "a failed load applies nothing");

    free(a);
    free(b);
    free(z);
    hyfi_graph_destroy(n.g);
    hyfi_ctx_destroy(ctx);
    printf("rank %d: ", g_rank);
    return tu_finish();
}
