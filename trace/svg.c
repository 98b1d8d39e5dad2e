/* timeline.svg: the last training steps of a trace (at most SVG_STEPS: all
 * of a --trace-steps window of that many), one lane per worker per rank,
 * tasks coloured by kind; under each rank's workers one lane of the
 * transfers into it, a row per traffic category marking when some message
 * of it was in flight (summarised: no line per message); dashed lines where
 * steps start. Everything is drawn inside the time axis. */
#include "tooling.h"

#include <stdlib.h>
#include <string.h>

#define SVG_STEPS 4 /* steps drawn at most */

static const char *const KIND_COLOR[NKIND] = {"#4e79a7", "#f28e2b", "#b6992d", "#59a14f",
                                              "#8cd17d", "#86bcb6", "#e15759", "#ff9d9a",
                                              "#79706e", "#d37295", "#9467bd", "#bab0ac"};
static const char *const CAT_COLOR[NCAT] = {"#d62728", "#e377c2", "#1f77b4", "#9467bd",
                                            "#7f7f7f", "#2ca02c", "#bcbd22"};

/* The picture's geometry: rows from y0; the time [a, b] ms over wpx pixels
 * from x0; steps s0..s1 drawn. Rows: per rank its worker lanes (lh high),
 * then its transfer lane (a row of ch per category present). */
typedef struct {
    const trace_stats *s;
    int *lane_y;        /* [rank * W + worker]: y of the lane, or -1 */
    int *xfer_y;        /* [rank]: y of its transfer lane, or -1 */
    int cats;           /* categories present in the drawn steps (bits) */
    int ncats;
    int s0, s1;
    double x0, wpx, lh, ch, y0, a, b, height;
} geom;

static double xpos(const geom *g, double tm)
{
    if (tm < g->a) tm = g->a;
    if (tm > g->b) tm = g->b;
    return g->x0 + (tm - g->a) / (g->b - g->a) * g->wpx;
}

static void svg_text(tt_writer *o, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') hyfi_tt_puts(o, "&lt;");
        else if (*s == '>') hyfi_tt_puts(o, "&gt;");
        else if (*s == '&') hyfi_tt_puts(o, "&amp;");
        else hyfi_tt_putc(o, *s);
    }
}

static int drawn(const geom *g, const trec *t) { return t->step >= g->s0 && t->step <= g->s1; }

/* The message lies in the drawn time and between known ranks. */
static int msg_drawn(const geom *g, const crec *c)
{
    return c->recv >= g->a && c->send <= g->b && c->src < g->s->R && c->dst < g->s->R &&
           c->dst >= 0;
}

/* Steps drawn: the last SVG_STEPS training steps in a row (or programs,
 * where none trained). */
static void choose_steps(const trace_stats *s, int *s0, int *s1)
{
    *s1 = s->ls;
    *s0 = *s1;
    while (*s0 > 0 && *s1 - *s0 + 1 < SVG_STEPS && (s->strain[*s0 - 1] || !s->ntrain)) (*s0)--;
}

/* Rows: lanes of the (rank, worker) pairs that ran hyfi tasks in the drawn
 * steps, and a transfer lane per rank that received messages then. */
static int layout(geom *g, const trace_data *d)
{
    const trace_stats *s = g->s;
    const int RW = s->R * s->W;
    g->lane_y = malloc((size_t)RW * sizeof *g->lane_y);
    g->xfer_y = malloc((size_t)s->R * sizeof *g->xfer_y);
    if (!g->lane_y || !g->xfer_y) return -1;
    for (int i = 0; i < RW; i++) g->lane_y[i] = -1;
    for (int r = 0; r < s->R; r++) g->xfer_y[r] = -1;
    for (size_t i = 0; i < d->n; i++)
        if (d->t[i].hyfi && drawn(g, &d->t[i]) && d->t[i].worker >= 0)
            g->lane_y[d->t[i].rank * s->W + d->t[i].worker] = 0;
    g->cats = 0;
    for (size_t i = 0; i < d->nc; i++)
        if (msg_drawn(g, &d->c[i])) {
            g->cats |= 1 << d->c[i].cat;
            g->xfer_y[d->c[i].dst] = 0;
        }
    g->ncats = 0;
    for (int c = 0; c < NCAT; c++) g->ncats += (g->cats >> c) & 1;
    double y = g->y0;
    for (int r = 0; r < s->R; r++) {
        for (int w = 0; w < s->W; w++)
            if (!g->lane_y[r * s->W + w]) g->lane_y[r * s->W + w] = (int)y, y += g->lh;
        if (!g->xfer_y[r]) g->xfer_y[r] = (int)y, y += g->ch * g->ncats + 10;
    }
    g->height = y;
    return 0;
}

