/* The key map (kmap.h). */
#include "kmap.h"

#include <stdlib.h>

static size_t kslot(size_t mask, unsigned role, uint64_t obj, uint64_t idx)
{
    uint64_t h = idx * 0x9E3779B97F4A7C15ull;
    h ^= (obj + ((uint64_t)role << 32)) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (size_t)h & mask;
}

/* The key's cell or the free cell where it would go (cap > 0). */
static size_t kfind(const hyfi_kmap *m, unsigned role, uint64_t obj, uint64_t idx)
{
    const size_t mask = m->cap - 1;
    size_t j = kslot(mask, role, obj, idx);
    for (;;) {
        const hyfi_kcell *c = &m->cell[j];
        if (!c->role || (c->role == role && c->obj == obj && c->idx == idx)) return j;
        j = (j + 1) & mask;
    }
}

hyfi_kcell *hyfi_kmap_find(const hyfi_kmap *m, unsigned role, uint64_t obj, uint64_t idx)
{
    if (!m->cap) return NULL;
    hyfi_kcell *c = &m->cell[kfind(m, role, obj, idx)];
    return c->role ? c : NULL;
}

hyfi_kcell *hyfi_kmap_cell(hyfi_kmap *m, unsigned role, uint64_t obj, uint64_t idx)
{
    if (!role || role > UINT8_MAX || obj > UINT32_MAX) return NULL;
    if (2 * (m->n + 1) > m->cap) {
        hyfi_kcell *old = hyfi_kmap_find(m, role, obj, idx);
        if (old) return old;
        const size_t nc = m->cap ? 2 * m->cap : 4096;
        hyfi_kcell *t = calloc(nc, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            const hyfi_kcell *c = &m->cell[i];
            if (!c->role) continue;
            size_t j = kslot(nc - 1, c->role, c->obj, c->idx);
            while (t[j].role) j = (j + 1) & (nc - 1);
            t[j] = *c;
        }
        free(m->cell);
        m->cell = t;
        m->cap = nc;
    }
    hyfi_kcell *c = &m->cell[kfind(m, role, obj, idx)];
    if (!c->role) {
        *c = (hyfi_kcell){.idx = idx, .obj = (uint32_t)obj, .role = (uint8_t)role, .ent = -1};
        m->n++;
    }
    return c;
}

void hyfi_kmap_zero_flags(hyfi_kmap *m, uint64_t roles)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->cell[i].role && (roles >> m->cell[i].role & 1)) m->cell[i].flag = 0;
}

void hyfi_kmap_free(hyfi_kmap *m)
{
    free(m->cell);
    m->cell = NULL;
    m->cap = m->n = 0;
}
