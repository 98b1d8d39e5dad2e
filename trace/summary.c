/* hyfi_trace_summarize: read a merged trace (read.c), compute its statistics
 * (stats.c), print them, and write summary.json (json.c) and timeline.svg
 * (svg.c). */
#include "tooling.h"

static void print_ranks(tt_writer *o, const trace_stats *s)
{
    const int W = s->W;
    for (int r = 0; r < s->R; r++) {
        hyfi_tt_printf(o, "  rank %d:", r);
        for (int w = 0; w < W; w++)
            if (s->busy[r * W + w] > 0)
                hyfi_tt_printf(o, " worker %d busy %.1f ms idle %.1f ms;", w, s->busy[r * W + w],
                        s->span_all - s->busy[r * W + w]);
        hyfi_tt_printf(o, "\n    compute by kind:");
        for (int k = 0; k < NKIND; k++)
            if (s->bykind[r * NKIND + k] > 0)
                hyfi_tt_printf(o, " %s %.1f", hyfi_tt_kind_names[k], s->bykind[r * NKIND + k]);
        hyfi_tt_printf(o, " ms\n");
        if (s->ov[2 * r] > 0)
            hyfi_tt_printf(o, "    transfers into rank %d: %.1f ms, computing meanwhile %.0f%%\n", r,
                    s->ov[2 * r], 100 * s->ov[2 * r + 1] / s->ov[2 * r]);
    }
}

/* The training steps, one line each (the first and last three of many), and
 * the evaluation batches in one line. */
static void print_steps(tt_writer *o, const trace_stats *s)
{
    int seen = 0, neval = 0;
    double lo = 1e300, hi = 0;
    for (int k = 0; k < s->nsteps; k++) {
        if (!s->strain[k]) {
            neval++;
            if (s->slen[k] < lo) lo = s->slen[k];
            if (s->slen[k] > hi) hi = s->slen[k];
            continue;
        }
        seen++;
        if (s->ntrain > 8 && seen == 4)
            hyfi_tt_printf(o, "  ... %d more steps\n", s->ntrain - 6);
        if (s->ntrain > 8 && seen > 3 && seen <= s->ntrain - 3) continue;
        hyfi_tt_printf(o, "  step %d: %.1f ms (%.1f .. %.1f)\n", s->slabel[k], s->slen[k],
                s->sa[k] - s->t0, s->sb[k] - s->t0);
    }
    if (neval)
        hyfi_tt_printf(o, "  evaluation: %d batch%s of %.1f .. %.1f ms\n", neval,
                neval == 1 ? "" : "es", lo, hi);
}

static void print_summary(tt_writer *o, const char *dir, const trace_data *d, const trace_stats *s)
{
    const int R = s->R, nsteps = s->nsteps, tl = s->ntiles, stages = d->pi.stages;
    const int neval = nsteps - s->ntrain;
    hyfi_tt_printf(o, "trace %s: %d rank%s, %zu hyfi tasks, %.1f ms; %d training step%s", dir, R,
            R > 1 ? "s" : "", s->nh, s->span_all, s->ntrain, s->ntrain == 1 ? "" : "s");
    if (neval) hyfi_tt_printf(o, ", %d evaluation batch%s", neval, neval == 1 ? "" : "es");
    hyfi_tt_printf(o, "\n");
    print_steps(o, s);
    print_ranks(o, s);
    hyfi_tt_printf(o, "  compute per place (replica/stage/tile):");
    for (int q = 0; q < s->nplaces; q++)
        if (s->byplace[q] > 0)
            hyfi_tt_printf(o, " r%d/s%d/t%d %.1f", q / tl / stages, q / tl % stages, q % tl, s->byplace[q]);
    hyfi_tt_printf(o, " ms\n  transfers:");
    for (int c = 0; c < NCAT; c++)
        if (s->ccount[c])
            hyfi_tt_printf(o, " %s %zu msgs %.2f MB %.1f ms;", hyfi_tt_cat_names[c], s->ccount[c],
                    (double)s->cbytes[c] / 1e6, s->ctime[c]);
    hyfi_tt_printf(o, "%s\n", d->nc ? "" : " none (one process)");
    hyfi_tt_printf(o, "  critical path of %s %d: %zu tasks, %.1f ms computing of %.1f ms\n",
            s->strain[s->ls] ? "step" : "program", s->slabel[s->ls], s->npath, s->path_compute,
            s->step_len);
    for (size_t i = 0; i < s->npath && i < 8; i++) {
        const trec *x = s->cpath[s->npath - 1 - i];
        hyfi_tt_printf(o, "    %s (rank %d, %.2f ms)\n", x->name, x->rank, x->end - x->start);
    }
    if (s->npath > 8) hyfi_tt_printf(o, "    ... %zu more\n", s->npath - 8);
}

hyfi_status hyfi_trace_summarize(const char *dir, FILE *out)
{
    if (!dir) return hyfi_fail(HYFI_ERR_ARG, "hyfi_trace_summarize: no folder");
    trace_data d;
    trace_stats s = {0};
    hyfi_status st = hyfi_tt_read(dir, &d);
    if (st == HYFI_OK) st = hyfi_tt_stats(dir, &d, &s);
    if (st == HYFI_OK && out) {
        tt_writer o;
        hyfi_tt_wrap(&o, out, "hyfi_trace_summarize", "the summary's output stream");
        print_summary(&o, dir, &d, &s);
        st = hyfi_tt_close(&o);
    }
    if (st == HYFI_OK) st = hyfi_tt_write_json(dir, &d, &s);
    if (st == HYFI_OK) st = hyfi_tt_write_svg(dir, &d, &s);
    hyfi_tt_stats_free(&s);
    hyfi_tt_data_free(&d);
    return st;
}
