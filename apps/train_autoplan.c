/* hyfi-train --plan auto: the plan chosen by hyfi_plan_search (include/
 * hyfi_autoplan.h) for the model, the batch and the machine, then run exactly
 * as if its flags had been typed; --explain prints the best plans and why, and
 * exits. The machine is this run's (ranks, CUDA workers or cores, memory), or
 * one described by --plan-ranks and the other --plan-* flags, to plan a
 * machine this host is not (with --explain). The flags of a plan that the
 * user gives constrain the search. */
#include "train_run.h"

#include <hyfi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- the flags */

static int bad(char *msg, size_t len, const char *fmt, const char *flag, const char *val)
{
    snprintf(msg, len, fmt, flag, val);
    return -1;
}

static int num(const char *flag, const char *val, double lo, double hi, double *out, char *msg,
               size_t len)
{
    char *end;
    errno = 0;
    const double v = strtod(val, &end);
    if (errno || end == val || *end || !(v >= lo && v <= hi)) {
        char f[96];
        snprintf(f, sizeof f, "%%s '%%s' is not valid: expected a number in %g..%g", lo, hi);
        return bad(msg, len, f, flag, val);
    }
    *out = v;
    return 0;
}

int train_autoplan_flag(const char *flag, const char *val, train_options *o, char *msg,
                        size_t len)
{
    hyfi_machine *m = &o->plan_machine;
    double v = 0;
    if (!strcmp(flag, "--plan")) {
        if (strcmp(val, "auto") && strcmp(val, "manual"))
            return bad(msg, len, "%s '%s' is not known; valid: auto (search the plan), manual "
                                 "(the flags' plan, the default)", flag, val);
        o->plan_auto = !strcmp(val, "auto");
        return 0;
    }
    if (!strcmp(flag, "--plan-device")) {
        if (!strcmp(val, "cpu")) m->device = HYFI_MACHINE_CPU;
        else if (!strcmp(val, "v100")) m->device = HYFI_MACHINE_V100;
        else if (!strcmp(val, "h100")) m->device = HYFI_MACHINE_H100;
        else return bad(msg, len, "%s '%s' is not known; valid: cpu, v100, h100", flag, val);
        o->plan_device_set = 1;
        return 0;
    }
    if (!strcmp(flag, "--plan-model")) {
        if (!*val) return bad(msg, len, "%s needs a file of analytic fits%s", flag, "");
        m->model_file = val;
        return 0;
    }
    static const struct {
        const char *flag;
        double lo, hi;
    } nums[] = {{"--plan-ranks", 1, 1 << 20}, {"--plan-gpus-per-rank", 1, 4096},
                {"--plan-ranks-per-node", 1, 1 << 20}, {"--plan-cores", 1, 1 << 16},
                {"--plan-mem-gb", 1e-3, 1e9}, {"--plan-link-gbs", 1e-6, 1e6},
                {"--plan-link-us", 1e-3, 1e9}, {"--plan-top", 1, 1000}};
    for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) {
        if (strcmp(flag, nums[k].flag)) continue;
        if (num(flag, val, nums[k].lo, nums[k].hi, &v, msg, len)) return -1;
        if ((k < 4 || k == 7) && v != (int)v)
            return bad(msg, len, "%s '%s' is not valid: expected a whole number", flag, val);
        switch (k) {
        case 0: m->ranks = (int)v; break;
        case 1: m->places_per_rank = (int)v; break;
        case 2: m->ranks_per_node = (int)v; break;
        case 3: m->cores_per_rank = (int)v; break;
        case 4: o->plan_mem_gb = v; break;
        case 5: m->link_gbs = v; break;
        case 6: m->link_us = v; break;
        default: o->plan_top = (int)v; break;
        }
        return 0;
    }
    return 1;
}

