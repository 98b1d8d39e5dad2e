/* Pipeline schedules and place spreading (partitioners/pipeline.c), without
 * StarPU: every schedule is a valid topological order that keeps each stage's
 * own order, has the expected length and activation bound; places spread over
 * ranks contiguously; bad counts are refused with a message. */
#include "pipeline.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0 if ev is a valid order for (S, M, kind); prints the first violation. */
static int check_schedule(int S, int M, hyfi_pipe_kind kind)
{
    const int n = 2 * S * M;
    hyfi_pipe_event *ev = calloc((size_t)n, sizeof *ev);
    int *inflight = calloc((size_t)S, sizeof *inflight);
    int *pos_f = malloc((size_t)S * M * sizeof(int)), *pos_b = malloc((size_t)S * M * sizeof(int));
    int bad = 0;
    const int ticks = hyfi_pipe_schedule(S, M, kind, ev, inflight);
    if (ticks < 0) {
        printf("S=%d M=%d %s: schedule failed\n", S, M, hyfi_pipe_kind_name(kind));
        bad = 1;
        goto out;
    }
    for (int i = 0; i < S * M; i++) pos_f[i] = pos_b[i] = -1;
    for (int i = 0; i < n; i++) {
        int *pos = ev[i].backward ? pos_b : pos_f;
        if (pos[ev[i].stage * M + ev[i].mb] >= 0) bad = 1; /* twice */
        pos[ev[i].stage * M + ev[i].mb] = i;
    }
    for (int s = 0; s < S && !bad; s++)
        for (int m = 0; m < M; m++) {
            const int f = pos_f[s * M + m], b = pos_b[s * M + m];
            if (f < 0 || b < 0 || b < f) bad = 1;
            if (s > 0 && pos_f[(s - 1) * M + m] > f) bad = 1;
            if (s < S - 1 && pos_b[(s + 1) * M + m] > b) bad = 1;
        }
    /* each stage's own order */
    for (int s = 0; s < S && !bad; s++) {
        int f = 0, alive = 0, maxalive = 0, nextb = 0;
        for (int i = 0; i < n; i++) {
            if (ev[i].stage != s) continue;
            if (!ev[i].backward) {
                if (ev[i].mb != f++) bad = 1;
                alive++;
            } else {
                if (kind == HYFI_PIPE_GPIPE && f != M) bad = 1;
                if (ev[i].mb != nextb++) bad = 1; /* backwards in micro-batch order */
                alive--;
            }
            if (alive > maxalive) maxalive = alive;
        }
        int want = kind == HYFI_PIPE_GPIPE ? M : (S - s < M ? S - s : M);
        if (maxalive != want || inflight[s] != want) {
            printf("S=%d M=%d %s stage %d: %d in flight (reported %d), want %d\n", S, M,
                   hyfi_pipe_kind_name(kind), s, maxalive, inflight[s], want);
            bad = 1;
        }
    }
    /* lock-step length: GPipe and 1F1B both take 2 (M + S - 1) ticks */
    if (!bad && ticks != 2 * (M + S - 1)) {
        printf("S=%d M=%d %s: %d ticks, want %d\n", S, M, hyfi_pipe_kind_name(kind), ticks,
               2 * (M + S - 1));
        bad = 1;
    }
    if (bad) printf("S=%d M=%d %s: invalid schedule\n", S, M, hyfi_pipe_kind_name(kind));
out:
    free(ev), free(inflight), free(pos_f), free(pos_b);
    return bad;
}

