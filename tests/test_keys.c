/* test_keys: the keys of a compiled graph's data and their StarPU-MPI tags
 * (engine/keys.c, no StarPU): a tag is a function of the key alone; distinct
 * keys (and graphs, and categories) give distinct tags; a tag gives back its
 * key; tags stay in (0, 2^60); a field out of range gives -1; the low 32 bits
 * (what a trace keeps) give the category. */
#include "keys.h"
#include "testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    /* every combination of a few values of each field */
    const unsigned graphs[] = {0, 1, 63, 64};
    const int cats[] = {0, 3, 15};
    const uint32_t objs[] = {0, 1, 777, 65535};
    const uint64_t idxs[] = {0, 1, 4194303, 4194304, (UINT64_C(1) << 28) - 1};
    const size_t n = 3 * (HK_NROLES - 1) * 4 * 5 * 3;
    int64_t *tags = malloc(n * sizeof *tags);
    size_t k = 0;
    int bad_round = 0, bad_range = 0, bad_cat = 0;
    for (int gi = 0; gi < 3; gi++) /* 64 wraps to 0: left out of the distinct set */
        for (int r = HK_VALUE; r < HK_NROLES; r++)
            for (int oi = 0; oi < 4; oi++)
                for (int ii = 0; ii < 5; ii++)
                    for (int ci = 0; ci < 3; ci++) {
                        const hyfi_key key = HYFI_KEY((hyfi_role)r, objs[oi], idxs[ii]);
                        const int64_t t = hyfi_key_tag(graphs[gi], cats[ci], key);
                        unsigned g2;
                        int c2;
                        hyfi_key k2;
                        bad_range += t <= 0 || t >= (INT64_C(1) << 60);
                        bad_round += hyfi_key_of_tag(t, &g2, &c2, &k2) != 0 || g2 != graphs[gi] ||
                                     c2 != cats[ci] || k2.role != key.role || k2.obj != key.obj ||
                                     k2.idx != key.idx;
                        bad_cat += hyfi_key_tag_category((uint32_t)t) != cats[ci];
                        tags[k++] = t;
                    }
    qsort(tags, k, sizeof *tags, cmp64);
    size_t dup = 0;
    for (size_t i = 1; i < k; i++) dup += tags[i] == tags[i - 1];
    printf("%zu keys: %zu tags alike, %d out of (0, 2^60), %d not decoded back, %d with another "
           "category in the low word\n", k, dup, bad_range, bad_round, bad_cat);
    tu_check(dup != 0, "distinct keys give distinct tags");
    tu_check(bad_range != 0, "tags in (0, 2^60)");
    tu_check(bad_round != 0, "a tag gives back its key, graph and category");
    tu_check(bad_cat != 0, "a tag's low 32 bits give its category");
    /* the graph serial is taken modulo 2^6 */
    const hyfi_key a = HYFI_KEY(HK_GRAD, 5, 9);
    tu_check(hyfi_key_tag(64, 1, a) != hyfi_key_tag(0, 1, a), "graph serials modulo 64");
    /* out of range: -1 */
    int refused = 0;
    refused += hyfi_key_tag(0, 0, HYFI_KEY(0, 0, 0)) == -1;
    refused += hyfi_key_tag(0, 0, HYFI_KEY(HK_NROLES, 0, 0)) == -1;
    refused += hyfi_key_tag(0, 16, a) == -1;
    refused += hyfi_key_tag(0, -1, a) == -1;
    refused += hyfi_key_tag(0, 0, HYFI_KEY(HK_VALUE, 65536, 0)) == -1;
    refused += hyfi_key_tag(0, 0, HYFI_KEY(HK_VALUE, 0, UINT64_C(1) << 28)) == -1;
    printf("fields out of range refused: %d of 6\n", refused);
    tu_check(refused != 6, "a field out of range gives -1");
    free(tags);
    return tu_finish();
}
