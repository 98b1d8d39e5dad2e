/* Pipeline schedules (GPipe, 1F1B) as a global submission order, and the
 * spreading of places over ranks. */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stage s's own order of events: 2*M entries of (mb, backward). */
static void stage_order(int S, int M, int s, hyfi_pipe_kind kind, int *mb, int *bwd)
{
    int k = 0;
    if (kind == HYFI_PIPE_GPIPE) {
        for (int m = 0; m < M; m++) mb[k] = m, bwd[k++] = 0;
        for (int m = 0; m < M; m++) mb[k] = m, bwd[k++] = 1;
        return;
    }
    int w = S - 1 - s;
    if (w > M - 1) w = M - 1;
    int f = 0, b = 0;
    for (; f < w; f++) mb[k] = f, bwd[k++] = 0;
    while (f < M) {
        mb[k] = f++, bwd[k++] = 0;
        mb[k] = b++, bwd[k++] = 1;
    }
    while (b < M) mb[k] = b++, bwd[k++] = 1;
}

int hyfi_pipe_schedule(int S, int M, hyfi_pipe_kind kind, hyfi_pipe_event *ev, int *inflight)
{
    if (S < 1 || M < 1 || !ev || (kind != HYFI_PIPE_GPIPE && kind != HYFI_PIPE_1F1B)) return -1;
    const size_t per = 2 * (size_t)M, cells = (size_t)S * per;
    int *mb = malloc(cells * sizeof *mb), *bw = malloc(cells * sizeof *bw);
    int *next = calloc((size_t)S, sizeof *next);
    /* done_f / done_b: tick at which F(s,m) / B(s,m) ran, -1 if not yet */
    int *done_f = malloc((size_t)S * M * sizeof *done_f), *done_b = malloc((size_t)S * M * sizeof *done_b);
    int *alive = calloc((size_t)S, sizeof *alive);
    if (!mb || !bw || !next || !done_f || !done_b || !alive) {
        free(mb), free(bw), free(next), free(done_f), free(done_b), free(alive);
        return -1;
    }
    for (int s = 0; s < S; s++) {
        stage_order(S, M, s, kind, mb + s * per, bw + s * per);
        if (inflight) inflight[s] = 0;
    }
    for (int i = 0; i < S * M; i++) done_f[i] = done_b[i] = -1;
    int n = 0, tick = 0;
    while (n < 2 * S * M) {
        int progressed = 0;
        for (int s = 0; s < S; s++) {
            if ((size_t)next[s] == per) continue;
            const int m = mb[s * per + next[s]], b = bw[s * per + next[s]];
            int ready; /* on events finished before this tick */
            if (!b) ready = s == 0 || (done_f[(s - 1) * M + m] >= 0 && done_f[(s - 1) * M + m] < tick);
            else if (s == S - 1) ready = done_f[s * M + m] >= 0 && done_f[s * M + m] < tick;
            else ready = done_b[(s + 1) * M + m] >= 0 && done_b[(s + 1) * M + m] < tick;
            if (!ready) continue;
            ev[n++] = (hyfi_pipe_event){.stage = s, .mb = m, .backward = b, .tick = tick};
            (b ? done_b : done_f)[s * M + m] = tick;
            next[s]++;
            alive[s] += b ? -1 : 1;
            if (inflight && alive[s] > inflight[s]) inflight[s] = alive[s];
            progressed = 1;
        }
        tick++;
        if (!progressed && tick > 4 * S * M + 4) break; /* cannot happen for valid orders */
    }
    free(mb), free(bw), free(next), free(done_f), free(done_b), free(alive);
    return n == 2 * S * M ? tick : -1;
}

int hyfi_pipe_kind_from_name(const char *name, hyfi_pipe_kind *kind)
{
    if (!name || !kind) return -1;
    if (!strcmp(name, "gpipe")) *kind = HYFI_PIPE_GPIPE;
    else if (!strcmp(name, "1f1b")) *kind = HYFI_PIPE_1F1B;
    else return -1;
    return 0;
}

const char *hyfi_pipe_kind_name(hyfi_pipe_kind kind)
{
    return kind == HYFI_PIPE_1F1B ? "1f1b" : kind == HYFI_PIPE_GPIPE ? "gpipe" : "?";
}

int hyfi_places_to_ranks(int places, int ranks, int *rank_of, char *err, size_t errlen)
{
    if (places < 1 || ranks < 1 || !rank_of) {
        if (err) snprintf(err, errlen, "%d places on %d ranks: both must be at least 1", places,
                          ranks);
        return -1;
    }
    if (ranks > places) {
        if (err)
            snprintf(err, errlen, "%d MPI ranks but the plan has only %d place%s: every rank needs "
                                  "at least one; run with mpiexec -n %d (or fewer), or use more "
                                  "stages (--split-size %d)", ranks, places, places == 1 ? "" : "s",
                     places, ranks);
        return -1;
    }
    for (int p = 0; p < places; p++) rank_of[p] = (int)((long long)p * ranks / places);
    return 0;
}

int hyfi_copy_place(int places, const int *stage_of, int c, int p)
{
    if (!(c & 1)) return p;
    /* place t of stage s -> place t mod n of stage S-1-s */
    const int S = stage_of[places - 1] + 1, s = stage_of[p], ms = S - 1 - s;
    int first = p, mfirst = -1, mn = 0;
    while (first > 0 && stage_of[first - 1] == s) first--;
    for (int k = 0; k < places; k++)
        if (stage_of[k] == ms) {
            if (mfirst < 0) mfirst = k;
            mn++;
        }
    return mfirst + (p - first) % mn;
}

int hyfi_replicas_to_ranks(int places, const int *stage_of, int copies, int groups, int ranks,
                           int *rank_of, char *err, size_t errlen)
{
    if (places < 1 || !stage_of || copies < 1 || groups < 1 || ranks < 1 || !rank_of) {
        if (err) snprintf(err, errlen, "%d places x %d copies x %d groups on %d ranks: all must "
                                       "be at least 1", places, copies, groups, ranks);
        return -1;
    }
    if (ranks % groups != 0 && groups % ranks != 0) {
        if (err)
            snprintf(err, errlen, "%d MPI ranks cannot be shared evenly by %d data-parallel "
                                  "replicas (--data-parallel %d): use a number of ranks that is "
                                  "a multiple of %d (mpiexec -n %d) or divides it", ranks, groups,
                     groups, groups, groups * ((ranks + groups - 1) / groups));
        return -1;
    }
    const int per = ranks >= groups ? ranks / groups : 1;
    if (per > places) {
        if (err)
            snprintf(err, errlen, "%d MPI ranks give each of the %d data-parallel replica%s %d "
                                  "ranks but a replica has only %d place%s: every rank needs at "
                                  "least one; run with mpiexec -n %d (or fewer), or use more "
                                  "stages (--split-size) or tiles", ranks, groups,
                     groups == 1 ? "" : "s", per, places, places == 1 ? "" : "s",
                     places * groups);
        return -1;
    }
    /* copy 0 of group 0 on ranks [0, per) */
    if (hyfi_places_to_ranks(places, per, rank_of, err, errlen)) return -1;
    for (int c = 1; c < copies; c++)
        for (int p = 0; p < places; p++)
            rank_of[c * places + p] = rank_of[hyfi_copy_place(places, stage_of, c, p)];
    for (int d = 1; d < groups; d++)
        for (int k = 0; k < copies * places; k++)
            rank_of[d * copies * places + k] =
                ranks >= groups ? rank_of[k] + d * per : d % ranks;
    return 0;
}