static void svg_lanes(tt_writer *o, const geom *g)
{
    const trace_stats *s = g->s;
    for (int i = 0; i < s->R * s->W; i++) {
        if (g->lane_y[i] < 0) continue;
        const double y = g->lane_y[i];
        hyfi_tt_printf(o, "<text x=\"8\" y=\"%.1f\">rank %d worker %d</text>\n", y + g->lh / 2 + 3,
                       i / s->W, i % s->W);
        hyfi_tt_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                          "fill=\"#f4f4f4\"/>\n", g->x0, y + 4, g->wpx, g->lh - 8);
    }
    for (int r = 0; r < s->R; r++)
        if (g->xfer_y[r] >= 0)
            hyfi_tt_printf(o, "<text x=\"8\" y=\"%.1f\">rank %d transfers in</text>\n",
                           g->xfer_y[r] + g->ch * g->ncats / 2 + 4, r);
}

static void svg_tasks(tt_writer *o, const geom *g, const trace_data *d)
{
    const double lh = g->lh;
    for (size_t i = 0; i < d->n; i++) {
        const trec *x = &d->t[i];
        if (!x->hyfi || !drawn(g, x) || x->worker < 0) continue;
        const double y = g->lane_y[x->rank * g->s->W + x->worker];
        const double xa = xpos(g, x->start), w = xpos(g, x->end) - xa;
        const int k = hyfi_tt_kind_of(x);
        hyfi_tt_printf(o, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
                          "<title>", xa, y + 6, w > 0.3 ? w : 0.3, lh - 12, KIND_COLOR[k]);
        svg_text(o, x->name);
        hyfi_tt_printf(o, " (%.3f ms)</title></rect>\n", x->end - x->start);
        if (w > 5.5 * (double)strlen(x->name)) {
            hyfi_tt_printf(o, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"8\" fill=\"white\">", xa + 2,
                           y + lh / 2 + 3);
            svg_text(o, x->name);
            hyfi_tt_puts(o, "</text>\n");
        }
    }
}

static int span_cmp(const void *x, const void *y)
{
    const double *p = x, *q = y;
    return (p[0] > q[0]) - (p[0] < q[0]);
}

/* Per receiving rank and category: the union of the messages' flights as
 * bars, with their count and bytes in the title. */
static int svg_transfers(tt_writer *o, const geom *g, const trace_data *d)
{
    double *iv = malloc((d->nc + 1) * 2 * sizeof *iv);
    if (!iv) return -1;
    for (int r = 0; r < g->s->R; r++) {
        if (g->xfer_y[r] < 0) continue;
        for (int c = 0, row = 0; c < NCAT; c++) {
            if (!((g->cats >> c) & 1)) continue;
            size_t n = 0, bytes = 0;
            for (size_t i = 0; i < d->nc; i++) {
                const crec *m = &d->c[i];
                if (m->dst != r || m->cat != c || !msg_drawn(g, m)) continue;
                iv[2 * n] = m->send, iv[2 * n + 1] = m->recv > m->send ? m->recv : m->send;
                n++, bytes += m->size;
            }
            const double y = g->xfer_y[r] + row * g->ch;
            row++;
            if (!n) continue;
            qsort(iv, n, 2 * sizeof *iv, span_cmp);
            hyfi_tt_printf(o, "<g fill=\"%s\"><title>%s: %zu messages into rank %d, %.3f MB"
                              "</title>\n", CAT_COLOR[c], hyfi_tt_cat_names[c], n, r,
                           (double)bytes / 1e6);
            double a = iv[0], b = iv[1];
            for (size_t i = 1; i <= n; i++) {
                if (i < n && iv[2 * i] <= b) {
                    if (iv[2 * i + 1] > b) b = iv[2 * i + 1];
                    continue;
                }
                const double xa = xpos(g, a), w = xpos(g, b) - xa;
                hyfi_tt_printf(o, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"/>\n",
                               xa, y + 1, w > 0.5 ? w : 0.5, g->ch - 2);
                if (i < n) a = iv[2 * i], b = iv[2 * i + 1];
            }
            hyfi_tt_puts(o, "</g>\n");
        }
    }
    free(iv);
    return 0;
}

/* Where each drawn step starts: a dashed line and its number and length. */
static void svg_steps(tt_writer *o, const geom *g)
{
    const trace_stats *s = g->s;
    for (int k = g->s0; k <= g->s1; k++) {
        const double x = xpos(g, s->sa[k]);
        hyfi_tt_printf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                          "stroke-dasharray=\"4,3\"/>\n", x, g->y0 - 14, x, g->height);
        hyfi_tt_printf(o, "<text x=\"%.1f\" y=\"%.1f\">%s %d (%.1f ms)</text>\n", x + 3, g->y0 - 4,
                       s->strain[k] ? "step" : "program", s->slabel[k], s->slen[k]);
    }
}