int train_autoplan_check(const train_options *o, char *msg, size_t len)
{
    static const char *const machine[] = {"--plan-ranks", "--plan-gpus-per-rank",
                                          "--plan-ranks-per-node", "--plan-cores",
                                          "--plan-device", "--plan-mem-gb", "--plan-model",
                                          "--plan-link-gbs", "--plan-link-us", "--plan-top"};
    const char *given = NULL;
    for (size_t k = 0; k < sizeof machine / sizeof *machine && !given; k++)
        if (train_given(o, machine[k])) given = machine[k];
    if (!o->plan_auto && (given || o->explain)) {
        snprintf(msg, len, "%s describes the automatic plan's search, which needs --plan auto; "
                 "add --plan auto, or leave %s out", given ? given : "--explain",
                 given ? given : "--explain");
        return -1;
    }
    const char *described = NULL;
    for (size_t k = 1; k < 4 && !described; k++)
        if (train_given(o, machine[k])) described = machine[k];
    if (!train_given(o, "--plan-ranks") && described) {
        snprintf(msg, len, "%s describes a machine to plan for, which needs --plan-ranks N (its "
                 "MPI ranks); give it, or leave %s out to plan for this run's machine",
                 described, described);
        return -1;
    }
    if (train_given(o, "--plan-ranks") && !o->explain) {
        snprintf(msg, len, "--plan-ranks %d describes a machine to plan for, not this run's: add "
                 "--explain to print its best plans, or leave the --plan-* machine flags out to "
                 "train with the plan for the machine mpiexec gives", o->plan_machine.ranks);
        return -1;
    }
    if (o->plan_auto && (o->dry_run || o->resume)) {
        snprintf(msg, len, "--plan auto with %s: give the plan's flags instead (the line "
                 "'hyfi-train: plan auto: ...' of the first run prints them)",
                 o->dry_run ? "--dry-run" : "--resume");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- the plan */

static const char *const slice_names[] = {"square", "vertical", "horizontal"};
static const char *const gems_names[] = {"none", "mast", "master"};
static const char *const rc_names[] = {"none", "stage", "layer"};

static int replicas(const hyfi_plan_config *p)
{
    const int copies = p->gems == HYFI_GEMS_NONE   ? 1
                       : p->gems == HYFI_GEMS_MAST ? 2
                                                   : 2 * (p->replications > 1 ? p->replications : 1);
    return copies * (p->data_parallel > 1 ? p->data_parallel : 1);
}

/* The plan as hyfi-train's flags (B: the global batch). */
static void plan_flags(const hyfi_plan_config *p, int B, char *buf, size_t len)
{
    const int S = p->stages > 1 ? p->stages : 1;
    size_t n = (size_t)snprintf(buf, len, "--batch-size %d --split-size %d --balance ",
                                B / replicas(p), S);
    for (int s = 0; s < S && n < len; s++)
        n += (size_t)snprintf(buf + n, len - n, "%s%d", s ? "," : "", p->balance[s]);
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, " --parts %d --schedule %s", p->parts > 1 ? p->parts : 1,
                              p->schedule == HYFI_SCHEDULE_1F1B ? "1f1b" : "gpipe");
    if (n < len && p->spatial_stages > 0)
        n += (size_t)snprintf(buf + n, len - n, " --spatial-size %d --num-spatial-parts %d "
                              "--slice-method %s", p->spatial_stages, p->spatial_parts,
                              slice_names[p->slice % 3]);
    if (n < len && p->gems != HYFI_GEMS_NONE)
        n += (size_t)snprintf(buf + n, len - n, " --gems %s", gems_names[p->gems % 3]);
    if (n < len && p->replications > 1)
        n += (size_t)snprintf(buf + n, len - n, " --replications %d", p->replications);
    if (n < len)
        snprintf(buf + n, len - n, " --data-parallel %d --recompute %s",
                 p->data_parallel > 1 ? p->data_parallel : 1, rc_names[p->recompute % 3]);
}

static void fmt_bytes(double b, char *buf, size_t len)
{
    if (b >= 1e9) snprintf(buf, len, "%.1f GB", b / 1e9);
    else snprintf(buf, len, "%.0f MB", b / 1e6);
}

/* The machine: this run's, or --plan-ranks' and the other flags'. */
static void machine(const run *r, hyfi_machine *m)
{
    const train_options *o = &r->o;
    if (train_given(o, "--plan-ranks")) {
        *m = o->plan_machine;
        if (!o->plan_device_set)
            m->device = train_given(o, "--plan-gpus-per-rank") ? HYFI_MACHINE_H100
                                                               : HYFI_MACHINE_CPU;
        if (m->device == HYFI_MACHINE_CPU && o->plan_mem_gb <= 0) {
            /* CPU ranks of this host's kind: its memory, shared by a node's ranks */
            const long pages = sysconf(_SC_PHYS_PAGES), ps = sysconf(_SC_PAGE_SIZE);
            const int per = m->ranks_per_node ? m->ranks_per_node : m->ranks;
            m->rank_mem_bytes = o->mem_limit_mb > 0 ? o->mem_limit_mb * 1e6
                                : pages > 0 && ps > 0 ? (double)pages * ps / per : 0;
        }
    } else {
        hyfi_machine_from_ctx(r->ctx, m);
        if (o->plan_device_set && (m->device != HYFI_MACHINE_CPU) ==
                                      (o->plan_machine.device != HYFI_MACHINE_CPU))
            m->device = o->plan_machine.device;
        m->model_file = o->plan_machine.model_file;
        m->link_gbs = o->plan_machine.link_gbs;
        m->link_us = o->plan_machine.link_us;
    }
    if (o->plan_mem_gb > 0) {
        if (m->device == HYFI_MACHINE_CPU) m->rank_mem_bytes = o->plan_mem_gb * 1e9;
        else m->place_mem_bytes = o->plan_mem_gb * 1e9;
    }
}

/* The search's constraints: the plan flags given. */
static void constraints(const train_options *o, hyfi_plan_search_config *sc)
{
    hyfi_plan_config *p = &sc->fixed;
    *p = (hyfi_plan_config){.stages = o->split_size, .balance = o->balance, .parts = o->parts,
                            .schedule = o->schedule, .deterministic = o->deterministic,
                            .spatial_stages = o->spatial_size, .spatial_parts = o->spatial_parts,
                            .slice = o->slice, .fused_layers = o->fused_layers, .gems = o->gems,
                            .replications = o->replications, .data_parallel = o->data_parallel,
                            .allreduce = o->allreduce, .bucket_kib = o->bucket_kib,
                            .recompute = o->recompute};
    static const struct {
        const char *flag;
        unsigned fix;
    } f[] = {{"--split-size", HYFI_FIX_STAGES}, {"--balance", HYFI_FIX_BALANCE | HYFI_FIX_STAGES},
             {"--parts", HYFI_FIX_PARTS}, {"--schedule", HYFI_FIX_SCHEDULE},
             {"--spatial-size", HYFI_FIX_SPATIAL_STAGES},
             {"--num-spatial-parts", HYFI_FIX_SPATIAL_PARTS}, {"--slice-method", HYFI_FIX_SLICE},
             {"--gems", HYFI_FIX_GEMS}, {"--replications", HYFI_FIX_GEMS},
             {"--data-parallel", HYFI_FIX_DATA_PARALLEL}, {"--recompute", HYFI_FIX_RECOMPUTE}};
    for (size_t k = 0; k < sizeof f / sizeof *f; k++)
        if (train_given(o, f[k].flag)) sc->fix |= f[k].fix;
    sc->precision = o->precision;
    sc->top = o->plan_top > 0 ? o->plan_top : o->explain ? 5 : 1;
}

static void print_explain(const run *r, const hyfi_machine *m, const hyfi_plan_search_result *res)
{
    static const char *const dev[] = {"CPU", "V100", "H100"};
    char what[200], mem[32], flags[512];
    model_describe(&r->o.mc, what, sizeof what);
    const hyfi_plan_candidate *any = res->n ? &res->c[0] : res->npruned ? &res->pruned[0] : NULL;
    fmt_bytes(any ? any->mem_limit_bytes : 0, mem, sizeof mem);
    const int G = m->places_per_rank ? m->places_per_rank : m->device == HYFI_MACHINE_CPU ? 8 : 4;
    char per[64];
    if (m->device == HYFI_MACHINE_CPU)
        snprintf(per, sizeof per, "%d cores, up to %d places", m->cores_per_rank ? m->cores_per_rank
                                                                                : 2, G);
    else snprintf(per, sizeof per, "%d %s GPU%s", G, dev[m->device % 3], G == 1 ? "" : "s");
    printf("hyfi-train: automatic plans for %s, %dx%d images, global batch %d, on %d rank%s "
           "(%s each; %s per %s)\n", what, r->H, r->W, r->B, m->ranks, m->ranks == 1 ? "" : "s",
           per, any && any->mem_limit_bytes > 0 ? mem : "memory unchecked",
           m->device == HYFI_MACHINE_CPU ? "rank" : "GPU");
    printf("hyfi-train: %ld plans predicted, %ld built, %ld refused by the engine, %ld over "
           "memory, in %.2f s\n", res->enumerated, res->built, res->invalid, res->over_memory,
           res->seconds);
    printf("%4s %10s %9s %10s %10s  %-58s %s\n", "rank", "images/s", "step ms", "mem/place",
           "mem/rank", "limit", "flags");
    for (int i = 0; i < res->n + res->npruned; i++) {
        const int over = i >= res->n;
        const hyfi_plan_candidate *c = over ? &res->pruned[i - res->n] : &res->c[i];
        if (i == res->n)
            printf("faster plans over the memory (%s per %s):\n", mem,
                   m->device == HYFI_MACHINE_CPU ? "rank" : "GPU");
        char pb[32], rb[32], no[16];
        fmt_bytes(c->place_bytes, pb, sizeof pb);
        fmt_bytes(c->rank_bytes, rb, sizeof rb);
        plan_flags(&c->plan, r->B, flags, sizeof flags);
        snprintf(no, sizeof no, "%d", i + 1);
        printf("%4s %10.2f %9.1f %10s %10s  %-58.58s %s\n", over ? "-" : no, c->images_per_s,
               c->step_s * 1e3, pb, rb, over ? "memory" : c->why, flags);
    }
    if (res->n > 0) {
        const hyfi_plan_candidate *w = &res->c[0];
        printf("why: the first plan is predicted fastest, %s", w->why);
        if (res->n > 1)
            printf("; the next is %.1f%% slower (%s)", 100 * (res->c[1].step_s / w->step_s - 1),
                   res->c[1].why);
        printf("\n");
    }
}

int train_autoplan(run *r)
{
    train_options *o = &r->o;
    hyfi_machine m;
    machine(r, &m);
    hyfi_plan_search_config sc = {0};
    constraints(o, &sc);
    hyfi_plan_search_result *res = NULL;
    const hyfi_status st = hyfi_plan_search(r->g, r->loss, &m, &sc, &res);
    if (o->explain && res) print_explain(r, &m, res);
    if (st != HYFI_OK) {
        lib_fail("--plan auto (hyfi_plan_search)", st, r->g);
        hyfi_plan_search_free(res);
        return config_error(st) || st == HYFI_ERR_NOMEM ? 2 : 1;
    }
    if (o->explain) {
        hyfi_plan_search_free(res);
        return 0;
    }
    /* the winner, as if its flags had been typed (the global batch kept) */
    const hyfi_plan_config *p = &res->c[0].plan;
    char flags[512];
    plan_flags(p, r->B, flags, sizeof flags);
    printf("hyfi-train: plan auto: %s (predicted %.1f images/s; %s)\n", flags,
           res->c[0].images_per_s, res->c[0].why);
    fflush(stdout);
    const int S = p->stages > 1 ? p->stages : 1;
    int *bal = malloc((size_t)S * sizeof *bal);
    if (!bal) {
        hyfi_plan_search_free(res);
        report(false, "out of memory choosing the plan");
        return 1;
    }
    memcpy(bal, p->balance, (size_t)S * sizeof *bal);
    free(o->balance);
    o->balance = bal, o->nbalance = S, o->split_size = S;
    o->parts = p->parts > 1 ? p->parts : 1, o->schedule = p->schedule;
    o->spatial_size = p->spatial_stages, o->spatial_parts = p->spatial_parts;
    o->slice = p->slice, o->gems = p->gems, o->replications = p->replications;
    o->data_parallel = p->data_parallel, o->recompute = p->recompute;
    r->nrep = replicas(p);
    o->batch_size = r->B / r->nrep;
    hyfi_plan_search_free(res);
    return 0;
}
