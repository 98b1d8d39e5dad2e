/* Program listings: with HYFI_DUMP_PROGRAMS=FILE, hyfi_graph_compile appends
 * the compiled programs to FILE (FILE.rK on rank K
 * of an MPI run), one line per task: kind, codelet, name,
 * place / rank / worker / priority, a hash of the kernel arguments and the
 * buffers (access mode and handle). Handles are numbered by first appearance
 * in the listing, so two compilations of the same plan list the same text
 * exactly when they emit the same tasks over the same data in the same
 * order: refactorings of the lowering are checked by diffing listings. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    starpu_data_handle_t *h;
    int n, cap;
} handle_ids;

static int handle_id(handle_ids *ids, starpu_data_handle_t h)
{
    for (int i = ids->n - 1; i >= 0; i--)
        if (ids->h[i] == h) return i;
    if (ids->n == ids->cap) {
        const int nc = ids->cap ? 2 * ids->cap : 256;
        starpu_data_handle_t *p = realloc(ids->h, (size_t)nc * sizeof *p);
        if (!p) return -1;
        ids->h = p;
        ids->cap = nc;
    }
    ids->h[ids->n] = h;
    return ids->n++;
}

static const char *mode_name(enum starpu_data_access_mode m)
{
    switch ((int)m) {
    case STARPU_R: return "R";
    case STARPU_W: return "W";
    case STARPU_RW: return "RW";
    case STARPU_REDUX: return "REDUX";
    case STARPU_RW | STARPU_COMMUTE: return "RWC";
    default: return "?";
    }
}

static void dump_program(FILE *f, const char *title, const program *p)
{
    static const char *const kinds[] = {"task", "release", "bcast"};
    handle_ids ids = {0};
    fprintf(f, "program %s: %d tasks\n", title, p->n);
    for (int k = 0; k < p->n; k++) {
        const prog_task *t = &p->t[k];
        const uint64_t ah = hyfi_hash_bytes(0xcbf29ce484222325ULL, &t->args, sizeof t->args);
        fprintf(f, "%s %s %s place %d rank %d worker %d prio %d args %016llx |",
                kinds[t->kind], t->cl ? t->cl->name : "-", t->name, t->place, t->rank,
                t->worker, t->prio, (unsigned long long)ah);
        for (int b = 0; b < t->nbuf; b++)
            fprintf(f, " %s:%d", mode_name(t->buf[b].mode), handle_id(&ids, t->buf[b].handle));
        fputc('\n', f);
    }
    free(ids.h);
}

void hyfi_programs_dump(const hyfi_graph *g)
{
    const char *path = getenv("HYFI_DUMP_PROGRAMS");
    if (!path || !*path) return;
    char file[4200];
    if (g->ctx->nranks > 1) snprintf(file, sizeof file, "%s.r%d", path, g->ctx->rank);
    else snprintf(file, sizeof file, "%s", path);
    FILE *f = fopen(file, "a");
    if (!f) return;
    fprintf(f, "graph %d nodes, rank %d of %d\n", g->nnodes, g->ctx->rank, g->ctx->nranks);
    dump_program(f, "train", &g->train_prog);
    dump_program(f, "infer", &g->infer_prog);
    dump_program(f, "fwd_train", &g->fwd_train_prog);
    fclose(f);
}
