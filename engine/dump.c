/* Program listings: with hyfi_plan_config.dump_programs = FILE, hyfi_graph_compile appends
 * the compiled programs to FILE (FILE.rK on rank K
 * of an MPI run), one line per task: kind, codelet, name,
 * place / rank / worker / priority, a hash of the kernel arguments and the
 * buffers (access mode and handle). Handles are numbered by their place in
 * the handle table (registration order), so two compilations of the same plan
 * list the same text exactly when they register the same handles and emit the
 * same tasks over them in the same order: refactorings of the lowering are
 * checked by diffing listings. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    static const char *const kinds[] = {
        [PT_TASK] = "task", [PT_RELEASE] = "release", [PT_BCAST] = "bcast", [PT_FLUSH] = "flush"};
    fprintf(f, "program %s: %d tasks\n", title, p->n);
    for (int k = 0; k < p->n; k++) {
        const prog_task *t = &p->t[k];
        static const hyfi_task_args none; /* a release's, a flush's: none */
        const uint64_t ah = hyfi_hash_bytes(0xcbf29ce484222325ULL, t->args ? t->args : &none,
                                            sizeof none);
        fprintf(f, "%s %s %s place %d rank %d worker %d prio %d args %016llx |",
                kinds[t->kind], t->cl ? t->cl->name : "-", t->name, t->place, t->rank,
                t->worker, t->prio, (unsigned long long)ah);
        const prog_buf *bufs = prog_cbufs(t);
        for (int b = 0; b < t->nbuf; b++)
            fprintf(f, " %s:%d", mode_name(bufs[b].mode), (int)bufs[b].ref - 1);
        fputc('\n', f);
    }
}

void hyfi_programs_dump(const hyfi_graph *g)
{
    const char *path = g->plan_cfg.dump_programs;
    if (!path || !*path) return;
    char file[4200];
    if (g->ctx->nranks > 1) snprintf(file, sizeof file, "%s.r%d", path, g->ctx->rank);
    else snprintf(file, sizeof file, "%s", path);
    FILE *f = fopen(file, "a");
    if (!f) return;
    fprintf(f, "graph %d nodes, rank %d of %d\n", g->nnodes, g->ctx->rank, g->ctx->nranks);
    dump_program(f, "train", &g->cc->train_prog);
    dump_program(f, "infer", &g->cc->infer_prog);
    dump_program(f, "fwd_train", &g->cc->fwd_train_prog);
    fclose(f);
}
