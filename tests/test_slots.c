/* test_slots: the per-slot arrays of a compiled graph (engine/slots.c, no
 * StarPU call): against a dense reference under random writes, dense (few
 * slots) and sparse (many); a cell's address never moves while others are
 * made; unwritten slots read NULL and flags 0; zeroing keeps the cells; out of
 * range reads NULL; a sparse array's bytes follow the slots written, not its
 * length (a slot per replica of an 8,192-GPU plan costs nothing where a rank
 * does not write it). */
#include "slots.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int fails;
#define CHECK(c, ...)                                                                   \
    do {                                                                                \
        if (!(c)) {                                                                     \
            printf("FAILED: " __VA_ARGS__);                                             \
            printf("\n");                                                               \
            fails++;                                                                    \
        }                                                                               \
    } while (0)

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n slots, `writes` random writes (values and flags) checked against a dense
 * reference, with every cell's address checked to stay put. */
static void against_reference(size_t n, int writes)
{
    int oom = 0;
    hyfi_slots *s = hyfi_slots_new(n, &oom), *f = hyfi_slots_new(n, &oom);
    starpu_data_handle_t *ref = calloc(n, sizeof *ref), **cell = calloc(n, sizeof *cell);
    unsigned char *fref = calloc(n, 1), **fcell = calloc(n, sizeof *fcell);
    CHECK(s && f && ref && cell && fref && fcell, "allocating %zu slots", n);
    if (!s || !f || !ref || !cell || !fref || !fcell) return;
    uint64_t st = n;
    for (int w = 0; w < writes; w++) {
        const size_t i = next(&st) % n;
        starpu_data_handle_t *c = hyfi_slot_at(s, i);
        CHECK(c, "slot %zu of %zu: no cell", i, n);
        if (!c) break;
        CHECK(!cell[i] || cell[i] == c, "slot %zu of %zu moved", i, n);
        cell[i] = c;
        *c = ref[i] = (starpu_data_handle_t)(uintptr_t)(next(&st) | 16);
        unsigned char *b = hyfi_flag_at(f, i);
        CHECK(!fcell[i] || fcell[i] == b, "flag %zu of %zu moved", i, n);
        fcell[i] = b;
        *b = fref[i] = (unsigned char)(1 + next(&st) % 255);
    }
    size_t mism = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        mism += hyfi_slot(s, i) != ref[i] || hyfi_flag(f, i) != fref[i];
        if (cell[i]) moved += hyfi_slot_at(s, i) != cell[i];
    }
    CHECK(!mism, "%zu of %zu slots differ from the reference", mism, n);
    CHECK(!moved, "%zu cells of %zu moved", moved, n);
    CHECK(hyfi_slot(s, n) == NULL && hyfi_slot_at(s, n) == NULL && hyfi_flag(f, n + 7) == 0,
          "out of range reads something (n = %zu)", n);
    CHECK(hyfi_slots_len(s) == n, "length %zu, want %zu", hyfi_slots_len(s), n);
    hyfi_slots_zero(s);
    hyfi_slots_zero(f);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        nonzero += hyfi_slot(s, i) != NULL || hyfi_flag(f, i) != 0;
        if (cell[i]) moved += hyfi_slot_at(s, i) != cell[i];
    }
    CHECK(!nonzero && !moved, "after zeroing: %zu slots set, %zu cells moved", nonzero, moved);
    CHECK(!oom, "out-of-memory flag set");
    printf("ok   %zu slots, %d writes: %zu bytes\n", n, writes, hyfi_slots_bytes(s));
    hyfi_slots_free(s);
    hyfi_slots_free(f);
    free(ref), free(cell), free(fref), free(fcell);
}

int main(void)
{
    against_reference(1, 10);
    against_reference(HYFI_SLOTS_DENSE, 200);
    against_reference(HYFI_SLOTS_DENSE + 1, 200);
    against_reference(4096, 3000);
    against_reference(100000, 20000);
    /* the bytes follow the slots written: a rank's 3 slots of 8,192 replicas x
     * 64 tiles cost the same as of 16 replicas */
    int oom = 0;
    hyfi_slots *small = hyfi_slots_new(16 * 64, &oom), *large = hyfi_slots_new(8192 * 64, &oom);
    hyfi_slots *huge = hyfi_slots_new((size_t)1 << 40, &oom);
    const size_t at[] = {0, 5 * 64 + 3, 15 * 64};
    for (int k = 0; k < 3; k++) {
        *hyfi_slot_at(small, at[k]) = (starpu_data_handle_t)(uintptr_t)16;
        *hyfi_slot_at(large, at[k]) = (starpu_data_handle_t)(uintptr_t)16;
        *hyfi_slot_at(huge, ((size_t)1 << 39) + at[k]) = (starpu_data_handle_t)(uintptr_t)16;
    }
    const size_t bs = hyfi_slots_bytes(small), bl = hyfi_slots_bytes(large),
                 bh = hyfi_slots_bytes(huge);
    printf("3 slots written of 1,024 / 524,288 / 2^40: %zu / %zu / %zu bytes\n", bs, bl, bh);
    CHECK(bs == bl && bl == bh && bs < 1024, "bytes grow with the length: %zu, %zu, %zu", bs,
          bl, bh);
    CHECK(hyfi_slot(huge, ((size_t)1 << 39) + at[1]) && !hyfi_slot(huge, at[1]),
          "a slot of 2^40 read back wrong");
    hyfi_slots_free(small);
    hyfi_slots_free(large);
    hyfi_slots_free(huge);
    hyfi_slots_free(NULL);
    CHECK(!hyfi_slot(NULL, 0) && !hyfi_flag(NULL, 0), "a NULL array reads something");
    if (fails) printf("%d check(s) failed\n", fails);
    return fails ? 1 : 0;
}
