/* summary.json: the summary of a trace (docs/tracing.md). */
#include "tooling.h"

#include <errno.h>
#include <string.h>

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
    fputc('"', f);
}

static void json_ranks(FILE *f, const trace_stats *s)
{
    const int R = s->R, W = s->W;
    for (int r = 0; r < R; r++) {
        fprintf(f, "    {\"rank\": %d, \"workers\": [", r);
        for (int w = 0, first = 1; w < W; w++)
            if (s->busy[r * W + w] > 0) {
                fprintf(f, "%s{\"worker\": %d, \"busy_ms\": %.3f, \"idle_ms\": %.3f}", first ? "" : ", ",
                        w, s->busy[r * W + w], s->span_all - s->busy[r * W + w]);
                first = 0;
            }
        fprintf(f, "], \"compute_ms\": {");
        for (int k = 0, first = 1; k < NKIND; k++)
            if (s->bykind[r * NKIND + k] > 0) {
                fprintf(f, "%s\"%s\": %.3f", first ? "" : ", ", hyfi_tt_kind_names[k],
                        s->bykind[r * NKIND + k]);
                first = 0;
            }
        fprintf(f, "}, \"transfer_in_ms\": %.3f, \"transfer_overlap\": %.4f}%s\n", s->ov[2 * r],
                s->ov[2 * r] > 0 ? s->ov[2 * r + 1] / s->ov[2 * r] : 0.0, r + 1 < R ? "," : "");
    }
}

static void json_places(FILE *f, const trace_stats *s, int stages)
{
    const int tl = s->ntiles;
    for (int q = 0, first = 1; q < s->nplaces; q++)
        if (s->byplace[q] > 0) {
            fprintf(f, "%s{\"replica\": %d, \"stage\": %d, \"tile\": %d, \"compute_ms\": %.3f, "
                       "\"by_kind_ms\": {",
                    first ? "" : ",\n    ", q / tl / stages, q / tl % stages, q % tl, s->byplace[q]);
            for (int k = 0, fk = 1; k < NKIND; k++)
                if (s->placekind[(size_t)q * NKIND + k] > 0) {
                    fprintf(f, "%s\"%s\": %.3f", fk ? "" : ", ", hyfi_tt_kind_names[k],
                            s->placekind[(size_t)q * NKIND + k]);
                    fk = 0;
                }
            fputs("}}", f);
            first = 0;
        }
}

static void json_summary(FILE *f, const trace_data *d, const trace_stats *s)
{
    fprintf(f, "{\n  \"ranks\": %d,\n  \"tasks\": %zu,\n  \"span_ms\": %.3f,\n  \"steps_ms\": [", s->R,
            s->nh, s->span_all);
    for (int k = 0; k < s->nsteps; k++) fprintf(f, "%s%.3f", k ? ", " : "", s->slen[k]);
    fprintf(f, "],\n  \"per_rank\": [\n");
    json_ranks(f, s);
    fprintf(f, "  ],\n  \"per_place\": [");
    json_places(f, s, d->pi.stages);
    fprintf(f, "],\n  \"transfers\": {");
    for (int c = 0, first = 1; c < NCAT; c++)
        if (s->ccount[c]) {
            fprintf(f, "%s\"%s\": {\"count\": %zu, \"bytes\": %zu, \"time_ms\": %.3f}",
                    first ? "" : ", ", hyfi_tt_cat_names[c], s->ccount[c], s->cbytes[c], s->ctime[c]);
            first = 0;
        }
    fprintf(f, "},\n  \"critical_path\": {\"step\": %d, \"step_ms\": %.3f, \"compute_ms\": %.3f, "
               "\"tasks\": [", s->nsteps, s->step_len, s->path_compute);
    for (size_t i = 0; i < s->npath; i++) {
        fputs(i ? ", " : "", f);
        json_str(f, s->cpath[s->npath - 1 - i]->name);
    }
    fprintf(f, "]}\n}\n");
}

hyfi_status hyfi_tt_write_json(const char *dir, const trace_data *d, const trace_stats *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: cannot write %s: %s", path, strerror(errno));
    json_summary(f, d, s);
    if (fclose(f)) return hyfi_fail(HYFI_ERR_IO, "hyfi_trace_summarize: writing %s failed", path);
    return HYFI_OK;
}
