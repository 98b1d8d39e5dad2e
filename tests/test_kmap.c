/* test_kmap: the key map of a compiled graph (engine/kmap.c, no StarPU)
 * against a dense reference: every key made is found again with its entry
 * and flag, through the map's growth; keys never made are absent; a key
 * made twice is one cell; zeroing the flags of some roles leaves the others';
 * out-of-range fields are refused; memory follows the keys made, not their
 * range (a tiled stage names a few keys out of a large index space). */
#include "kmap.h"
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ROLES 8
#define OBJS 50
#define IDXS 400

int main(void)
{
    hyfi_kmap m = {0};
    static int32_t ref[ROLES][OBJS][IDXS]; /* entry, -1: absent */
    static unsigned char fref[ROLES][OBJS][IDXS];
    uint64_t st = 7;
    for (int r = 0; r < ROLES; r++)
        for (int o = 0; o < OBJS; o++)
            for (int i = 0; i < IDXS; i++) ref[r][o][i] = -1;
    /* a quarter of the keys, in a random order, some made twice */
    size_t made = 0;
    int bad_make = 0;
    for (int n = 0; n < ROLES * OBJS * IDXS / 4; n++) {
        const int r = tu_randint(&st, 1, ROLES - 1), o = tu_randint(&st, 0, OBJS - 1),
                  i = tu_randint(&st, 0, IDXS - 1);
        /* indices spread over 2^40: the map holds keys, not ranges */
        hyfi_kcell *c = hyfi_kmap_cell(&m, (unsigned)r, (uint64_t)o, (uint64_t)i << 28);
        if (!c) {
            bad_make++;
            continue;
        }
        if (ref[r][o][i] < 0) {
            made++;
            bad_make += c->ent != -1 || c->flag != 0;
            ref[r][o][i] = c->ent = n;
        }
        if (n % 3 == 0) fref[r][o][i] = c->flag = (unsigned char)(1 + n % 5);
    }
    tu_check(bad_make != 0, "cells made fresh (entry -1, flag 0), none refused");
    tu_check(m.n != made, "a key made twice is one cell");
    int mism = 0;
    for (int r = 0; r < ROLES; r++)
        for (int o = 0; o < OBJS; o++)
            for (int i = 0; i < IDXS; i++) {
                const hyfi_kcell *c =
                    hyfi_kmap_find(&m, (unsigned)r, (uint64_t)o, (uint64_t)i << 28);
                if (ref[r][o][i] < 0) mism += c != NULL;
                else mism += !c || c->ent != ref[r][o][i] || c->flag != fref[r][o][i];
            }
    printf("%zu keys made, map of %zu cells (%zu KB), %d mismatches against the reference\n", made,
           m.cap, hyfi_kmap_bytes(&m) / 1024, mism);
    tu_check(mism != 0, "every key found with its entry and flag; the others absent");
    tu_check(m.cap > 4 * made + 8192, "memory follows the keys made (at most half full, 2x)");
    /* zero the flags of roles 2 and 5 only */
    hyfi_kmap_zero_flags(&m, 1ull << 2 | 1ull << 5);
    int zbad = 0;
    for (int r = 0; r < ROLES; r++)
        for (int o = 0; o < OBJS; o++)
            for (int i = 0; i < IDXS; i++) {
                const hyfi_kcell *c =
                    hyfi_kmap_find(&m, (unsigned)r, (uint64_t)o, (uint64_t)i << 28);
                if (!c) continue;
                const unsigned char want = (r == 2 || r == 5) ? 0 : fref[r][o][i];
                zbad += c->flag != want;
            }
    tu_check(zbad != 0, "zeroing some roles' flags leaves the others'");
    /* out of range: role 0 (a free cell's mark), role above 255, obj above 2^32 */
    const int refused = !hyfi_kmap_cell(&m, 0, 1, 1) + !hyfi_kmap_cell(&m, 256, 1, 1) +
                        !hyfi_kmap_cell(&m, 1, UINT64_C(1) << 32, 1);
    tu_check(refused != 3, "fields out of range refused");
    hyfi_kmap_free(&m);
    tu_check(m.cap != 0 || hyfi_kmap_find(&m, 1, 0, 0) != NULL, "an empty map finds nothing");
    return tu_finish();
}
