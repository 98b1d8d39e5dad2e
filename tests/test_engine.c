/* Engine tests through the public API and StarPU: a graph that uses every op
 * is trained for a step; its gradients are checked against finite differences
 * of the whole network's loss, the SGD update against its formula, parameter
 * files round-trip (and a corrupt one is refused without touching the model),
 * initialisation is deterministic, training on a fixed batch lowers the loss,
 * and bad input gives clear errors instead of aborting. Parameter files: a
 * damaged file is reported as damaged (checksum first), bytes after the
 * checksum are refused, a save writes through symbolic links and refuses
 * devices, fifos and folders, a save killed while writing leaves nothing
 * behind, and the next save removes temporaries of dead processes. */
#include "hyfi.h"
#include "tu_env.h"
#include "testnet.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct {
    testnet *n;
    hyfi_tensor *p;
    float *vals;
} fd_ctx;

static double fd_loss(void *arg)
{
    fd_ctx *c = arg;
    hyfi_tensor_write(c->n->g, c->p, c->vals, hyfi_tensor_numel(c->p));
    float l = 0;
    hyfi_forward(c->n->g, true, &l);
    return l;
}

static void test_gradients(hyfi_ctx *ctx)
{
    testnet n;
    if (testnet_build(ctx, &n, 1)) {
        tu_check(1, "build");
        return;
    }
    hyfi_train_config tc = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    tu_check(hyfi_graph_compile(n.g, n.loss, &tc) != HYFI_OK, "compile");
    testnet_batch(&n, 11);
    int np = hyfi_param_count(n.g);
    float **w0 = calloc((size_t)np, sizeof *w0), **gr = calloc((size_t)np, sizeof *gr);
    for (int i = 0; i < np; i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        size_t m = hyfi_tensor_numel(p);
        w0[i] = tu_alloc(m);
        gr[i] = tu_alloc(m);
        hyfi_tensor_read(n.g, p, w0[i], m);
    }
    float loss0 = 0, lossf = 0;
    tu_check(hyfi_forward(n.g, true, &lossf) != HYFI_OK, "forward");
    tu_check(hyfi_train_step(n.g, &loss0) != HYFI_OK, "train step");
    tu_check(fabsf(loss0 - lossf) > 1e-6f * fabsf(lossf), "train-step loss equals forward loss");
    printf("loss %.6f (log K = %.6f)\n", loss0, log((double)TN_CLASSES));

    /* SGD with momentum from zero: w1 = w0 - lr * (g + wd * w0). */
    for (int i = 0; i < np; i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        size_t m = hyfi_tensor_numel(p);
        float *w1 = tu_alloc(m), *want = tu_alloc(m);
        hyfi_grad_read(n.g, p, gr[i], m);
        hyfi_tensor_read(n.g, p, w1, m);
        for (size_t j = 0; j < m; j++) want[j] = w0[i][j] - tc.lr * (gr[i][j] + tc.weight_decay * w0[i][j]);
        char name[160];
        snprintf(name, sizeof name, "sgd update of %s", hyfi_tensor_name(p));
        tu_check(tu_compare(name, w1, want, m, (tu_tol){"sgd", 1e-5, 1e-7}), name);
        hyfi_tensor_write(n.g, p, w0[i], m); /* back to the point the gradient was taken at */
        free(w1);
        free(want);
    }
    /* Whole-network finite differences of the training-mode loss. */
    uint64_t st = 99;
    for (int i = 0; i < np; i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        size_t m = hyfi_tensor_numel(p);
        fd_ctx c = {&n, p, w0[i]};
        char name[160];
        snprintf(name, sizeof name, "d loss / d %s (finite differences)", hyfi_tensor_name(p));
        tu_check(tu_grad_check(name, w0[i], m, gr[i], fd_loss, &c, 12, 3e-3f,
                               (tu_tol){"fd-net", 2e-2, 5e-4}, &st), name);
        hyfi_tensor_write(n.g, p, w0[i], m);
    }
    /* The gradient of an activation is readable too. */
    float gl[TN_BATCH * TN_CLASSES];
    tu_check(hyfi_grad_read(n.g, n.logits, gl, TN_BATCH * TN_CLASSES) != HYFI_OK, "activation gradient");
    double rowsum = 0;
    for (int i = 0; i < TN_CLASSES; i++) rowsum += gl[i];
    tu_check(fabs(rowsum) > 1e-6, "softmax gradient rows sum to zero");
    for (int i = 0; i < np; i++) {
        free(w0[i]);
        free(gr[i]);
    }
    free(w0);
    free(gr);
    hyfi_graph_destroy(n.g);
}

