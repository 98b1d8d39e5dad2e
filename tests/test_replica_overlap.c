/* The gradient all-reduce can overlap the backward pass, and does.
 *
 *   mpiexec -n 2 test_replica_overlap
 *
 * ResNet-20 v1 (32x32, 2 x 32 images) with 2 data-parallel replicas, one per
 * rank, one CPU worker each; per bucket, per parameter and ring all-reduces,
 * and GEMS MAST (2 copies mirrored over the 2 ranks, 2 stages). On each rank:
 *   - in the compiled train program (its listing, hyfi_plan_config.dump_programs), with
 *     the dependencies StarPU derives from the submission order (read after
 *     write, write after read or write), no all-reduce task of the
 *     classifier's bias gradient (the first gradient the backward
 *     completes) and some all-reduce task that adds or copies the other
 *     replica's gradient depend on the backward of the stem convolution (the
 *     last one): communication of late layers may run during the backward of
 *     early ones instead of following the whole backward;
 *   - with task records on, per layer, the all-reduce starts after that
 *     layer's gradient is done (its last backward task has ended): the
 *     dependency is real.
 * Prints, from the task records, the backward span and the all-reduce tasks
 * that ran inside it (how much overlap this run got: timing, not asserted). */
#include "hyfi.h"
#include "tu_env.h"
#include "models.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ends_with_mb(const char *name, const char *prefix, const char *pass)
{
    /* "<prefix>.<pass>" optionally followed by ".mb<k>" or ".t<k>" */
    const size_t n = strlen(prefix);
    return strncmp(name, prefix, n) == 0 && name[n] == '.' && strncmp(name + n + 1, pass, strlen(pass)) == 0;
}

/* In the train program listed in `path`: does no task named `to`* (and does
 * some task named `remote`*, with ".add.", ".copy.", ".rs" or ".ag" in its
 * name) depend on a task named `from`.bwd*? A task depends on another
 * through its buffers as StarPU orders them: a read after the last write, a
 * write after the last write and the reads since. Taint flows forward in
 * submission order: per handle, whether its last writer, or a reader since,
 * depends on the stem. Returns 0 when the listing holds no train program. */
static int independent(const char *path, const char *from, const char *to, int *n_to,
                       int *remote_free)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t cap = 0;
    unsigned char *lw = NULL, *rd = NULL; /* per handle: last writer, a reader since: tainted */
    char line[8192];
    int in_train = 0, ok = 1, seen = 0;
    *n_to = 0;
    *remote_free = 0;
    const size_t nf = strlen(from), nt = strlen(to);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "program ", 8)) {
            in_train = !strncmp(line, "program train:", 14);
            seen |= in_train;
            continue;
        }
        if (!in_train) continue;
        char kind[16], cl[96], name[256];
        if (sscanf(line, "%15s %95s %255s", kind, cl, name) != 3) continue;
        const char *bar = strchr(line, '|');
        if (!bar) continue;
        int tainted = !strncmp(name, from, nf) && !strncmp(name + nf, ".bwd", 4);
        for (int pass = 0; pass < 2; pass++) {
            const char *q = bar + 1;
            char mode[8];
            int id, used;
            while (sscanf(q, " %7[A-Z]:%d%n", mode, &id, &used) == 2) {
                q += used;
                if (id < 0) continue;
                if ((size_t)id >= cap) {
                    size_t nc = cap ? cap : 1024;
                    while (nc <= (size_t)id) nc *= 2;
                    lw = realloc(lw, nc);
                    rd = realloc(rd, nc);
                    memset(lw + cap, 0, nc - cap);
                    memset(rd + cap, 0, nc - cap);
                    cap = nc;
                }
                const int read = !strcmp(mode, "R");
                if (pass == 0) tainted |= lw[id] || (!read && rd[id]);
                else if (read) rd[id] |= (unsigned char)tainted;
                else lw[id] = (unsigned char)tainted, rd[id] = 0;
            }
        }
        if (!strcmp(kind, "task") && strstr(name, ".allreduce.")) {
            if (!strncmp(name, to, nt)) {
                (*n_to)++;
                if (tainted) ok = 0;
            }
            const int remote = strstr(name, ".add.") || strstr(name, ".copy.") ||
                               strstr(name, ".rs") || strstr(name, ".ag");
            if (remote && !tainted) (*remote_free)++;
        }
    }
    fclose(f);
    free(lw);
    free(rd);
    return seen && ok;
}

