/* kmap.h: the key map of a compiled graph (kmap.c): from a key (role,
 * object, index; keys.h) to its entry in the handle table, with a
 * compile-time flag per key. Open addressing; plain C, no StarPU. */
#ifndef HYFI_ENGINE_KMAP_H
#define HYFI_ENGINE_KMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hyfi_kcell {
    uint64_t idx;
    uint32_t obj;
    uint8_t role; /* 0: a free cell (a role is at least 1) */
    uint8_t flag; /* compile-time: a gradient already written (the next accumulates) */
    int32_t ent;  /* handle-table entry, -1: none on this rank */
} hyfi_kcell;

typedef struct hyfi_kmap {
    hyfi_kcell *cell;
    size_t cap, n; /* cap a power of 2 (0: empty), at most half full */
} hyfi_kmap;

/* The key's cell, NULL when absent. */
hyfi_kcell *hyfi_kmap_find(const hyfi_kmap *m, unsigned role, uint64_t obj, uint64_t idx);
/* The key's cell, made (ent -1, flag 0) if absent; NULL when out of memory.
 * A cell's address holds until the next cell is made. */
hyfi_kcell *hyfi_kmap_cell(hyfi_kmap *m, unsigned role, uint64_t obj, uint64_t idx);
/* The flags of the keys of these roles (a mask of 1 << role) 0 again. */
void hyfi_kmap_zero_flags(hyfi_kmap *m, uint64_t roles);
void hyfi_kmap_free(hyfi_kmap *m);
static inline size_t hyfi_kmap_bytes(const hyfi_kmap *m) { return m->cap * sizeof *m->cell; }

#endif
