/* Saving and loading parameters and state.
 *
 * File format (little-endian, as written by this machine):
 *   "HYFIPRM1"                      8-byte magic
 *   uint32 count                    number of tensors
 *   count x { uint32 name_len, name bytes, int32 dims[4], float32 values[numel] }
 *   uint64 checksum                 FNV-1a over everything before it
 * Saving is atomic: a temporary file beside the target is written, flushed,
 * fsync'ed and renamed over it, so a crash never leaves a half-written file.
 *
 * In MPI runs both calls are collective: saving brings every value to rank 0,
 * which writes the file; loading reads the file on every rank (a shared file
 * system, or a copy per node) and each rank applies the tensors it owns.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MAGIC[8] = {'H', 'Y', 'F', 'I', 'P', 'R', 'M', '1'};

typedef struct {
    FILE *f;
    uint64_t sum;
    int err;
} stream;

static void sum_bytes(stream *s, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        s->sum ^= b[i];
        s->sum *= 0x100000001B3ull;
    }
}

static void put(stream *s, const void *p, size_t n)
{
    if (s->err) return;
    if (fwrite(p, 1, n, s->f) != n) s->err = errno ? errno : EIO;
    sum_bytes(s, p, n);
}

static int get(stream *s, void *p, size_t n)
{
    if (fread(p, 1, n, s->f) != n) return -1;
    sum_bytes(s, p, n);
    return 0;
}

static int saved_kind(const hyfi_tensor *t) { return t->kind == T_PARAM || t->kind == T_STATE; }

static hyfi_status write_file(hyfi_graph *g, const char *path, float *const *vals);

hyfi_status hyfi_save_params(hyfi_graph *g, const char *path)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "hyfi_save_params: graph or path is NULL");
    if (!g->compiled)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_save_params: compile the graph first");
    /* Every rank takes part (the values come from the ranks that own them);
     * rank 0 writes the file. */
    float **vals = calloc((size_t)g->ntensors, sizeof *vals);
    int oom = !vals;
    for (int i = 0; i < g->ntensors && !oom; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!saved_kind(t)) continue;
        if (!(vals[i] = malloc(t->numel * sizeof(float)))) oom = 1;
    }
    for (int i = 0; i < g->ntensors && !oom; i++)
        if (vals[i]) hyfi_handle_read(g, g->tensors[i]->h[0], 0, vals[i], g->tensors[i]->numel * 4);
    hyfi_status st = HYFI_OK;
    if (oom) st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_save_params: out of memory");
    else if (g->ctx->rank == 0) st = write_file(g, path, vals);
    for (int i = 0; vals && i < g->ntensors; i++) free(vals[i]);
    free(vals);
    return st;
}

static hyfi_status write_file(hyfi_graph *g, const char *path, float *const *vals)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_save_params: out of memory");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    stream s = {.f = fopen(tmp, "wb"), .sum = 0xCBF29CE484222325ull};
    if (!s.f) {
        hyfi_status st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_save_params: cannot create %s: %s; "
                                                        "check that the folder exists and is "
                                                        "writable", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    uint32_t count = 0;
    for (int i = 0; i < g->ntensors; i++) count += (uint32_t)saved_kind(g->tensors[i]);
    put(&s, MAGIC, sizeof MAGIC);
    put(&s, &count, sizeof count);
    for (int i = 0; i < g->ntensors && !s.err; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!saved_kind(t)) continue;
        uint32_t len = (uint32_t)strlen(t->name);
        int32_t dims[4] = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
        put(&s, &len, sizeof len);
        put(&s, t->name, len);
        put(&s, dims, sizeof dims);
        put(&s, vals[i], t->numel * sizeof(float));
    }
    uint64_t sum = s.sum;
    put(&s, &sum, sizeof sum);
    if (!s.err && fflush(s.f) != 0) s.err = errno;
    if (!s.err && fsync(fileno(s.f)) != 0) s.err = errno;
    if (fclose(s.f) != 0 && !s.err) s.err = errno;
    if (!s.err && rename(tmp, path) != 0) s.err = errno;
    hyfi_status st = HYFI_OK;
    if (s.err) {
        unlink(tmp);
        st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_save_params: writing %s failed: %s (the "
                                            "previous file, if any, is intact)", path,
                            strerror(s.err));
    }
    free(tmp);
    return st;
}

