/* keys.h: the names of a compiled graph's pieces of data, and the StarPU-MPI
 * tags packed from them.
 *
 * A key names one piece of data: what it is of (obj: a tensor's id, a node's
 * index, an all-reduce bucket's index, 0 for the graph's own), its role
 * (value, gradient, momentum, a tile, a halo strip, ...) and its index among
 * the pieces of that role (a micro-batch, a replica, a tile: each call site's
 * own slot index, e.g. m P + q). Its tag is a pure function of the key and the
 * graph's serial number, so every rank gives a piece the same tag whatever it
 * registers or skips, in whatever order (before, the tags were a counter that
 * every rank had to walk through the whole plan to keep aligned). Plain C,
 * no StarPU. */
#ifndef HYFI_KEYS_H
#define HYFI_KEYS_H

#include <stdint.h>

typedef enum hyfi_role {
    HK_VALUE = 1,  /* a tensor's value: per micro-batch or per replica */
    HK_GRAD,       /* its gradient */
    HK_MOMENTUM,   /* a parameter's momentum, per replica */
    HK_NORMS,      /* a parameter's two health sums, per replica */
    HK_PARTIAL,    /* an activation's gradient from one stage: stage M + m */
    HK_RSAVE,      /* running statistics saved at the step's start, per replica */
    HK_HEALTH,     /* the health sums of a rank */
    HK_DLOSS,      /* the backward's seed, per micro-batch */
    HK_TOKEN,      /* 1F1B slot tokens */
    HK_TILE,       /* a tensor's tile: m P + q */
    HK_TILE_GRAD,  /* its gradient */
    HK_TBUF,       /* a tiled node's assembled input: m P + q */
    HK_TDBUF,      /* its gradient */
    HK_STRIP,      /* a halo strip: (m P + q) pieces + k */
    HK_DSTRIP,     /* its gradient */
    HK_WPART,      /* a tile's weight-gradient part: replica P + q */
    HK_BPART,      /* its bias-gradient part */
    HK_BN_PART,    /* a tiled batch norm's statistics of a tile: m P + q */
    HK_BN_BWPART,  /* its backward's */
    HK_BN_TOT,     /* its backward's totals, per micro-batch */
    HK_F_ZTOT,     /* a fused group's zero statistics: op R + replica */
    HK_F_VAL,      /* a fused group's extended value: (op M + m) P + q */
    HK_F_GRAD,     /* its gradient */
    HK_F_PBUF,     /* a fused op's padded input */
    HK_F_DPBUF,    /* its gradient */
    HK_F_XO,       /* a fused batch norm's own x */
    HK_F_DYO,      /* its own dy */
    HK_F_DXO,      /* its own dx */
    HK_BUCKET,     /* an all-reduce bucket, per replica */
    HK_ARC,        /* a ring all-reduce chunk: replica R + chunk */
    HK_RC_FENCE,   /* a place's recompute fence */
    HK_RC_BN,      /* a re-run batch norm's statistics: replica 4 + k */
    HK_LCOPY,      /* a copy on a tile's rank (localise.c): obj and idx from the original */
    HK_BN_PACK,    /* a rank's packet of HK_BN_PART (spatial_bn.c): m P + first tile */
    HK_BN_BWPACK,  /* the same of HK_BN_BWPART */
    HK_SVAL,       /* a stage's running statistics packed (reduce.c), per replica */
    HK_SSAVE,      /* the same saved at the step's start, per replica */
    HK_NROLES
} hyfi_role;

typedef struct hyfi_key {
    hyfi_role role;
    uint32_t obj;
    uint64_t idx;
    /* the replica whose tasks use the piece (-1: none in particular: every
     * rank that names it). Not part of the tag (the index tells pieces
     * apart); it decides, with the role, which ranks register the piece
     * (keyed.c: hyfi_key_wanted). */
    int32_t rep;
} hyfi_key;

#define HYFI_KEY(role, obj, idx) ((hyfi_key){(role), (uint32_t)(obj), (uint64_t)(idx), -1})
/* A piece of replica rep's. */
#define HYFI_KEY_R(role, obj, idx, rep)                                                       \
    ((hyfi_key){(role), (uint32_t)(obj), (uint64_t)(idx), (int32_t)(rep)})

/* A tag is the packed fields (above 0: a role is at least 1), below 2^60 (the agreement rounds use tags
 * from 2^60). StarPU's FxT traces keep a message's tag in 32 bits, so the low
 * 32 bits hold the traffic category (hyfi_hcat, 4 bits), the role (6) and the
 * index's low 22 bits: a trace's messages keep their category
 * (trace/read.c). The high bits hold the index's next 6 bits, the object (16)
 * and the graph's serial (6). */
#define HYFI_KEY_CAT_BITS 4
#define HYFI_KEY_ROLE_BITS 6
#define HYFI_KEY_IDX_LO_BITS 22
#define HYFI_KEY_IDX_HI_BITS 6
#define HYFI_KEY_IDX_BITS (HYFI_KEY_IDX_LO_BITS + HYFI_KEY_IDX_HI_BITS)
#define HYFI_KEY_OBJ_BITS 16
#define HYFI_KEY_GRAPH_BITS 6

/* The tag of key k of graph `graph` (its serial number, taken modulo 2^6), in
 * traffic category cat; -1 when a field does not fit. */
int64_t hyfi_key_tag(unsigned graph, int cat, hyfi_key k);
/* The key, graph serial and category of a tag (inverse of hyfi_key_tag); -1
 * for no tag. */
int hyfi_key_of_tag(int64_t tag, unsigned *graph, int *cat, hyfi_key *k);
/* A tag's traffic category from its low 32 bits (what a trace keeps). */
int hyfi_key_tag_category(uint32_t low);

#endif