static void test_training_and_io(hyfi_ctx *ctx)
{
    testnet n, m;
    if (testnet_build(ctx, &n, 0) || testnet_build(ctx, &m, 0)) {
        tu_check(1, "build");
        return;
    }
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f};
    hyfi_graph_compile(n.g, n.loss, &tc);
    hyfi_graph_compile(m.g, m.loss, &tc);
    /* Same seed, same names: same initial parameters. */
    hyfi_tensor *w = hyfi_tensor_find(n.g, "c1.weight"), *wm = hyfi_tensor_find(m.g, "c1.weight");
    size_t cnt = hyfi_tensor_numel(w);
    float *a = tu_alloc(cnt), *b = tu_alloc(cnt);
    hyfi_tensor_read(n.g, w, a, cnt);
    hyfi_tensor_read(m.g, wm, b, cnt);
    tu_check(memcmp(a, b, cnt * sizeof *a) != 0, "deterministic initialisation");
    testnet_batch(&n, 5);
    float first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        float l;
        if (hyfi_train_step(n.g, &l) != HYFI_OK) {
            printf("step failed: %s\n", hyfi_last_error());
            tu_check(1, "train step");
            break;
        }
        if (s == 0) first = l;
        last = l;
    }
    printf("fixed batch: loss %.4f -> %.4f after 30 steps\n", first, last);
    tu_check(!(last < 0.5f * first), "training lowers the loss on a fixed batch");

    char path[] = "/tmp/hyfi-test-params-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    tu_check(hyfi_save_params(n.g, path) != HYFI_OK, "save");
    tu_check(hyfi_load_params(m.g, path) != HYFI_OK, "load");
    hyfi_tensor_read(n.g, w, a, cnt);
    hyfi_tensor_read(m.g, wm, b, cnt);
    tu_check(memcmp(a, b, cnt * sizeof *a) != 0, "load restores the saved values");
    float ln, lm;
    testnet_batch(&m, 5);
    hyfi_infer(n.g, &ln);
    hyfi_infer(m.g, &lm);
    tu_check(ln != lm, "loaded model infers the same loss (running statistics saved)");
    /* Corrupt the file: loading fails, names the file, and leaves the model alone. */
    FILE *f = fopen(path, "r+b");
    fseek(f, 40, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    hyfi_status s = hyfi_load_params(m.g, path);
    printf("corrupt file: %s: %s\n", hyfi_status_name(s), hyfi_last_error());
    tu_check(s != HYFI_ERR_IO || !strstr(hyfi_last_error(), path), "corrupt file refused");
    hyfi_tensor_read(m.g, wm, b, cnt);
    tu_check(memcmp(a, b, cnt * sizeof *a) != 0, "refused load leaves parameters intact");
    s = hyfi_load_params(m.g, "/nonexistent/params.hyfi");
    tu_check(s != HYFI_ERR_IO, "missing file is an I/O error");
    unlink(path);
    s = hyfi_save_params(n.g, "/nonexistent-dir/params.hyfi");
    printf("unwritable: %s\n", hyfi_last_error());
    tu_check(s != HYFI_ERR_IO, "unwritable path is an I/O error");
    free(a);
    free(b);
    hyfi_graph_destroy(n.g);
    hyfi_graph_destroy(m.g);
}

/* Step health: hyfi_train_norms equals the norms of the gradients and
 * weights read back; one batch with a NaN turns the step into HYFI_ERR_DATA
 * naming a parameter, and the corrupted weights keep every later step an
 * error (they used to return HYFI_OK with a finite loss, as ReLU and max
 * pooling swallow NaN). */
