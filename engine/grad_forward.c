/* Gradient forwarding (compile.c's backward): where an add's input can take
 * the add's output gradient as its own instead of a copy. */
#include "emit.h"

/* ------------------------------------------------- gradient forwarding
 *
 * An add passes its output's gradient on unchanged (dx_i = dy). Where input i
 * has no other consumer, its gradient would receive only that copy: instead
 * the copy is not emitted and the producer of input i reads the add's output
 * gradient itself (t->galias). Same bits, one task and one buffer less per
 * residual block (ResNet's branch; a 1 ms copy of 8 MB on ResNet-110's
 * critical path, docs/bench-cpu.md).
 *
 * Where input i has other consumers too (a residual block's input: the
 * shortcut and the block's first op), the add is its last consumer, so its
 * backward writes i's gradient first, as a copy that the others then add to.
 * Instead, i takes the add's output gradient buffer B as its own, and the
 * other consumers add into B: the same values in the same order. That is
 * right while every task that reads B for the add's output gradient (the
 * producers of the tensors forwarded to B: the other input's, the branch's)
 * comes before the other consumers' backward, which write into B; so each of
 * those producers must come after every other consumer in the forward order
 * (the backward runs in reverse), and the other input must not be an add's
 * output (whose own inputs would read B later). Then B no longer holds the
 * add output's gradient after the step: hyfi_grad_read refuses those tensors
 * (gclob), naming the switch.
 *
 * Only whole tensors of the emitting stage with the same layout, and not with
 * layer re-materialisation (which releases a segment's gradients after its
 * backward, possibly before the producer's). hyfi_plan_config.no_grad_forwarding
 * (HYFI_GRAD_ALIAS=0 in hyfi-train) turns it off. */
static int grad_alias_on(const hyfi_graph *g) { return !g->plan_cfg.no_grad_forwarding; }

/* Can t, an input of add nd with other consumers, take B = y's gradient
 * handles (above)? */
static int add_grad_alias_shared(const emit_ctx *e, const node *nd, const hyfi_tensor *t,
                                 const hyfi_tensor *y)
{
    const hyfi_graph *g = e->g;
    const int self = (int)(nd - g->nodes);
    int cmax = -1;
    for (int k = 0; k < g->nnodes; k++) {
        const node *c = &g->nodes[k];
        for (int j = 0; j < c->nin; j++) {
            if (c->in[j] != t || k == self) continue;
            if (k > self || c->stage != e->stage || hyfi_spatial_tiled(g, c)) return 0;
            if (k > cmax) cmax = k;
        }
    }
    for (int j = 0; j < nd->nin; j++) {
        const hyfi_tensor *u = nd->in[j];
        if (u == t) continue;
        if (u->producer >= 0 && (u->producer <= cmax || g->nodes[u->producer].op == OP_ADD))
            return 0;
    }
    for (int k = 0; k < g->ntensors; k++) {
        hyfi_tensor *s = g->tensors[k];
        if (s != t && (s->galias || s == y) && hyfi_grad_source(s) == y && s->producer <= cmax)
            return 0;
    }
    return 1;
}

/* Can input i of add nd take its gradient from y, the tensor holding the
 * add's output gradient (hyfi_grad_source)? */
int hyfi_add_grad_alias(const emit_ctx *e, const node *nd, int i, const hyfi_tensor *y)
{
    hyfi_graph *g = e->g;
    hyfi_tensor *t = nd->in[i];
    if (nd->op != OP_ADD) return 0;
    /* an add fused into the convolution making input i (layout.c): that
     * convolution's backward always reads the add's output gradient */
    if (nd->fused && t->fused) return 1;
    if (!grad_alias_on(g) || t->producer < 0 || !t->requires_grad) return 0;
    if (t->tl || y->tl || hyfi_spatial_tiled(g, &g->nodes[t->producer])) return 0;
    if (t->stage != e->stage || y->stage != e->stage || t == y) return 0;
    if (t->blk != y->blk || t->nh != y->nh || t->mb_numel != y->mb_numel ||
        !hyfi_tensor_has_grad(t) || !hyfi_tensor_has_grad(y))
        return 0;
    if (g->cc->pl->recompute == HYFI_RECOMPUTE_LAYER || TGW(t, e->m)) return 0;
    const int nc = hyfi_tensor_consumers(g, t);
    if (nc == 1) return 1;
    if (t->gparts || nd->in[0] == nd->in[1] || !add_grad_alias_shared(e, nd, t, y)) return 0;
    /* what B held before t's other consumers add to it is no longer readable */
    for (int k = 0; k < g->ntensors; k++) {
        hyfi_tensor *s = g->tensors[k];
        if (s != t && (s->galias || s == y) && hyfi_grad_source(s) == y) s->gclob = 1;
    }
    return 1;
}