hyfi_status hyfi_load_params(hyfi_graph *g, const char *path)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "hyfi_load_params: graph or path is NULL");
    if (!g->compiled)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_load_params: compile the graph first");
    stream s = {.f = fopen(path, "rb"), .sum = 0xCBF29CE484222325ull};
    if (!s.f)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: cannot open %s: %s", path,
                              strerror(errno));
    hyfi_status st = HYFI_OK;
    char magic[8];
    uint32_t count = 0, expected = 0;
    for (int i = 0; i < g->ntensors; i++) expected += (uint32_t)saved_kind(g->tensors[i]);
    float **vals = calloc((size_t)g->ntensors, sizeof *vals);
    if (!vals) {
        fclose(s.f);
        return hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
    }
    if (get(&s, magic, sizeof magic) || memcmp(magic, MAGIC, sizeof MAGIC) != 0) {
        st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is not a hyfi parameter file "
                                            "(bad magic)", path);
        goto out;
    }
    if (get(&s, &count, sizeof count) || count != expected) {
        st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s holds %u tensors, the graph "
                                            "has %u parameter and state tensors; it was saved "
                                            "from another model", path, count, expected);
        goto out;
    }
    /* Read everything first; only a file that checks out entirely is applied. */
    for (uint32_t k = 0; k < count; k++) {
        uint32_t len;
        char name[HYFI_NAME_MAX + 40];
        int32_t dims[4];
        if (get(&s, &len, sizeof len) || len >= sizeof name || get(&s, name, len)) {
            st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is truncated or corrupt "
                                                "(tensor %u)", path, k);
            goto out;
        }
        name[len] = 0;
        hyfi_tensor *t = hyfi_tensor_find(g, name);
        if (!t || !saved_kind(t)) {
            st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s has tensor \"%s\", which "
                                                "this graph does not have", path, name);
            goto out;
        }
        if (get(&s, dims, sizeof dims) || dims[0] != t->dims[0] || dims[1] != t->dims[1] ||
            dims[2] != t->dims[2] || dims[3] != t->dims[3]) {
            st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: \"%s\" is (%d,%d,%d,%d) in %s "
                                                "but (%d,%d,%d,%d) in the graph", name, dims[0],
                                dims[1], dims[2], dims[3], path, t->dims[0], t->dims[1],
                                t->dims[2], t->dims[3]);
            goto out;
        }
        if (vals[t->id]) {
            st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s lists \"%s\" twice", path,
                                name);
            goto out;
        }
        vals[t->id] = malloc(t->numel * sizeof(float));
        if (!vals[t->id]) {
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
            goto out;
        }
        if (get(&s, vals[t->id], t->numel * sizeof(float))) {
            st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is truncated (in \"%s\")",
                                path, name);
            goto out;
        }
    }
    uint64_t want = s.sum, got;
    if (fread(&got, 1, sizeof got, s.f) != sizeof got || got != want) {
        st = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s fails its checksum (corrupt "
                                            "or truncated)", path);
        goto out;
    }
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!vals[i]) continue;
        /* every replica's copy */
        for (int k = 0; k < t->nh; k++)
            hyfi_handle_write(g, t->h[k], hyfi_trank(g, t, k), vals[i], t->numel * sizeof(float));
        if (t->mh) { /* a loaded model starts with fresh momentum */
            memset(vals[i], 0, t->numel * sizeof(float));
            for (int k = 0; k < t->nh; k++)
                hyfi_handle_write(g, t->mh[k], hyfi_trank(g, t, k), vals[i],
                                  t->numel * sizeof(float));
        }
    }
out:
    for (int i = 0; i < g->ntensors; i++) free(vals[i]);
    free(vals);
    fclose(s.f);
    return st;
}