static void test_non_finite(hyfi_ctx *ctx)
{
    testnet n;
    if (testnet_build(ctx, &n, 0)) {
        tu_check(1, "build");
        return;
    }
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f};
    hyfi_graph_compile(n.g, n.loss, &tc);
    double gn = -1, wn = -1;
    tu_check(hyfi_train_norms(n.g, &gn, &wn) != HYFI_ERR_STATE, "norms before a step refused");
    testnet_batch(&n, 7);
    float l;
    tu_check(hyfi_train_step(n.g, &l) != HYFI_OK, "clean step");
    tu_check(hyfi_train_norms(n.g, &gn, &wn) != HYFI_OK, "norms after a step");
    double gg = 0, ww = 0;
    for (int i = 0; i < hyfi_param_count(n.g); i++) {
        hyfi_tensor *p = hyfi_param(n.g, i);
        const size_t c = hyfi_tensor_numel(p);
        float *v = tu_alloc(c);
        hyfi_grad_read(n.g, p, v, c);
        for (size_t j = 0; j < c; j++) gg += (double)v[j] * v[j];
        hyfi_tensor_read(n.g, p, v, c);
        for (size_t j = 0; j < c; j++) ww += (double)v[j] * v[j];
        free(v);
    }
    printf("norms: gradient %.6g (read back %.6g), weights %.6g (%.6g)\n", gn, sqrt(gg), wn,
           sqrt(ww));
    tu_check(fabs(gn - sqrt(gg)) > 1e-5 * sqrt(gg) || fabs(wn - sqrt(ww)) > 1e-5 * sqrt(ww),
             "hyfi_train_norms = norms read back");
    /* one NaN in one image */
    float x[TN_BATCH * 3 * 9 * 8];
    uint64_t st = 11;
    tu_fill(x, sizeof x / sizeof *x, &st, -1, 1);
    x[17] = NAN;
    hyfi_set_input(n.g, n.x, x, sizeof x / sizeof *x);
    hyfi_status s = hyfi_train_step(n.g, &l);
    printf("NaN batch: %s: %s\n", hyfi_status_name(s), hyfi_last_error());
    tu_check(s != HYFI_ERR_DATA || !strstr(hyfi_last_error(), "non-finite"),
             "a NaN batch is an error naming it");
    testnet_batch(&n, 8);
    for (int k = 0; k < 3; k++) {
        s = hyfi_train_step(n.g, &l);
        printf("clean batch after it: %s (loss %g): %s\n", hyfi_status_name(s), (double)l,
               hyfi_last_error());
        tu_check(s != HYFI_ERR_DATA, "the corrupted weights keep failing");
    }
    hyfi_graph_destroy(n.g);
}

static void expect(hyfi_status got, hyfi_status want, const char *what)
{
    printf("%-4s %-40s -> %s: %s\n", got == want ? "ok" : "FAIL", what, hyfi_status_name(got),
           hyfi_last_error());
    tu_check(got != want, what);
}

/* ---------------------------------------------------------- parameter files */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    *len = b ? fread(b, 1, 1 << 20, f) : 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const char *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(b, 1, len, f);
        fclose(f);
    }
}

