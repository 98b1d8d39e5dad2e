/* Deterministic parameter initialisation. A parameter's values depend only on
 * the graph seed and the parameter's name (never on creation order or on how
 * the graph is later partitioned): value i comes from a counter-based
 * generator keyed by hash(seed, name) and i. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* FNV-1a (also used by the ranks' graph comparison, agree.c). */
uint64_t hyfi_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(0x100000001b3); /* FNV-1a */
    }
    return h;
}

#define FNV_PRIME UINT64_C(0x100000001b3)
#define FNV_BASIS UINT64_C(0xcbf29ce484222325)

void hyfi_sum_init(hyfi_sum *s)
{
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 8; k++) s->lane[k] = FNV_BASIS + (uint64_t)k;
}

static void sum_blocks(hyfi_sum *s, const unsigned char *b, size_t nblocks)
{
    uint64_t l[8];
    memcpy(l, s->lane, sizeof l);
    for (size_t i = 0; i < nblocks; i++, b += 64)
        for (int k = 0; k < 8; k++) {
            uint64_t w;
            memcpy(&w, b + 8 * k, sizeof w); /* little-endian files: native order here */
            l[k] = (l[k] ^ w) * FNV_PRIME;
        }
    memcpy(s->lane, l, sizeof l);
}

void hyfi_sum_add(hyfi_sum *s, const void *p, size_t n)
{
    const unsigned char *b = p;
    s->total += n;
    if (s->nbuf) {
        const size_t take = n < 64 - s->nbuf ? n : 64 - s->nbuf;
        memcpy(s->buf + s->nbuf, b, take);
        s->nbuf += take, b += take, n -= take;
        if (s->nbuf < 64) return;
        sum_blocks(s, s->buf, 1);
        s->nbuf = 0;
    }
    sum_blocks(s, b, n / 64);
    b += n / 64 * 64;
    n %= 64;
    memcpy(s->buf, b, n);
    s->nbuf = n;
}

uint64_t hyfi_sum_end(const hyfi_sum *s)
{
    uint64_t h = hyfi_hash_bytes(FNV_BASIS, s->lane, sizeof s->lane);
    h = hyfi_hash_bytes(h, s->buf, s->nbuf);
    return hyfi_hash_bytes(h, &s->total, sizeof s->total);
}

uint64_t hyfi_hash_str(uint64_t h, const char *s)
{
    /* the terminating zero too: "ab","c" and "a","bc" differ */
    return s ? hyfi_hash_bytes(h, s, strlen(s) + 1) : hyfi_hash_bytes(h, "\377", 1);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001B3ull;
    }
    return mix64(h ^ mix64(seed + 0x9E3779B97F4A7C15ull));
}

/* Uniform in (0, 1) from the i-th counter value. */
static double unit(uint64_t key, uint64_t i)
{
    uint64_t r = mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull);
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void hyfi_param_init(float *dst, const hyfi_tensor *t, uint64_t seed)
{
    uint64_t key = name_key(seed, t->name);
    size_t n = t->numel;
    double fan = t->fan_in > 0 ? (double)t->fan_in : 1.0;
    switch (t->init) {
    case INIT_ZERO:
        memset(dst, 0, n * sizeof *dst);
        break;
    case INIT_ONE:
        for (size_t i = 0; i < n; i++) dst[i] = 1.0f;
        break;
    case INIT_HE_NORMAL: {
        double std = sqrt(2.0 / fan);
        for (size_t i = 0; i < n; i++) { /* Box-Muller, one value per pair of draws */
            double u1 = unit(key, 2 * (uint64_t)i), u2 = unit(key, 2 * (uint64_t)i + 1);
            dst[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
        }
        break;
    }
    case INIT_UNIFORM: {
        double bound = 1.0 / sqrt(fan);
        for (size_t i = 0; i < n; i++) dst[i] = (float)(bound * (2.0 * unit(key, i) - 1.0));
        break;
    }
    }
}
