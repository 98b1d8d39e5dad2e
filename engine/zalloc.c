/* Zeroed arrays whose untouched pages the system never backs: the per-slot
 * handle arrays of a compiled graph (a tensor's handles for every
 * micro-batch or replica of the whole plan, a tiled node's for every tile),
 * of which a rank fills the slots of its own share only. From the heap they
 * were resident in full: 43 + 45 MB per rank of a 2,048-rank plan, its
 * 4,096 replicas' slots in every tensor (docs/results.md, "Per-rank costs").
 * Arrays of at least ZMAP_MIN bytes are anonymous mappings, whose pages are
 * backed at their first write (a read of an untouched page maps the shared
 * zero page); smaller ones come from calloc. A header before the array says
 * which, for hyfi_zfree. */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define ZMAP_MIN ((size_t)16 << 10)
#define ZHEAD 16 /* keeps the array 16-byte aligned */

void *hyfi_zalloc(size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - ZHEAD) / size) return NULL;
    const size_t bytes = ZHEAD + n * size;
    unsigned char *base;
    if (bytes >= ZMAP_MIN) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        base = p;
        *(size_t *)base = bytes;
    } else {
        base = calloc(1, bytes);
        if (!base) return NULL;
        *(size_t *)base = 0;
    }
    return base + ZHEAD;
}

void hyfi_zfree(void *p)
{
    if (!p) return;
    unsigned char *base = (unsigned char *)p - ZHEAD;
    const size_t bytes = *(size_t *)base;
    if (bytes) munmap(base, bytes);
    else free(base);
}