static int same_file(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

/* Load `path` expecting a failure whose message has `want` and not `not`. */
static void expect_refused(hyfi_graph *g, const char *path, const char *want, const char *not,
                           const char *what)
{
    hyfi_status s = hyfi_load_params(g, path);
    const char *msg = hyfi_last_error();
    int ok = s == HYFI_ERR_IO && strstr(msg, want) && (!not || !strstr(msg, not));
    printf("%-4s %-40s -> %s: %s\n", ok ? "ok" : "FAIL", what, hyfi_status_name(s), msg);
    tu_check(!ok, what);
}

/* Names in dir that contain `part`. */
static int count_names(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

static void test_param_files(hyfi_ctx *ctx, const char *self)
{
    testnet n;
    if (testnet_build(ctx, &n, 0) || hyfi_graph_compile(n.g, n.loss, NULL) != HYFI_OK) {
        tu_check(1, "build");
        return;
    }
    char dir[] = "/tmp/hyfi-test-files-XXXXXX", p[4][512];
    if (!mkdtemp(dir)) {
        tu_check(1, "mkdtemp");
        return;
    }
    snprintf(p[0], sizeof p[0], "%s/params.hyfi", dir);
    tu_check(hyfi_save_params(n.g, p[0]) != HYFI_OK, "save");
    size_t len = 0;
    char *good = slurp(p[0], &len);
    printf("parameter file: %zu bytes\n", len);
    tu_check(!good || len < 64, "saved file read back");
    if (!good || len < 64) return;

    /* Damage is reported as damage, before anything in the file is believed:
     * a flipped byte in the first tensor's name (after magic, count, length). */
    snprintf(p[1], sizeof p[1], "%s/damaged.hyfi", dir);
    good[16] ^= 0x20;
    spit(p[1], good, len);
    good[16] ^= 0x20;
    expect_refused(n.g, p[1], "corrupt", "another model", "flipped byte in a tensor name");
    good[len - 20] ^= 1;
    spit(p[1], good, len);
    good[len - 20] ^= 1;
    expect_refused(n.g, p[1], "corrupt", NULL, "flipped byte in the values");
    spit(p[1], good, len - 3);
    expect_refused(n.g, p[1], "truncated", NULL, "truncated file");
    /* Bytes after the checksum are refused. */
    char *longer = malloc(len + 5);
    memcpy(longer, good, len);
    memcpy(longer + len, "extra", 5);
    spit(p[1], longer, len + 5);
    free(longer);
    expect_refused(n.g, p[1], "5 unexpected bytes after its checksum", NULL,
                   "bytes after the checksum");
    expect(hyfi_load_params(n.g, p[0]), HYFI_OK, "the sound file loads");

    /* A symbolic link is written through: the link stays, its target is
     * replaced (also through a chain of links and to a missing target). */
    struct stat st;
    snprintf(p[1], sizeof p[1], "%s/link.hyfi", dir);
    tu_check(symlink("params.hyfi", p[1]) != 0, "symlink");
    spit(p[0], "old", 3);
    expect(hyfi_save_params(n.g, p[1]), HYFI_OK, "save through a relative symbolic link");
    tu_check(lstat(p[1], &st) != 0 || !S_ISLNK(st.st_mode), "the link is still a link");
    tu_check(lstat(p[0], &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != len,
             "the link's target holds the parameters");
    snprintf(p[2], sizeof p[2], "%s/link2.hyfi", dir);
    tu_check(symlink(p[1], p[2]) != 0, "symlink");
    spit(p[0], "old", 3);
    expect(hyfi_save_params(n.g, p[2]), HYFI_OK, "save through two links (one absolute)");
    tu_check(lstat(p[0], &st) != 0 || (size_t)st.st_size != len, "the last target is written");
    snprintf(p[2], sizeof p[2], "%s/sub", dir);
    mkdir(p[2], 0755);
    snprintf(p[2], sizeof p[2], "%s/dangling.hyfi", dir);
    tu_check(symlink("sub/new.hyfi", p[2]) != 0, "symlink");
    expect(hyfi_save_params(n.g, p[2]), HYFI_OK, "save through a link to a missing file");
    snprintf(p[3], sizeof p[3], "%s/sub/new.hyfi", dir);
    tu_check(!same_file(p[3], p[0]), "the missing file is created with the parameters");
    tu_check(lstat(p[2], &st) != 0 || !S_ISLNK(st.st_mode), "the dangling link is still a link");

    /* Not regular files: refused, left alone. */
    snprintf(p[1], sizeof p[1], "%s/fifo", dir);
    tu_check(mkfifo(p[1], 0644) != 0, "mkfifo");
    hyfi_status s = hyfi_save_params(n.g, p[1]);
    printf("save to a fifo: %s: %s\n", hyfi_status_name(s), hyfi_last_error());
    tu_check(s != HYFI_ERR_IO || !strstr(hyfi_last_error(), "a fifo, not a regular file"),
             "save to a fifo refused");
    tu_check(lstat(p[1], &st) != 0 || !S_ISFIFO(st.st_mode), "the fifo is left alone");
    snprintf(p[2], sizeof p[2], "%s/null.hyfi", dir);
    tu_check(symlink("/dev/null", p[2]) != 0, "symlink");
    s = hyfi_save_params(n.g, p[2]);
    printf("save to a link to /dev/null: %s: %s\n", hyfi_status_name(s), hyfi_last_error());
    tu_check(s != HYFI_ERR_IO || !strstr(hyfi_last_error(), "a device, not a regular file"),
             "save to a device refused");
    tu_check(lstat(p[2], &st) != 0 || !S_ISLNK(st.st_mode), "the link to the device stays");
    tu_check(stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode), "/dev/null is left alone");
    snprintf(p[2], sizeof p[2], "%s/sub", dir);
    s = hyfi_save_params(n.g, p[2]);
    printf("save to a folder: %s: %s\n", hyfi_status_name(s), hyfi_last_error());
    tu_check(s != HYFI_ERR_IO || !strstr(hyfi_last_error(), "a folder, not a regular file"),
             "save to a folder refused");

    /* A save killed while writing (SIGXFSZ, at the file size limit) leaves the
     * previous file as it was and no temporary. */
    expect(hyfi_save_params(n.g, p[0]), HYFI_OK, "save");
    snprintf(p[1], sizeof p[1], "%s/before.hyfi", dir);
    char *b = slurp(p[0], &len);
    spit(p[1], b, len);
    free(b);
    char *args[] = {(char *)self, "--save-and-crash", p[0], NULL};
    pid_t pid;
    int wst = 0;
    if (posix_spawn(&pid, self, NULL, NULL, args, environ) != 0 || waitpid(pid, &wst, 0) != pid) {
        tu_check(1, "spawn");
    } else {
        printf("save killed while writing: %s %d\n", WIFSIGNALED(wst) ? "signal" : "exit",
               WIFSIGNALED(wst) ? WTERMSIG(wst) : WEXITSTATUS(wst));
        tu_check(!WIFSIGNALED(wst) || WTERMSIG(wst) != SIGXFSZ, "the save was killed");
        tu_check(!same_file(p[0], p[1]), "the killed save left the previous file intact");
        tu_check(count_names(dir, ".tmp") != 0, "the killed save left no temporary");
    }

    /* Temporaries of dead processes of this host are removed by the next
     * save; those of live processes, other hosts and other files stay. */
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    const char *fmt[] = {"%s/params.hyfi.tmp.%ld@%s", "%s/params.hyfi.tmp.%ld@%s.other",
                         "%s/other.hyfi.tmp.%ld@%s", "%s/params.hyfi.tmp.%ld@%s"};
    for (int k = 0; k < 4; k++) {
        char t[600];
        snprintf(t, sizeof t, fmt[k], dir, k == 3 ? 1L : (long)dead, host);
        spit(t, "partial", 7);
    }
    expect(hyfi_save_params(n.g, p[0]), HYFI_OK, "save beside stale temporaries");
    printf("temporaries after the save: %d\n", count_names(dir, ".tmp."));
    tu_check(count_names(dir, "params.hyfi.tmp.") != 2 || count_names(dir, "other.hyfi.tmp.") != 1,
             "only the dead process's temporary of this file is removed");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    free(good);
    hyfi_graph_destroy(n.g);
}

/* Child of test_param_files: save under a file size limit below the file's
 * size; SIGXFSZ kills the process in the middle of writing. */
static int save_and_crash(const char *path)
{
    hyfi_ctx_config cfg = {.device = HYFI_DEVICE_CPU, .mpi = 0, .ncpus = 1};
    hyfi_ctx *ctx;
    testnet n;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK || testnet_build(ctx, &n, 0) ||
        hyfi_graph_compile(n.g, n.loss, NULL) != HYFI_OK)
        return 2;
    struct rlimit core = {0, 0}, size = {1024, 1024};
    setrlimit(RLIMIT_CORE, &core);
    setrlimit(RLIMIT_FSIZE, &size);
    hyfi_save_params(n.g, path);
    return 3; /* not killed */
}

static void test_errors(hyfi_ctx *ctx)
{
    hyfi_graph *g;
    hyfi_graph_create(ctx, 1, &g);
    hyfi_tensor *x = hyfi_input(g, "x", 2, 3, 8, 8);
    hyfi_tensor *h = hyfi_conv2d(g, "c", x, (hyfi_conv2d_params){.out_channels = 4,
                                                                  .kernel_h = 3, .kernel_w = 3,
                                                                  .groups = 2});
    expect(hyfi_graph_status(g), HYFI_ERR_SHAPE, "groups not dividing channels");
    tu_check(h != NULL, "failed builder returns NULL");
    h = hyfi_relu(g, "r", h); /* NULL propagates, first error kept */
    tu_check(strstr(hyfi_graph_error(g), "groups") == NULL, "first error is sticky");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 8, 8);
    hyfi_conv2d(g, "x", x, (hyfi_conv2d_params){.out_channels = 4, .kernel_h = 3, .kernel_w = 3});
    expect(hyfi_graph_status(g), HYFI_ERR_ARG, "duplicate name");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 4, 4);
    hyfi_conv2d(g, "c", x, (hyfi_conv2d_params){.out_channels = 4, .kernel_h = 7, .kernel_w = 7});
    expect(hyfi_graph_status(g), HYFI_ERR_SHAPE, "kernel larger than image");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 4, 4);
    hyfi_tensor *y = hyfi_input(g, "y", 2, 4, 4, 4);
    hyfi_add(g, "a", x, y);
    expect(hyfi_graph_status(g), HYFI_ERR_SHAPE, "add of different shapes");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 4, 4);
    {
        hyfi_tensor *many[40];
        for (int i = 0; i < 40; i++) many[i] = x;
        hyfi_concat(g, "cat", many, 40);
    }
    expect(hyfi_graph_status(g), HYFI_ERR_UNSUPPORTED, "concat of 40 inputs");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 4, 4);
    hyfi_tensor *lab = hyfi_labels(g, "l", 3);
    h = hyfi_fc(g, "fc", x, (hyfi_fc_params){.out_features = 10, .bias = true});
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, lab);
    expect(hyfi_graph_status(g), HYFI_ERR_SHAPE, "labels for another batch size");
    expect(hyfi_graph_compile(g, loss, NULL), HYFI_ERR_SHAPE, "compile after a builder error");
    hyfi_graph_destroy(g);

    hyfi_graph_create(ctx, 1, &g);
    x = hyfi_input(g, "x", 2, 3, 4, 4);
    lab = hyfi_labels(g, "l", 2);
    h = hyfi_fc(g, "fc", x, (hyfi_fc_params){.out_features = 10, .bias = true});
    loss = hyfi_softmax_cross_entropy(g, "loss", h, lab);
    expect(hyfi_train_step(g, NULL), HYFI_ERR_STATE, "step before compile");
    expect(hyfi_graph_compile(g, h, NULL), HYFI_ERR_ARG, "loss that is not a loss");
    hyfi_train_config bad = {.lr = -1};
    expect(hyfi_graph_compile(g, loss, &bad), HYFI_ERR_ARG, "negative learning rate");
    expect(hyfi_graph_compile(g, loss, NULL), HYFI_OK, "compile");
    hyfi_relu(g, "late", x);
    expect(hyfi_graph_status(g), HYFI_ERR_STATE, "builder after compile");
    float data[96] = {0};
    expect(hyfi_set_input(g, x, data, 95), HYFI_ERR_SHAPE, "input of the wrong size");
    int32_t labels[2] = {3, 10};
    expect(hyfi_set_labels(g, lab, labels, 2), HYFI_ERR_DATA, "label out of range");
    expect(hyfi_load_params(g, "/nonexistent"), HYFI_ERR_IO, "load of a missing file");
    hyfi_graph_destroy(g);

    hyfi_ctx *second = (hyfi_ctx *)&second;
    expect(hyfi_ctx_create(NULL, &second), HYFI_ERR_STATE, "second context");
    tu_check(second != NULL || !strstr(hyfi_last_error(), "already exists"),
             "a second context is refused with NULL and names the first");
}

