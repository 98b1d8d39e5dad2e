/* keys.c: the StarPU-MPI tag of a key (keys.h). */
#include "keys.h"

#define MASK(bits) ((UINT64_C(1) << (bits)) - 1)

int64_t hyfi_key_tag(unsigned graph, int cat, hyfi_key k)
{
    if (k.role < HK_VALUE || k.role >= HK_NROLES || cat < 0 || (uint64_t)cat > MASK(HYFI_KEY_CAT_BITS) ||
        k.obj > MASK(HYFI_KEY_OBJ_BITS) || k.idx > MASK(HYFI_KEY_IDX_BITS))
        return -1;
    uint64_t hi = graph & MASK(HYFI_KEY_GRAPH_BITS);
    hi = hi << HYFI_KEY_OBJ_BITS | k.obj;
    hi = hi << HYFI_KEY_IDX_HI_BITS | k.idx >> HYFI_KEY_IDX_LO_BITS;
    uint64_t lo = (uint64_t)cat;
    lo = lo << HYFI_KEY_ROLE_BITS | (uint64_t)k.role;
    lo = lo << HYFI_KEY_IDX_LO_BITS | (k.idx & MASK(HYFI_KEY_IDX_LO_BITS));
    return (int64_t)(hi << 32 | lo); /* above 0: the role is at least 1 */
}

int hyfi_key_of_tag(int64_t tag, unsigned *graph, int *cat, hyfi_key *k)
{
    if (tag < 1) return -1;
    const uint64_t t = (uint64_t)tag, lo = t & 0xffffffffu;
    uint64_t hi = t >> 32;
    k->idx = (hi & MASK(HYFI_KEY_IDX_HI_BITS)) << HYFI_KEY_IDX_LO_BITS |
             (lo & MASK(HYFI_KEY_IDX_LO_BITS));
    hi >>= HYFI_KEY_IDX_HI_BITS;
    k->obj = (uint32_t)(hi & MASK(HYFI_KEY_OBJ_BITS));
    hi >>= HYFI_KEY_OBJ_BITS;
    *graph = (unsigned)hi;
    k->role = (hyfi_role)(lo >> HYFI_KEY_IDX_LO_BITS & MASK(HYFI_KEY_ROLE_BITS));
    k->rep = -1; /* (not in the tag) */
    *cat = (int)(lo >> (HYFI_KEY_IDX_LO_BITS + HYFI_KEY_ROLE_BITS));
    return hi >> HYFI_KEY_GRAPH_BITS || k->role < HK_VALUE || k->role >= HK_NROLES ? -1 : 0;
}

int hyfi_key_tag_category(uint32_t low)
{
    return (int)(low >> (HYFI_KEY_IDX_LO_BITS + HYFI_KEY_ROLE_BITS));
}