/* Time axis (inside the picture) and the legend of what is drawn. */
static void svg_legend(tt_writer *o, const geom *g, const trace_data *d)
{
    const double ya = g->height + 6, len = g->b - g->a;
    for (int k = 0; k <= 10; k++)
        hyfi_tt_printf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">%.*f ms</text>\n",
                       g->x0 + g->wpx * k / 10, ya + 10, k == 0 ? "start" : k == 10 ? "end" : "middle",
                       len < 10 ? 2 : len < 100 ? 1 : 0, len * k / 10);
    int used = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->t[i].hyfi && drawn(g, &d->t[i])) used |= 1 << hyfi_tt_kind_of(&d->t[i]);
    double lx = g->x0;
    for (int k = 0; k < NKIND; k++) {
        if (!((used >> k) & 1)) continue;
        hyfi_tt_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
                          "x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx, ya + 24, KIND_COLOR[k], lx + 13,
                       ya + 33, hyfi_tt_kind_names[k]);
        lx += 90;
    }
    lx = g->x0;
    for (int c = 0; c < NCAT; c++) {
        if (!((g->cats >> c) & 1)) continue;
        size_t n = 0, bytes = 0;
        for (size_t i = 0; i < d->nc; i++)
            if (d->c[i].cat == c && msg_drawn(g, &d->c[i])) n++, bytes += d->c[i].size;
        hyfi_tt_printf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"6\" fill=\"%s\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\">%s: %zu msgs, %.2f MB</text>\n",
                       lx, ya + 46, CAT_COLOR[c], lx + 15, ya + 52, hyfi_tt_cat_names[c], n,
                       (double)bytes / 1e6);
        lx += 230;
    }
}

static int svg_timeline(tt_writer *o, const trace_data *d, geom *g)
{
    const trace_stats *s = g->s;
    if (layout(g, d)) return -1;
    const double H = g->height + (g->ncats ? 80 : 60);
    hyfi_tt_printf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                      "font-family=\"sans-serif\" font-size=\"10\">\n", g->x0 + g->wpx + 20, H);
    hyfi_tt_printf(o, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    const int ndrawn = g->s1 - g->s0 + 1, neval = s->nsteps - s->ntrain;
    char what[160];
    if (ndrawn == 1)
        snprintf(what, sizeof what, "%s %d", s->strain[g->s0] ? "step" : "program", s->slabel[g->s0]);
    else
        snprintf(what, sizeof what, "%s %d-%d", s->ntrain ? "steps" : "programs", s->slabel[g->s0],
                 s->slabel[g->s1]);
    hyfi_tt_printf(o, "<text x=\"10\" y=\"18\" font-size=\"13\">hyfi trace: %s, %.1f ms, %d rank%s "
                      "(the trace has %d training step%s", what, g->b - g->a, s->R,
                   s->R > 1 ? "s" : "", s->ntrain, s->ntrain == 1 ? "" : "s");
    if (neval) hyfi_tt_printf(o, " and %d evaluation batch%s", neval, neval == 1 ? "" : "es");
    hyfi_tt_printf(o, "; tasks by kind, transfers by category)</text>\n");
    svg_lanes(o, g);
    svg_tasks(o, g, d);
    if (svg_transfers(o, g, d)) return -1;
    svg_steps(o, g);
    svg_legend(o, g, d);
    hyfi_tt_puts(o, "</svg>\n");
    return 0;
}

hyfi_status hyfi_tt_write_svg(const char *dir, const trace_data *d, const trace_stats *s)
{
    geom g = {.s = s, .x0 = 150, .wpx = 1400, .lh = 40, .ch = 7, .y0 = 50};
    choose_steps(s, &g.s0, &g.s1);
    g.a = s->sa[g.s0];
    g.b = s->sb[g.s1];
    if (!(g.b > g.a)) g.b = g.a + 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/timeline.svg", dir);
    tt_writer o;
    hyfi_status st = hyfi_tt_open(&o, "hyfi_trace_summarize", path);
    if (st == HYFI_OK) {
        const int rc = svg_timeline(&o, d, &g);
        st = hyfi_tt_close(&o);
        if (rc && st == HYFI_OK) st = hyfi_fail(HYFI_ERR_NOMEM, "hyfi_trace_summarize: out of memory");
    }
    free(g.lane_y);
    free(g.xfer_y);
    return st;
}