/* The configuration defaults: what NULL means, and a zeroed struct keeps its
 * old meaning (hyfi_train_config: refused for its lr 0). */
static void test_config_defaults(hyfi_ctx *ctx)
{
    const hyfi_ctx_config cc = hyfi_ctx_config_default();
    tu_check(cc.device != HYFI_DEVICE_AUTO || cc.ncpus > 0 || cc.ncuda >= 0 || cc.mpi != -1 ||
                 cc.scheduler || cc.cpu_threads || cc.bind_workers || cc.verbose ||
                 cc.comm_stats || cc.trace_dir || cc.watchdog_s,
             "hyfi_ctx_config_default: auto device, every GPU, MPI when under mpiexec");
    const hyfi_train_config tc = hyfi_train_config_default();
    tu_check(tc.lr != 0.01f || tc.momentum != 0 || tc.weight_decay != 0,
             "hyfi_train_config_default: lr 0.01, plain SGD");
    float loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) { /* the default and NULL train alike */
        testnet n;
        if (testnet_build(ctx, &n, 0)) {
            tu_check(1, "build");
            return;
        }
        if (k == 0) {
            expect(hyfi_graph_compile(n.g, n.loss, &(hyfi_train_config){0}), HYFI_ERR_ARG,
                   "zeroed train config (lr 0)");
            expect(hyfi_graph_compile(n.g, n.loss, &tc), HYFI_OK, "default train config");
        } else {
            expect(hyfi_graph_compile(n.g, n.loss, NULL), HYFI_OK, "train config NULL");
        }
        for (int step = 0; step < 2; step++) {
            testnet_batch(&n, 5 + (uint64_t)step);
            tu_check(hyfi_train_step(n.g, &loss[k]) != HYFI_OK, "train step");
        }
        hyfi_graph_destroy(n.g);
    }
    printf("losses after 2 steps: default %.7f, NULL %.7f\n", loss[0], loss[1]);
    tu_check(!(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[1])),
             "the default train config is what NULL gives");
}

