/* Pipeline schedules and the placement of places on ranks (layer and pipeline
 * parallelism). Plain C, no StarPU.
 *
 * A step of a pipelined model is S stages x M micro-batches, each run forward
 * (F) and backward (B). A schedule is the order in which one place works
 * through its own events; StarPU only needs a global submission order that is
 * a topological order of the dependencies
 *     F(s, m) after F(s-1, m);  B(S-1, m) after F(S-1, m);  B(s, m) after B(s+1, m)
 * and agrees with every stage's own order. hyfi_pipe_schedule() builds one by
 * simulating the stages in lock step (one event per stage per tick).
 *
 *   GPipe: every stage runs F(0..M-1), then B(0..M-1): all M micro-batches'
 *          activations are alive on every stage at the turn. (Backwards in
 *          micro-batch order, as 1F1B, so that gradients summed in that order
 *          are the same float under both schedules.)
 *   1F1B:  stage s runs w = min(S-1-s, M-1) warm-up forwards, then alternates
 *          one forward and one backward, then drains the backwards
 *          (PipeDream-flush): at most w+1 micro-batches in flight on stage s.
 */
#ifndef HYFI_PARTITIONERS_PIPELINE_H
#define HYFI_PARTITIONERS_PIPELINE_H

#include <stddef.h>

typedef enum hyfi_pipe_kind {
    HYFI_PIPE_GPIPE = 0,
    HYFI_PIPE_1F1B = 1
} hyfi_pipe_kind;

typedef struct hyfi_pipe_event {
    int stage;    /* 0 .. S-1 */
    int mb;       /* micro-batch 0 .. M-1 */
    int backward; /* 0: F, 1: B */
    int tick;     /* the lock-step tick of the simulation that ran it */
} hyfi_pipe_event;

/* The 2*S*M events of one step in a global submission order (see above).
 * events must hold 2 * stages * parts entries. inflight (may be NULL; S
 * entries) receives, per stage, the most micro-batches whose forward has run
 * and whose backward has not. Returns the number of ticks, or -1 when
 * stages < 1 or parts < 1 or the kind is unknown. */
int hyfi_pipe_schedule(int stages, int parts, hyfi_pipe_kind kind, hyfi_pipe_event *events,
                       int *inflight);

/* Name <-> kind: "gpipe" | "1f1b". from_name returns 0 or -1. */
int hyfi_pipe_kind_from_name(const char *name, hyfi_pipe_kind *kind);
const char *hyfi_pipe_kind_name(hyfi_pipe_kind kind);

/* Spread `places` places over `ranks` ranks in contiguous blocks, as evenly as
 * possible (place p on rank p * ranks / places, so that neighbouring stages
 * share a rank before distant ones). Writes rank_of[0..places). Returns 0, or -1
 * with a message naming the fix when ranks < 1, places < 1 or ranks > places
 * (a rank would have nothing to do). */
int hyfi_places_to_ranks(int places, int ranks, int *rank_of, char *err, size_t errlen);

/* Places of the replicas of one arrangement of `places` places (stage_of[p]:
 * the stage of place p; stages 0..S-1 in order, each on consecutive places),
 * for `copies` GEMS copies x `groups` data-parallel groups; replica
 * k = d * copies + c (group d, copy c) has places [k * places, (k+1) * places).
 *   groups: each data-parallel group gets its own block of ranks/groups ranks
 *           (with fewer ranks than groups, group d shares rank d % ranks);
 *   copy 0: its places spread over the group's ranks as hyfi_places_to_ranks;
 *   copies: even copies sit like copy 0; odd copies are mirrored (GEMS): the
 *           places of stage s go to the ranks of copy 0's stage S-1-s (its
 *           place t mod the number of places of that stage).
 * Writes rank_of[0 .. copies * groups * places). Returns 0, or -1 with a
 * message naming the fix when ranks and groups do not divide one another, or
 * a group would get more ranks than it has places. */
int hyfi_replicas_to_ranks(int places, const int *stage_of, int copies, int groups, int ranks,
                           int *rank_of, char *err, size_t errlen);
/* The place of copy 0 whose devices place p of GEMS copy c shares: p for even
 * copies, the mirrored stage's place (as above) for odd ones. */
int hyfi_copy_place(int places, const int *stage_of, int c, int p);

#endif
