/* summary.json: the summary of a trace (docs/tracing.md). */
#include "tooling.h"


static void json_str(tt_writer *o, const char *s)
{
    hyfi_tt_putc(o, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') hyfi_tt_putc(o, '\\');
        if ((unsigned char)*s >= 0x20) hyfi_tt_putc(o, *s);
    }
    hyfi_tt_putc(o, '"');
}

static void json_ranks(tt_writer *o, const trace_stats *s)
{
    const int R = s->R, W = s->W;
    for (int r = 0; r < R; r++) {
        hyfi_tt_printf(o, "    {\"rank\": %d, \"workers\": [", r);
        for (int w = 0, first = 1; w < W; w++)
            if (s->busy[r * W + w] > 0) {
                hyfi_tt_printf(o, "%s{\"worker\": %d, \"busy_ms\": %.3f, \"idle_ms\": %.3f}", first ? "" : ", ",
                        w, s->busy[r * W + w], s->span_all - s->busy[r * W + w]);
                first = 0;
            }
        hyfi_tt_printf(o, "], \"compute_ms\": {");
        for (int k = 0, first = 1; k < NKIND; k++)
            if (s->bykind[r * NKIND + k] > 0) {
                hyfi_tt_printf(o, "%s\"%s\": %.3f", first ? "" : ", ", hyfi_tt_kind_names[k],
                        s->bykind[r * NKIND + k]);
                first = 0;
            }
        hyfi_tt_printf(o, "}, \"transfer_in_ms\": %.3f, \"transfer_overlap\": %.4f}%s\n", s->ov[2 * r],
                s->ov[2 * r] > 0 ? s->ov[2 * r + 1] / s->ov[2 * r] : 0.0, r + 1 < R ? "," : "");
    }
}

static void json_places(tt_writer *o, const trace_stats *s, int stages)
{
    const int tl = s->ntiles;
    for (int q = 0, first = 1; q < s->nplaces; q++)
        if (s->byplace[q] > 0) {
            hyfi_tt_printf(o, "%s{\"replica\": %d, \"stage\": %d, \"tile\": %d, \"compute_ms\": %.3f, "
                       "\"by_kind_ms\": {",
                    first ? "" : ",\n    ", q / tl / stages, q / tl % stages, q % tl, s->byplace[q]);
            for (int k = 0, fk = 1; k < NKIND; k++)
                if (s->placekind[(size_t)q * NKIND + k] > 0) {
                    hyfi_tt_printf(o, "%s\"%s\": %.3f", fk ? "" : ", ", hyfi_tt_kind_names[k],
                            s->placekind[(size_t)q * NKIND + k]);
                    fk = 0;
                }
            hyfi_tt_puts(o, "}}");
            first = 0;
        }
}

static void json_summary(tt_writer *o, const trace_data *d, const trace_stats *s)
{
    hyfi_tt_printf(o, "{\n  \"ranks\": %d,\n  \"tasks\": %zu,\n  \"span_ms\": %.3f,\n  \"steps_ms\": [", s->R,
            s->nh, s->span_all);
    for (int k = 0; k < s->nsteps; k++) hyfi_tt_printf(o, "%s%.3f", k ? ", " : "", s->slen[k]);
    /* each program's number in the run, and whether it trained (else an evaluation batch) */
    hyfi_tt_printf(o, "],\n  \"step_numbers\": [");
    for (int k = 0; k < s->nsteps; k++) hyfi_tt_printf(o, "%s%d", k ? ", " : "", s->slabel[k]);
    hyfi_tt_printf(o, "],\n  \"training\": [");
    for (int k = 0; k < s->nsteps; k++)
        hyfi_tt_printf(o, "%s%s", k ? ", " : "", s->strain[k] ? "true" : "false");
    hyfi_tt_printf(o, "],\n  \"per_rank\": [\n");
    json_ranks(o, s);
    hyfi_tt_printf(o, "  ],\n  \"per_place\": [");
    json_places(o, s, d->pi.stages);
    hyfi_tt_printf(o, "],\n  \"transfers\": {");
    for (int c = 0, first = 1; c < NCAT; c++)
        if (s->ccount[c]) {
            hyfi_tt_printf(o, "%s\"%s\": {\"count\": %zu, \"bytes\": %zu, \"time_ms\": %.3f}",
                    first ? "" : ", ", hyfi_tt_cat_names[c], s->ccount[c], s->cbytes[c], s->ctime[c]);
            first = 0;
        }
    hyfi_tt_printf(o, "},\n  \"critical_path\": {\"step\": %d, \"step_ms\": %.3f, \"compute_ms\": %.3f, "
               "\"tasks\": [", s->slabel[s->ls], s->step_len, s->path_compute);
    for (size_t i = 0; i < s->npath; i++) {
        hyfi_tt_puts(o, i ? ", " : "");
        json_str(o, s->cpath[s->npath - 1 - i]->name);
    }
    hyfi_tt_printf(o, "]}\n}\n");
}

hyfi_status hyfi_tt_write_json(const char *dir, const trace_data *d, const trace_stats *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    tt_writer o;
    hyfi_status st = hyfi_tt_open(&o, "hyfi_trace_summarize", path);
    if (st != HYFI_OK) return st;
    json_summary(&o, d, s);
    return hyfi_tt_close(&o);
}