/* Op summaries: parameter counts add up, conv FLOPs follow the formula. */
static void test_op_info(hyfi_ctx *ctx)
{
    testnet n;
    if (testnet_build(ctx, &n, 0)) {
        tu_check(1, "build");
        return;
    }
    size_t params = 0;
    int nops = hyfi_graph_op_count(n.g);
    for (int i = 0; i < nops; i++) {
        hyfi_op_info info;
        tu_check(hyfi_graph_op_info(n.g, i, &info) != HYFI_OK, "op info");
        params += info.params;
        if (strcmp(info.name, "c1") == 0) {
            /* 3 -> 6 channels, 3x3, 9x8 output, batch 4, with bias */
            double want = 2.0 * TN_BATCH * 6 * 9 * 8 * 3 * 9 + TN_BATCH * 6 * 9 * 8;
            tu_check(info.flops != want || info.params != 6 * 3 * 9 + 6 ||
                         strcmp(info.kind, "conv2d") != 0, "conv2d info");
        }
    }
    printf("%d ops, %zu parameters\n", nops, params);
    tu_check(params != hyfi_param_numel(n.g), "op parameters add up to the graph's");
    hyfi_op_info info;
    tu_check(hyfi_graph_op_info(n.g, nops, &info) != HYFI_ERR_ARG, "op index out of range");
    hyfi_graph_destroy(n.g);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--save-and-crash") == 0) return save_and_crash(argv[2]);
    hyfi_ctx_config cfg = hyfi_ctx_config_default();
    cfg.device = HYFI_DEVICE_CPU;
    cfg.mpi = 0;
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    test_config_defaults(ctx);
    test_op_info(ctx);
    test_gradients(ctx);
    test_training_and_io(ctx);
    test_non_finite(ctx);
    test_param_files(ctx, "/proc/self/exe");
    test_errors(ctx);
    hyfi_ctx_destroy(ctx);
    /* one at a time: without MPI, a new context after the first is destroyed */
    tu_ctx_env(&cfg);
    expect(hyfi_ctx_create(&cfg, &ctx), HYFI_OK, "a context after hyfi_ctx_destroy");
    hyfi_ctx_destroy(ctx);
    return tu_finish();
}
