/* Slot arrays stored by the slots a rank fills (slots.h). Dense when small;
 * otherwise an open-addressing table from index + 1 to a cell, the cells in
 * chunks that never move. */
#include "slots.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16 /* cells per chunk */

typedef struct chunk {
    struct chunk *next;
    starpu_data_handle_t cell[CHUNK];
} chunk;

typedef struct {
    uint64_t key; /* index + 1; 0: empty */
    starpu_data_handle_t *cell;
} entry;

struct hyfi_slots {
    size_t n;
    starpu_data_handle_t *dense; /* n cells, or NULL: sparse */
    entry *tab;                  /* cap entries (a power of 2), used of them filled */
    size_t cap, used;
    chunk *chunks;               /* the newest first; `left` cells free in it */
    unsigned left;
    int *oom;                    /* set when a cell could not be made */
    starpu_data_handle_t sink;   /* the flag hyfi_flag_at gives then */
};

hyfi_slots *hyfi_slots_new(size_t n, int *oom)
{
    hyfi_slots *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n = n;
    s->oom = oom;
    if (n <= HYFI_SLOTS_DENSE && n) {
        s->dense = calloc(n, sizeof *s->dense);
        if (!s->dense) {
            free(s);
            return NULL;
        }
    }
    return s;
}

void hyfi_slots_free(hyfi_slots *s)
{
    if (!s) return;
    free(s->dense);
    free(s->tab);
    for (chunk *c = s->chunks, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    free(s);
}

size_t hyfi_slots_len(const hyfi_slots *s) { return s ? s->n : 0; }

static size_t hash(uint64_t k, size_t mask)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

/* Slot i's cell in a sparse array, or NULL when never made. */
static starpu_data_handle_t *find(const hyfi_slots *s, size_t i)
{
    if (!s->cap) return NULL;
    const uint64_t k = (uint64_t)i + 1;
    for (size_t j = hash(k, s->cap - 1);; j = (j + 1) & (s->cap - 1)) {
        if (s->tab[j].key == k) return s->tab[j].cell;
        if (!s->tab[j].key) return NULL;
    }
}

static void put(entry *tab, size_t cap, uint64_t k, starpu_data_handle_t *cell)
{
    size_t j = hash(k, cap - 1);
    while (tab[j].key) j = (j + 1) & (cap - 1);
    tab[j] = (entry){k, cell};
}

starpu_data_handle_t hyfi_slot(const hyfi_slots *s, size_t i)
{
    if (!s || i >= s->n) return NULL;
    if (s->dense) return s->dense[i];
    starpu_data_handle_t *c = find(s, i);
    return c ? *c : NULL;
}

static starpu_data_handle_t *make(hyfi_slots *s, size_t i);

starpu_data_handle_t *hyfi_slot_at(hyfi_slots *s, size_t i)
{
    if (!s || i >= s->n) return NULL;
    starpu_data_handle_t *c = make(s, i);
    if (!c && s->oom) *s->oom = 1;
    return c;
}

static starpu_data_handle_t *make(hyfi_slots *s, size_t i)
{
    if (s->dense) return &s->dense[i];
    starpu_data_handle_t *c = find(s, i);
    if (c) return c;
    if (2 * (s->used + 1) > s->cap) { /* at most half full */
        const size_t nc = s->cap ? 2 * s->cap : 8;
        entry *t = calloc(nc, sizeof *t);
        if (!t) return NULL;
        for (size_t j = 0; j < s->cap; j++)
            if (s->tab[j].key) put(t, nc, s->tab[j].key, s->tab[j].cell);
        free(s->tab);
        s->tab = t;
        s->cap = nc;
    }
    if (!s->left) {
        chunk *ch = calloc(1, sizeof *ch);
        if (!ch) return NULL;
        ch->next = s->chunks;
        s->chunks = ch;
        s->left = CHUNK;
    }
    c = &s->chunks->cell[CHUNK - s->left--];
    put(s->tab, s->cap, (uint64_t)i + 1, c);
    s->used++;
    return c;
}

unsigned char hyfi_flag(const hyfi_slots *s, size_t i)
{
    if (!s || i >= s->n) return 0;
    const starpu_data_handle_t *c = s->dense ? &s->dense[i] : find(s, i);
    return c ? *(const unsigned char *)c : 0;
}

unsigned char *hyfi_flag_at(hyfi_slots *s, size_t i)
{
    if (!s) return NULL;
    starpu_data_handle_t *c = hyfi_slot_at(s, i);
    return (unsigned char *)(c ? c : &s->sink);
}

void hyfi_slots_zero(hyfi_slots *s)
{
    if (!s) return;
    if (s->dense) {
        memset(s->dense, 0, s->n * sizeof *s->dense);
        return;
    }
    for (chunk *c = s->chunks; c; c = c->next) memset(c->cell, 0, sizeof c->cell);
}

size_t hyfi_slots_bytes(const hyfi_slots *s)
{
    if (!s) return 0;
    size_t b = sizeof *s + (s->dense ? s->n * sizeof *s->dense : 0) + s->cap * sizeof(entry);
    for (const chunk *c = s->chunks; c; c = c->next) b += sizeof *c;
    return b;
}
