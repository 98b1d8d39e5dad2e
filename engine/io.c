/* Saving and loading parameters and state.
 *
 * File format (little-endian, as written by this machine):
 *   "HYFIPRM1"                      8-byte magic
 *   uint32 count                    number of tensors
 *   count x { uint32 name_len, name bytes, int32 dims[4], float32 values[numel] }
 *   uint64 checksum                 FNV-1a over everything before it; the last bytes
 *
 * Saving is atomic: a temporary file beside the target is written, flushed,
 * fsync'ed and renamed over it, so a crash never leaves a half-written file.
 * Loading reads the whole file and checks the checksum before interpreting any
 * of it (a damaged file is reported as damaged, not as another model), then
 * requires the format exactly (nothing after the checksum), then the names and
 * shapes of the graph; only a file that passes everything is applied.
 *
 * In MPI runs both calls are collective: saving brings every value to rank 0,
 * which writes the file; loading reads the file on every rank (a shared file
 * system, or a copy per node) and each rank applies the tensors it owns.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'H', 'Y', 'F', 'I', 'P', 'R', 'M', '1'};
#define FNV_INIT 0xCBF29CE484222325ull
#define FNV_PRIME 0x100000001B3ull

static int saved_kind(const hyfi_tensor *t) { return t->kind == T_PARAM || t->kind == T_STATE; }

/* ------------------------------------------------------------------ saving */
typedef struct {
    FILE *f;
    uint64_t sum;
    int err;
} stream;

static void sum_bytes(uint64_t *sum, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t s = *sum;
    for (size_t i = 0; i < n; i++) {
        s ^= b[i];
        s *= FNV_PRIME;
    }
    *sum = s;
}

static void put(stream *s, const void *p, size_t n)
{
    if (s->err) return;
    if (fwrite(p, 1, n, s->f) != n) s->err = errno ? errno : EIO;
    sum_bytes(&s->sum, p, n);
}

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
    stream s = {.f = fopen(tmp, "wb"), .sum = FNV_INIT};
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

/* ----------------------------------------------------------------- loading */
/* The whole file into *buf (*len bytes). */
static hyfi_status read_whole(hyfi_graph *g, const char *path, unsigned char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: cannot open %s: %s", path,
                              strerror(errno));
    struct stat st;
    hyfi_status s = HYFI_OK;
    if (fstat(fd, &st) != 0) {
        s = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: cannot examine %s: %s", path,
                           strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        s = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is not a regular file; give a "
                                           "file written by hyfi_save_params", path);
    } else if (!(*buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1))) {
        s = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory for %s (%lld "
                                              "bytes)", path, (long long)st.st_size);
    } else {
        size_t want = (size_t)st.st_size;
        while (*len < want) {
            ssize_t n = read(fd, *buf + *len, want - *len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                s = hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: reading %s failed: %s",
                                   path, n < 0 ? strerror(errno) : "it shrank while being read");
                break;
            }
            *len += (size_t)n;
        }
    }
    close(fd);
    if (s != HYFI_OK) {
        free(*buf);
        *buf = NULL;
    }
    return s;
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Check a whole file and find its tensors: vals[id] points at the values of
 * tensor id in buf. Nothing is interpreted before the checksum holds. */
