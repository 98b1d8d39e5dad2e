/* timeline.svg: the last step of a trace, one lane per worker per rank,
 * tasks coloured by kind, transfers between ranks drawn as lines coloured by
 * traffic category. */
#include "tooling.h"

#include <stdlib.h>
#include <string.h>

static const char *const KIND_COLOR[NKIND] = {"#4e79a7", "#f28e2b", "#b6992d", "#59a14f",
                                              "#8cd17d", "#86bcb6", "#e15759", "#ff9d9a",
                                              "#79706e", "#d37295", "#9467bd", "#bab0ac"};
static const char *const CAT_COLOR[NCAT] = {"#d62728", "#e377c2", "#1f77b4", "#9467bd",
                                            "#7f7f7f", "#2ca02c", "#bcbd22"};

/* The picture's geometry: lanes from y0, lh apart; the step [a, a + len] ms
 * over wpx pixels from x0. */
typedef struct {
    const int *lane; /* [rank * W + worker]: lane, or -1 */
    int nl, W, ls;
    double x0, wpx, lh, y0, a, len;
} geom;

static double xpos(const geom *g, double tm) { return g->x0 + (tm - g->a) / g->len * g->wpx; }

static void svg_text(tt_writer *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') hyfi_tt_puts(o, "&lt;");
        else if (*s == '>') hyfi_tt_puts(o, "&gt;");
        else if (*s == '&') hyfi_tt_puts(o, "&amp;");
        else hyfi_tt_putc(o, *s);
    }
}

/* Lanes: (rank, worker) pairs that ran hyfi tasks in the last step. */
static int *make_lanes(const trace_data *d, const trace_stats *s, int *nl)
{
    const int RW = s->R * s->W;
    int *lane = malloc((size_t)RW * sizeof *lane);
    *nl = 0;
    if (!lane) return NULL;
    for (int i = 0; i < RW; i++) lane[i] = -1;
    for (size_t i = 0; i < d->n; i++)
        if (d->t[i].hyfi && d->t[i].step == s->nsteps - 1) lane[d->t[i].rank * s->W + d->t[i].worker] = 0;
    for (int i = 0; i < RW; i++)
        if (!lane[i]) lane[i] = (*nl)++;
    return lane;
}

static void svg_lanes(tt_writer *o, const geom *g, int RW)
{
    for (int i = 0; i < RW; i++) {
        if (g->lane[i] < 0) continue;
        const double y = g->y0 + g->lane[i] * g->lh;
        hyfi_tt_printf(o, "<text x=\"8\" y=\"%.1f\">rank %d worker %d</text>\n", y + g->lh / 2, i / g->W,
                i % g->W);
        hyfi_tt_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n",
                g->x0, y + 4, g->wpx, g->lh - 8);
    }
}

static void svg_tasks(tt_writer *o, const geom *g, const trace_data *d)
{
    const double lh = g->lh;
    for (size_t i = 0; i < d->n; i++) {
        const trec *x = &d->t[i];
        if (!x->hyfi || x->step != g->ls) continue;
        const double y = g->y0 + g->lane[x->rank * g->W + x->worker] * lh;
        const double xa = xpos(g, x->start), w = (x->end - x->start) / g->len * g->wpx;
        const int k = hyfi_tt_kind_of(x);
        hyfi_tt_printf(o, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                   "stroke=\"white\" stroke-width=\"0.3\"><title>",
                xa, y + 6, w > 0.3 ? w : 0.3, lh - 12, KIND_COLOR[k]);
        svg_text(o, x->name);
        hyfi_tt_printf(o, " (%.3f ms)</title></rect>\n", x->end - x->start);
        if (w > 6.5 * (double)strlen(x->name) * 0.8) {
            hyfi_tt_printf(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" fill=\"white\">", xa + 2,
                    y + lh / 2 + 3);
            svg_text(o, x->name);
            hyfi_tt_puts(o, "</text>\n");
        }
    }
}