int main(void)
{
    int bad = 0, cases = 0;
    for (int S = 1; S <= 6; S++)
        for (int M = 1; M <= 9; M++)
            for (int k = 0; k < 2; k++, cases++) bad += check_schedule(S, M, (hyfi_pipe_kind)k);
    printf("%d of %d schedules invalid\n", bad, cases);
    tu_check(bad, "GPipe and 1F1B schedules: valid order, stage order, in-flight bound, length");

    /* one printed example */
    hyfi_pipe_event ev[16];
    hyfi_pipe_schedule(2, 4, HYFI_PIPE_1F1B, ev, NULL);
    printf("1f1b S=2 M=4:");
    for (int i = 0; i < 16; i++)
        printf(" %c%d.%d", ev[i].backward ? 'B' : 'F', ev[i].stage, ev[i].mb);
    printf("\n");

    hyfi_pipe_kind kind;
    tu_check(hyfi_pipe_kind_from_name("1f1b", &kind) || kind != HYFI_PIPE_1F1B, "name 1f1b");
    tu_check(hyfi_pipe_kind_from_name("gpipe", &kind) || kind != HYFI_PIPE_GPIPE, "name gpipe");
    tu_check(hyfi_pipe_kind_from_name("pipedream", &kind) == 0, "unknown name refused");
    tu_check(hyfi_pipe_schedule(0, 4, HYFI_PIPE_GPIPE, ev, NULL) != -1, "0 stages refused");
    tu_check(hyfi_pipe_schedule(2, 0, HYFI_PIPE_GPIPE, ev, NULL) != -1, "0 parts refused");

    int r[8];
    char err[256];
    tu_check(hyfi_places_to_ranks(4, 2, r, err, sizeof err) || r[0] != 0 || r[1] != 0 ||
                 r[2] != 1 || r[3] != 1, "4 places on 2 ranks: 0 0 1 1");
    tu_check(hyfi_places_to_ranks(3, 2, r, err, sizeof err) || r[0] != 0 || r[1] != 0 ||
                 r[2] != 1, "3 places on 2 ranks: 0 0 1");
    tu_check(hyfi_places_to_ranks(5, 1, r, err, sizeof err) || r[4] != 0, "5 places on 1 rank");
    tu_check(hyfi_places_to_ranks(4, 4, r, err, sizeof err) || r[3] != 3, "4 places on 4 ranks");
    tu_check(hyfi_places_to_ranks(2, 4, r, err, sizeof err) == 0 || !strstr(err, "mpiexec -n 2"),
             "more ranks than places refused, naming the fix");
    printf("message: %s\n", err);

    /* replicas: 2 stages (places 0, 1), GEMS MAST on 2 ranks: copy 1 mirrored */
    int rr[64];
    const int st2[] = {0, 1};
    tu_check(hyfi_replicas_to_ranks(2, st2, 2, 1, 2, rr, err, sizeof err) || rr[0] != 0 ||
                 rr[1] != 1 || rr[2] != 1 || rr[3] != 0, "GEMS MAST on 2 ranks: 0 1 | 1 0");
    /* MASTER x2: copies 2 and 3 as copies 0 and 1 */
    tu_check(hyfi_replicas_to_ranks(2, st2, 4, 1, 2, rr, err, sizeof err) || rr[4] != 0 ||
                 rr[5] != 1 || rr[6] != 1 || rr[7] != 0, "GEMS MASTER x2: 0 1 | 1 0 | 0 1 | 1 0");
    /* 2 tiles + 1 stage, GEMS, 2 data-parallel groups on 4 ranks */
    const int st3[] = {0, 0, 1};
    tu_check(hyfi_replicas_to_ranks(3, st3, 2, 2, 4, rr, err, sizeof err) || rr[0] != 0 ||
                 rr[1] != 0 || rr[2] != 1 || rr[3] != 1 || rr[4] != 1 || rr[5] != 0 ||
                 rr[6] != 2 || rr[8] != 3 || rr[9] != 3 || rr[11] != 2,
             "5 dimensions on 4 ranks: 0 0 1 | 1 1 0 | 2 2 3 | 3 3 2");
    /* the devices a GEMS copy's places share (plan.c pins them to the same
     * GPU): even copies their own, odd ones the mirrored stage's place, on the
     * same rank as hyfi_replicas_to_ranks puts them */
    const int st4[] = {0, 0, 1, 2}; /* 2 tiles + 2 stages */
    tu_check(hyfi_copy_place(4, st4, 0, 1) != 1 || hyfi_copy_place(4, st4, 2, 3) != 3,
             "even copies keep their places");
    tu_check(hyfi_copy_place(4, st4, 1, 0) != 3 || hyfi_copy_place(4, st4, 1, 1) != 3 ||
                 hyfi_copy_place(4, st4, 1, 2) != 2 || hyfi_copy_place(4, st4, 1, 3) != 0,
             "the mirrored copy: tiles of stage 0 -> stage 2, stage 1 -> itself, stage 2 -> tile 0");
    tu_check(hyfi_replicas_to_ranks(4, st4, 2, 1, 4, rr, err, sizeof err), "4 places on 4 ranks");
    for (int p = 0; p < 4; p++)
        tu_check(rr[4 + p] != rr[hyfi_copy_place(4, st4, 1, p)],
                 "a mirrored place on the rank of the place whose devices it shares");
    /* data parallel 4 on 2 ranks: groups share ranks */
    const int st1[] = {0};
    tu_check(hyfi_replicas_to_ranks(1, st1, 1, 4, 2, rr, err, sizeof err) || rr[0] != 0 ||
                 rr[1] != 1 || rr[2] != 0 || rr[3] != 1, "4 data-parallel replicas on 2 ranks");
    tu_check(hyfi_replicas_to_ranks(1, st1, 1, 2, 3, rr, err, sizeof err) == 0 ||
                 !strstr(err, "multiple of 2"), "3 ranks for 2 data-parallel replicas refused");
    printf("message: %s\n", err);
    tu_check(hyfi_replicas_to_ranks(1, st1, 1, 2, 4, rr, err, sizeof err) == 0 ||
                 !strstr(err, "mpiexec -n 2"), "4 ranks for 2 one-place replicas refused");
    printf("message: %s\n", err);
    return tu_finish();
}