static int run(hyfi_ctx *ctx, const hyfi_plan_config *plan, const char *label)
{
    const int rank = hyfi_ctx_rank(ctx);
    model_config mc = model_config_default();
    mc.kind = MODEL_RESNET;
    mc.depth = 20;
    mc.resnet_version = 1;
    mc.num_classes = 10;
    const int B = 64, H = 32;
    hyfi_graph *g;
    char err[256];
    hyfi_graph_create(ctx, 3, &g);
    hyfi_tensor *x = hyfi_input(g, "image", B, 3, H, H);
    hyfi_tensor *y = hyfi_labels(g, "label", B);
    hyfi_tensor *loss = hyfi_softmax_cross_entropy(g, "loss", hyfi_model_build(g, &mc, x, err, sizeof err), y);
    hyfi_train_config tc = {.lr = 0.05f, .momentum = 0.9f};
    /* the compiled programs' listing, for the dependency check */
    char listing[256], rank_listing[300];
    const char *tmp = getenv("TMPDIR");
    snprintf(listing, sizeof listing, "%s/replica_overlap.%ld.programs", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    snprintf(rank_listing, sizeof rank_listing, "%s.r%d", listing, rank);
    remove(rank_listing);
    hyfi_plan_config pc = *plan;
    pc.dump_programs = listing;
    const hyfi_status cs = hyfi_graph_set_plan(g, &pc) == HYFI_OK
                               ? hyfi_graph_compile(g, loss, &tc) : HYFI_ERR_ARG;
    if (cs != HYFI_OK) {
        printf("%s: compile failed: %s\n", label, hyfi_graph_error(g));
        tu_check(1, label);
        hyfi_graph_destroy(g);
        return 1;
    }
    const size_t nx = (size_t)B * 3 * H * H;
    float *xb = malloc(nx * sizeof *xb);
    int32_t yb[64];
    uint64_t st = 11;
    tu_fill(xb, nx, &st, -1.f, 1.f);
    for (int i = 0; i < B; i++) yb[i] = i % 10;
    hyfi_set_input(g, x, xb, nx);
    hyfi_set_labels(g, y, yb, B);
    float l;
    tu_check(hyfi_train_step(g, &l) != HYFI_OK, "warm-up step");
    hyfi_ctx_set_task_records(ctx, true);
    tu_check(hyfi_train_step(g, &l) != HYFI_OK, "recorded step");
    hyfi_ctx_set_task_records(ctx, false);
    const size_t n = hyfi_ctx_task_records(ctx, NULL, 0);
    hyfi_task_record *rec = malloc((n ? n : 1) * sizeof *rec);
    hyfi_ctx_task_records(ctx, rec, n);

    /* the first conv (stem) and the classifier */
    hyfi_op_info first;
    hyfi_graph_op_info(g, 0, &first);
    char fcw[128];
    /* the classifier's bias: the first parameter of the first bucket, whose
     * name a grouped pack names (engine/reduce.c, emit_slices) */
    snprintf(fcw, sizeof fcw, "%s.allreduce", hyfi_tensor_name(hyfi_param(g, hyfi_param_count(g) - 1)));
    double bwd0 = 1e300, bwd1 = -1, stem_end = -1, fc_ar = 1e300, ar_in = 0, ar_all = 0;
    int nar = 0, nar_in = 0, nremote_in = 0;
    for (size_t i = 0; i < n; i++) {
        const hyfi_task_record *r = &rec[i];
        if (strstr(r->name, ".bwd")) {
            if (r->start_us < bwd0) bwd0 = r->start_us;
            if (r->end_us > bwd1) bwd1 = r->end_us;
            if (ends_with_mb(r->name, first.name, "bwd") && r->end_us > stem_end) stem_end = r->end_us;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const hyfi_task_record *r = &rec[i];
        if (!strstr(r->name, ".allreduce.")) continue;
        nar++;
        ar_all += r->end_us - r->start_us;
        if (r->start_us < bwd1) {
            nar_in++;
            ar_in += r->end_us - r->start_us;
        }
        /* tasks that read the other replica's gradient (tree add/copy, ring steps) */
        const int remote = strstr(r->name, ".add.") || strstr(r->name, ".copy.") ||
                           strstr(r->name, ".rs") || strstr(r->name, ".ag");
        if (remote && r->end_us < bwd1) nremote_in++;
        if (!strncmp(r->name, fcw, strlen(fcw)) && r->start_us < fc_ar) fc_ar = r->start_us;
    }
    if (getenv("HYFI_TEST_VERBOSE"))
        for (size_t i = 0; i < n; i++)
            if (!strncmp(rec[i].name, "fc", 2) || strstr(rec[i].name, "stem"))
                printf("  rank %d: %-44s w%d %8.2f .. %8.2f ms\n", rank, rec[i].name, rec[i].worker,
                       (rec[i].start_us - bwd0) / 1e3, (rec[i].end_us - bwd0) / 1e3);
    /* per parameter: its all-reduce starts after its gradient's last backward task */
    int order_bad = 0;
    for (int p = 0; p < hyfi_param_count(g); p++) {
        const char *pn = hyfi_tensor_name(hyfi_param(g, p));
        char op[128], arp[140];
        snprintf(op, sizeof op, "%s", pn);
        char *dot = strrchr(op, '.');
        if (dot) *dot = 0; /* the op's name */
        snprintf(arp, sizeof arp, "%s.allreduce.", pn);
        double gdone = -1, ar0 = 1e300;
        for (size_t i = 0; i < n; i++) {
            if (ends_with_mb(rec[i].name, op, "bwd") && rec[i].end_us > gdone) gdone = rec[i].end_us;
            if (!strncmp(rec[i].name, arp, strlen(arp)) && rec[i].start_us < ar0) ar0 = rec[i].start_us;
        }
        if (gdone >= 0 && ar0 < 1e300 && ar0 < gdone) {
            if (order_bad < 3) printf("  rank %d: %s all-reduce at %.0f us before its backward ended at %.0f\n",
                                      rank, pn, ar0 - bwd0, gdone - bwd0);
            order_bad++;
        }
    }
    printf("%s, rank %d: %zu tasks recorded; backward %.1f ms; stem backward ends at +%.1f ms; "
           "classifier all-reduce starts at +%.1f ms; %d of %d all-reduce tasks (%.1f of %.1f ms) "
           "start before the backward ends, %d of them with the other rank's data done by then\n",
           label, rank, n, (bwd1 - bwd0) / 1e3, (stem_end - bwd0) / 1e3, (fc_ar - bwd0) / 1e3,
           nar_in, nar, ar_in / 1e3, ar_all / 1e3, nremote_in);
    char what[160];
    snprintf(what, sizeof what, "%s rank %d: records of backward and all-reduce tasks", label, rank);
    tu_check(nar == 0 || stem_end < 0 || fc_ar >= 1e300, what);
    snprintf(what, sizeof what, "%s rank %d: the classifier's all-reduce does not wait for the "
             "stem's backward", label, rank);
    int n_fc = 0, remote_free = 0;
    const int indep = independent(rank_listing, first.name, fcw, &n_fc, &remote_free);
    remove(rank_listing);
    printf("%s, rank %d: program: %d all-reduce tasks of %s, none after the stem's backward: %s; "
           "%d all-reduce tasks with the other replica's data independent of it\n",
           label, rank, n_fc, fcw, indep ? "yes" : "no", remote_free);
    tu_check(!indep || n_fc == 0, what);
    snprintf(what, sizeof what, "%s rank %d: gradients from the other rank can be summed while "
             "the backward runs", label, rank);
    tu_check(remote_free == 0, what);
    snprintf(what, sizeof what, "%s rank %d: every all-reduce starts after its gradient is done",
             label, rank);
    tu_check(order_bad != 0, what);
    free(rec);
    free(xb);
    hyfi_graph_destroy(g);
    return 0;
}

int main(void)
{
    hyfi_ctx_config cfg = hyfi_ctx_config_default(); /* MPI under mpiexec */
    cfg.device = HYFI_DEVICE_CPU;
    hyfi_ctx *ctx;
    tu_ctx_env(&cfg);
    if (hyfi_ctx_create(&cfg, &ctx) != HYFI_OK) {
        printf("context: %s\n", hyfi_last_error());
        return 1;
    }
    if (hyfi_ctx_nranks(ctx) != 2) {
        printf("run with mpiexec -n 2\n");
        hyfi_ctx_destroy(ctx);
        return 2;
    }
    run(ctx, &(hyfi_plan_config){.data_parallel = 2}, "data-parallel 2 (buckets)");
    run(ctx, &(hyfi_plan_config){.data_parallel = 2, .bucket_kib = -1},
        "data-parallel 2, per parameter");
    run(ctx, &(hyfi_plan_config){.data_parallel = 2, .allreduce = HYFI_ALLREDUCE_RING},
        "data-parallel 2, ring");
    run(ctx, &(hyfi_plan_config){.stages = 2, .parts = 2, .gems = HYFI_GEMS_MAST},
        "GEMS MAST, 2 stages, 2 micro-batches");
    hyfi_ctx_destroy(ctx);
    return tu_finish();
}