/* Transfers of the step between the first lanes of their ranks. */
static void svg_transfers(tt_writer *o, const geom *g, const trace_data *d, const trace_stats *s)
{
    const int W = g->W;
    const double lh = g->lh;
    for (size_t i = 0; i < d->nc; i++) {
        const crec *c = &d->c[i];
        if (c->recv < g->a || c->send > s->sb[g->ls] || c->src >= s->R || c->dst >= s->R) continue;
        int ls0 = -1, ld0 = -1;
        for (int w = 0; w < W && (ls0 < 0 || ld0 < 0); w++) {
            if (ls0 < 0 && g->lane[c->src * W + w] >= 0) ls0 = g->lane[c->src * W + w];
            if (ld0 < 0 && g->lane[c->dst * W + w] >= 0) ld0 = g->lane[c->dst * W + w];
        }
        if (ls0 < 0 || ld0 < 0) continue;
        hyfi_tt_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"0.8\" opacity=\"0.7\"><title>%s, %zu bytes, rank %d to %d, "
                   "%.3f ms</title></line>\n",
                xpos(g, c->send > g->a ? c->send : g->a), g->y0 + ls0 * lh + lh / 2, xpos(g, c->recv),
                g->y0 + ld0 * lh + lh / 2, CAT_COLOR[c->cat], hyfi_tt_cat_names[c->cat], c->size,
                c->src, c->dst, c->recv - c->send);
    }
}

/* Time axis and legend. */
static void svg_legend(tt_writer *o, const geom *g)
{
    const double ya = g->y0 + g->nl * g->lh + 8, x0 = g->x0;
    for (int k = 0; k <= 10; k++)
        hyfi_tt_printf(o, "<text x=\"%.1f\" y=\"%.1f\">%.1f ms</text>\n", x0 + g->wpx * k / 10 - 10,
                ya + 10, g->len * k / 10);
    double lx = x0;
    for (int k = 0; k < NKIND; k++) {
        hyfi_tt_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
                   "x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx, ya + 24, KIND_COLOR[k], lx + 13,
                ya + 33, hyfi_tt_kind_names[k]);
        lx += 100;
    }
    lx = x0;
    for (int c = 0; c < NCAT; c++) {
        hyfi_tt_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"/><text x=\"%.1f\" y=\"%.1f\">%s transfer</text>\n",
                lx, ya + 52, lx + 12, ya + 52, CAT_COLOR[c], lx + 15, ya + 56, hyfi_tt_cat_names[c]);
        lx += 150;
    }
}

static void svg_timeline(tt_writer *o, const trace_data *d, const trace_stats *s, const int *lane, int nl)
{
    const int ls = s->nsteps - 1;
    const geom g = {.lane = lane, .nl = nl, .W = s->W, .ls = ls, .x0 = 150, .wpx = 1400,
                    .lh = 46, .y0 = 40, .a = s->sa[ls], .len = s->step_len > 0 ? s->step_len : 1};
    const double H = g.y0 + nl * g.lh + 90;
    hyfi_tt_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"10\">\n", g.x0 + g.wpx + 20, H);
    hyfi_tt_printf(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    hyfi_tt_printf(o, "<text x=\"10\" y=\"18\" font-size=\"13\">hyfi trace: step %d of %d, %.1f ms, %d "
               "rank%s (tasks by kind; lines: transfers between ranks by traffic kind)</text>\n",
            s->nsteps, s->nsteps, s->step_len, s->R, s->R > 1 ? "s" : "");
    svg_lanes(o, &g, s->R * s->W);
    svg_tasks(o, &g, d);
    svg_transfers(o, &g, d, s);
    svg_legend(o, &g);
    hyfi_tt_puts(o, "</svg>\n");
}

hyfi_status hyfi_tt_write_svg(const char *dir, const trace_data *d, const trace_stats *s)
{
    int nl;
    int *lane = make_lanes(d, s, &nl);
    if (!lane) return hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/timeline.svg", dir);
    tt_writer o;
    hyfi_status st = hyfi_tt_open(&o, "hyfi_trace_summarize", path);
    if (st == HYFI_OK) {
        svg_timeline(&o, d, s, lane, nl);
        st = hyfi_tt_close(&o);
    }
    free(lane);
    return st;
}