static hyfi_status check_file(hyfi_graph *g, const char *path, const unsigned char *buf,
                              size_t n, const unsigned char **vals)
{
    const size_t head = sizeof MAGIC + sizeof(uint32_t), tail = sizeof(uint64_t);
    if (n < sizeof MAGIC || memcmp(buf, MAGIC, sizeof MAGIC) != 0)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is not a hyfi parameter file "
                                              "(it does not start with HYFIPRM1)", path);
    /* The checksum of the bytes before position p, compared at every p: a
     * match at the end is a sound file; one earlier, bytes appended to one. */
    uint64_t sum = FNV_INIT;
    size_t end = 0; /* the checksum's position, 0: none */
    for (size_t p = 0; p + tail <= n; p++) {
        if (p >= head) {
            uint64_t stored;
            memcpy(&stored, buf + p, sizeof stored);
            if (stored == sum) {
                end = p;
                break;
            }
        }
        sum = (sum ^ buf[p]) * FNV_PRIME;
    }
    if (!end)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is corrupt or truncated (its "
                                              "checksum does not match its contents); save it "
                                              "again or use another copy", path);
    if (end + tail != n)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s has %zu unexpected bytes "
                                              "after its checksum (at byte %zu); a parameter "
                                              "file ends with its checksum: it was appended to "
                                              "or damaged", path, n - end - tail, end + tail);
    /* A sound file: the rest is about the model it holds. */
    uint32_t expected = 0, count = rd32(buf + sizeof MAGIC);
    for (int i = 0; i < g->ntensors; i++) expected += (uint32_t)saved_kind(g->tensors[i]);
    if (count != expected)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s holds %u tensors, the graph "
                                              "has %u parameter and state tensors; it was saved "
                                              "from another model", path, count, expected);
    size_t pos = head;
    for (uint32_t k = 0; k < count; k++) {
        char name[HYFI_NAME_MAX + 40];
        uint32_t len = pos + 4 <= end ? rd32(buf + pos) : UINT32_MAX;
        if (len >= sizeof name || end - pos - 4 < (size_t)len + 16)
            return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is malformed (tensor %u "
                                                  "overruns the file although the checksum "
                                                  "holds); it was not written by "
                                                  "hyfi_save_params", path, k);
        memcpy(name, buf + pos + 4, len);
        name[len] = 0;
        pos += 4 + (size_t)len;
        int32_t dims[4];
        memcpy(dims, buf + pos, sizeof dims);
        pos += sizeof dims;
        hyfi_tensor *t = hyfi_tensor_find(g, name);
        if (!t || !saved_kind(t))
            return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s has tensor \"%s\", which "
                                                  "this graph does not have; it was saved from "
                                                  "another model", path, name);
        if (dims[0] != t->dims[0] || dims[1] != t->dims[1] || dims[2] != t->dims[2] ||
            dims[3] != t->dims[3])
            return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: \"%s\" is (%d,%d,%d,%d) in "
                                                  "%s but (%d,%d,%d,%d) in the graph", name,
                                  dims[0], dims[1], dims[2], dims[3], path, t->dims[0],
                                  t->dims[1], t->dims[2], t->dims[3]);
        if (vals[t->id])
            return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s lists \"%s\" twice", path,
                                  name);
        const size_t bytes = t->numel * sizeof(float);
        if (end - pos < bytes)
            return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is malformed (the values "
                                                  "of \"%s\" overrun the file although the "
                                                  "checksum holds)", path, name);
        vals[t->id] = buf + pos;
        pos += bytes;
    }
    if (pos != end)
        return hyfi_call_fail(g, HYFI_ERR_IO, "hyfi_load_params: %s is malformed (%zu bytes "
                                              "between its last tensor and its checksum)", path,
                              end - pos);
    return HYFI_OK;
}

hyfi_status hyfi_load_params(hyfi_graph *g, const char *path)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "hyfi_load_params: graph or path is NULL");
    if (!g->compiled)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_load_params: compile the graph first");
    unsigned char *buf = NULL;
    size_t n = 0, zeros_n = 0;
    const unsigned char **vals = calloc((size_t)g->ntensors, sizeof *vals);
    float *zeros = NULL;
    hyfi_status st = vals ? HYFI_OK
                          : hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
    if (st == HYFI_OK) st = read_whole(g, path, &buf, &n);
    if (st == HYFI_OK) st = check_file(g, path, buf, n, vals);
    if (st == HYFI_OK) { /* a loaded model starts with fresh momentum */
        for (int i = 0; i < g->ntensors; i++)
            if (g->tensors[i]->mh && g->tensors[i]->numel > zeros_n) zeros_n = g->tensors[i]->numel;
        if (zeros_n && !(zeros = calloc(zeros_n, sizeof *zeros)))
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
    }
    for (int i = 0; st == HYFI_OK && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!vals[i]) continue;
        /* every replica's copy */
        for (int k = 0; k < t->nh; k++)
            hyfi_handle_write(g, t->h[k], hyfi_trank(g, t, k), vals[i], t->numel * sizeof(float));
        for (int k = 0; t->mh && k < t->nh; k++)
            hyfi_handle_write(g, t->mh[k], hyfi_trank(g, t, k), zeros, t->numel * sizeof(float));
    }
    free(zeros);
    free(vals);
    free(buf);
    return st;
}
