/* The log callback (hyfi_ctx_config.log): with one set, the library's
 * messages reach it with their level and nothing of the library's goes to
 * stderr; without one they go to stderr as "hyfi: ..." lines, as before.
 *
 * A verbose CPU context (its workers line, INFO) trains one step of a small
 * network (the plan's and the submission's lines). stderr is redirected to a
 * file for the run; StarPU's own lines may appear there, the library's
 * ("hyfi:") must not while a callback is set. */
#include "hyfi.h"
#include "tu_env.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int n, info, first_rank_line;
    char last[512];
} logbook;

static void collect(void *user, hyfi_log_level level, const char *msg)
{
    logbook *b = user;
    b->n++;
    b->info += level == HYFI_LOG_INFO;
    if (!strncmp(msg, "rank 0/1, ", 10)) b->first_rank_line = 1;
    snprintf(b->last, sizeof b->last, "%s", msg);
}

/* One verbose context trains one step; stderr goes to path meanwhile. */
static int run(hyfi_log_fn log, logbook *b, const char *path)
{
    fflush(stderr);
    const int saved = dup(2);
    FILE *f = fopen(path, "w");
    if (saved < 0 || !f) return -1;
    dup2(fileno(f), 2);
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU, cc.mpi = 0, cc.ncpus = 1, cc.verbose = 1;
    cc.log = log, cc.log_user = b;
    hyfi_ctx *ctx = NULL;
    hyfi_graph *g = NULL;
    tu_ctx_env(&cc);
    int rc = hyfi_ctx_create(&cc, &ctx) != HYFI_OK;
    if (!rc) {
        hyfi_graph_create(ctx, 3, &g);
        hyfi_tensor *x = hyfi_input(g, "image", 4, 1, 8, 8);
        hyfi_tensor *y = hyfi_labels(g, "label", 4);
        hyfi_tensor *h = hyfi_conv2d(g, "conv1", x, (hyfi_conv2d_params){
            .out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1});
        h = hyfi_relu(g, "relu1", h);
        h = hyfi_global_avgpool(g, "gap", h);
        h = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = 3, .bias = true});
        hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, y);
        hyfi_train_config tc = {.lr = 0.05f};
        float xs[4 * 64], l;
        int32_t ys[4] = {0, 1, 2, 0};
        uint64_t st = 5;
        tu_fill(xs, 4 * 64, &st, -1.f, 1.f);
        rc = hyfi_graph_status(g) != HYFI_OK || hyfi_graph_compile(g, loss, &tc) != HYFI_OK ||
             hyfi_set_input(g, x, xs, 4 * 64) != HYFI_OK ||
             hyfi_set_labels(g, y, ys, 4) != HYFI_OK || hyfi_train_step(g, &l) != HYFI_OK;
    }
    if (g) hyfi_graph_destroy(g);
    hyfi_ctx_destroy(ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    if (rc) printf("FAIL the run: %s\n", hyfi_last_error());
    return rc ? -1 : 0;
}

/* Lines of path that begin with "hyfi:" (the library's default writer). */
static int hyfi_lines(const char *path, char *first, size_t len)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    first[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "hyfi:", 5) && n++ == 0) snprintf(first, len, "%s", line);
    if (f) fclose(f);
    return n;
}

int main(void)
{
    char path[] = "/tmp/hyfi-test-log-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    logbook b = {0};
    char first[1024];
    int rc = run(collect, &b, path);
    const int leaked = hyfi_lines(path, first, sizeof first);
    printf("%s callback: %d messages (%d INFO), the workers line %s; last: %s\n",
           !rc && b.first_rank_line && b.info == b.n && b.n >= 1 ? "ok  " : "FAIL", b.n, b.info,
           b.first_rank_line ? "among them" : "MISSING", b.last);
    tu_check(rc || !b.first_rank_line || b.info != b.n || b.n < 1, "callback messages");
    printf("%s callback: %d library lines on stderr%s%s", leaked ? "FAIL" : "ok  ", leaked,
           leaked ? ", the first: " : "\n", leaked ? first : "");
    tu_check(leaked != 0, "nothing on stderr with a callback");
    logbook none = {0};
    rc = run(NULL, &none, path);
    const int lines = hyfi_lines(path, first, sizeof first);
    const int ok = !rc && lines >= 1 && !strncmp(first, "hyfi: rank 0/1, ", 16) && none.n == 0;
    printf("%s no callback: %d lines on stderr, the first: %s", ok ? "ok  " : "FAIL", lines,
           first[0] ? first : "(none)\n");
    tu_check(!ok, "stderr without a callback");
    unlink(path);
    return tu_finish();
}
