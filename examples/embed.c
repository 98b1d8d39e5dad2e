/* embed.c: hyfi inside an application of its own, as an outside project
 * builds it against an installed hyfi:
 *
 *     cc -std=c11 embed.c $(pkg-config --cflags --libs hyfi) -o embed
 *
 * It builds a small network through the public API, sends the library's
 * messages to its own log (a callback; nothing of hyfi's goes to stderr),
 * trains a few steps on made-up data whose class is the sign of the image's
 * mean, and reads the logits back after an eval-mode forward. Exit status 0
 * when the loss went down. */
#include <hyfi.h>

#include <stdint.h>
#include <stdio.h>

enum { B = 16, H = 12, STEPS = 30 };

/* the application's log: counts and prefixes hyfi's messages */
static void app_log(void *user, hyfi_log_level level, const char *msg)
{
    int *n = user;
    (*n)++;
    printf("[app log, %s] %s\n", level == HYFI_LOG_ERROR     ? "error"
                                 : level == HYFI_LOG_WARNING ? "warning"
                                                             : "info",
           msg);
}

/* uniform in [0, 1) (a 64-bit LCG) */
static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*s >> 40) / (float)(1u << 24);
}

/* a batch: images of +-0.5 plus noise, label 1 where the mean is positive */
static void batch(float *x, int32_t *y, uint64_t *seed)
{
    for (int b = 0; b < B; b++) {
        const float sign = uniform(seed) < 0.5f ? 0.5f : -0.5f;
        y[b] = sign > 0;
        for (int i = 0; i < H * H; i++) x[b * H * H + i] = sign + uniform(seed) - 0.5f;
    }
}

int main(void)
{
    int messages = 0;
    hyfi_ctx_config cc = hyfi_ctx_config_default();
    cc.device = HYFI_DEVICE_CPU;
    cc.mpi = 0;
    cc.verbose = 1; /* the workers line and each step's, to the callback */
    cc.log = app_log;
    cc.log_user = &messages;
    hyfi_ctx *ctx;
    if (hyfi_ctx_create(&cc, &ctx) != HYFI_OK) {
        fprintf(stderr, "embed: %s\n", hyfi_last_error());
        return 1;
    }
    hyfi_graph *g;
    hyfi_graph_create(ctx, 1, &g);
    hyfi_tensor *x = hyfi_input(g, "image", B, 1, H, H);
    hyfi_tensor *y = hyfi_labels(g, "label", B);
    hyfi_tensor *h = hyfi_conv2d(g, "conv", x, (hyfi_conv2d_params){
        .out_channels = 8, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1});
    h = hyfi_relu(g, "relu", h);
    h = hyfi_global_avgpool(g, "gap", h);
    h = hyfi_fc(g, "fc", h, (hyfi_fc_params){.out_features = 2, .bias = true});
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", h, y);
    hyfi_train_config tc = {.lr = 0.1f, .momentum = 0.9f};
    if (hyfi_graph_status(g) != HYFI_OK || hyfi_graph_compile(g, loss, &tc) != HYFI_OK) {
        fprintf(stderr, "embed: %s\n", hyfi_graph_error(g));
        return 1;
    }
    float xs[B * H * H], first = 0, last = 0;
    int32_t ys[B];
    uint64_t seed = 7;
    for (int s = 0; s < STEPS; s++) {
        float l;
        batch(xs, ys, &seed);
        if (hyfi_set_input(g, x, xs, B * H * H) != HYFI_OK ||
            hyfi_set_labels(g, y, ys, B) != HYFI_OK || hyfi_train_step(g, &l) != HYFI_OK) {
            fprintf(stderr, "embed: %s\n", hyfi_last_error());
            return 1;
        }
        if (s == 0) first = l;
        last = l;
    }
    batch(xs, ys, &seed);
    float logits[B * 2];
    int right = 0;
    if (hyfi_set_input(g, x, xs, B * H * H) != HYFI_OK || hyfi_infer(g, NULL) != HYFI_OK ||
        hyfi_tensor_read(g, hyfi_tensor_find(g, "fc"), logits, B * 2) != HYFI_OK) {
        fprintf(stderr, "embed: %s\n", hyfi_last_error());
        return 1;
    }
    for (int b = 0; b < B; b++) right += (logits[2 * b + 1] > logits[2 * b]) == (ys[b] == 1);
    printf("embed: loss %.4f -> %.4f over %d steps; %d of %d held-out images right; "
           "%d messages through the log callback\n", first, last, STEPS, right, B, messages);
    hyfi_graph_destroy(g);
    hyfi_ctx_destroy(ctx);
    return last < first && messages > 0 ? 0 : 1;
}
