/* Saving and loading parameters and state.
 *
 * File format (little-endian, as written by this machine):
 *   "HYFIPRM1"                      8-byte magic
 *   uint32 count                    number of tensors
 *   count x { uint32 name_len, name bytes, int32 dims[4], float32 values[numel] }
 *   uint64 checksum                 FNV-1a over everything before it; the last bytes
 *
 * Saving is atomic and a crash leaves nothing behind:
 *   - the target: a symbolic link is followed (the file it names is replaced, the
 *     link stays); an existing target that is not a regular file (a device, a
 *     fifo, a socket, a folder) is refused;
 *   - the contents go to an unnamed file in the target's folder (O_TMPFILE),
 *     which a crash discards; once written and fsync'ed it gets a temporary name
 *     "<target>.tmp.<pid>@<host>" (linkat), is renamed over the target, and the
 *     folder is fsync'ed. Where the file system has no O_TMPFILE the named
 *     temporary is written directly;
 *   - a temporary of this host whose process no longer exists (killed between
 *     naming and renaming, or while writing where there is no O_TMPFILE) is
 *     removed by the next save of the same target.
 * Loading reads the whole file and checks the checksum before interpreting any
 * of it (a damaged file is reported as damaged, not as another model), then
 * requires the format exactly (nothing after the checksum), then the names and
 * shapes of the graph; only a file that passes everything is applied.
 *
 * In MPI runs both calls are collective and return the same status (and
 * message) on every rank: saving brings every value to rank 0, which writes
 * the file, and shares its status; loading reads the file on every rank (a
 * shared file system, or a copy per node), the ranks agree on the outcome
 * (agree.c: a failing rank keeps its error, the others get the first failing
 * rank's as "rank k: <error>", or just the error when all failed alike), and
 * only then does each rank apply the tensors it owns. The statuses travel as
 * StarPU-MPI data: the application thread makes no MPI call of its own while
 * StarPU-MPI's progression thread runs.
 */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <starpu_mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'H', 'Y', 'F', 'I', 'P', 'R', 'M', '1'};
#define FNV_INIT 0xCBF29CE484222325ull
#define FNV_PRIME 0x100000001B3ull
#define MAX_LINKS 40 /* symbolic links followed, as the kernel's MAXSYMLINKS */

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

/* The file a save replaces: `path` with its symbolic links followed (a link
 * to a missing file: that file). Sets *dir and *base (allocated) and *st /
 * *exists; refuses an existing file that is not a regular one. */
static hyfi_status resolve_target(hyfi_graph *g, const char *who, const char *path, char **dir,
                                  char **base, struct stat *st, int *exists)
{
    hyfi_status s = HYFI_OK;
    char *cur = strdup(path);
    *dir = *base = NULL;
    *exists = 0;
    for (int hops = 0; cur && s == HYFI_OK; hops++) {
        if (lstat(cur, st) != 0) {
            if (errno != ENOENT)
                s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: cannot examine %s: %s; "
                                                   "check the path", who, cur, strerror(errno));
            break; /* a new file (a missing folder is reported when creating) */
        }
        if (!S_ISLNK(st->st_mode)) {
            *exists = 1;
            break;
        }
        char link[4096];
        ssize_t n = hops < MAX_LINKS ? readlink(cur, link, sizeof link - 1) : -1;
        if (n < 0 || (size_t)n >= sizeof link - 1) {
            s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: cannot follow the symbolic "
                                               "link %s: %s", who, cur,
                               hops >= MAX_LINKS ? "too many levels of links"
                               : n < 0           ? strerror(errno)
                                                 : "its target is too long");
            break;
        }
        link[n] = 0;
        char *next;
        const char *slash = strrchr(cur, '/');
        if (link[0] == '/' || !slash) {
            next = strdup(link);
        } else if ((next = malloc((size_t)(slash - cur) + 1 + (size_t)n + 1))) {
            /* relative to the link's folder */
            memcpy(next, cur, (size_t)(slash - cur) + 1);
            memcpy(next + (slash - cur) + 1, link, (size_t)n + 1);
        }
        free(cur);
        cur = next;
    }
    if (!cur) return hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    const char *slash = strrchr(cur, '/');
    const char *b = slash ? slash + 1 : cur;
    if (s == HYFI_OK && *exists && !S_ISREG(st->st_mode)) {
        const mode_t m = st->st_mode;
        const int via = strcmp(cur, path) != 0;
        s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s%s%s is %s, not a regular file; "
                                           "save to a file name (nothing was written)", who, path,
                           via ? " -> " : "", via ? cur : "",
                           S_ISDIR(m)                  ? "a folder"
                           : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                           : S_ISFIFO(m)              ? "a fifo"
                           : S_ISSOCK(m)              ? "a socket"
                                                      : "something else");
    } else if (s == HYFI_OK && !*b) {
        s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s names a folder; give a file "
                                           "name", who, path);
    } else if (s == HYFI_OK) {
        *base = strdup(b);
        *dir = !slash        ? strdup(".")
               : slash == cur ? strdup("/")
                              : strndup(cur, (size_t)(slash - cur));
        if (!*base || !*dir) {
            free(*base);
            free(*dir);
            *dir = *base = NULL;
            s = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
        }
    }
    free(cur);
    return s;
}

static void host_name(char *out, size_t len)
{
    if (gethostname(out, len) != 0) snprintf(out, len, "localhost");
    out[len - 1] = 0;
    for (char *p = out; *p; p++)
        if (*p == '/') *p = '_';
}

/* Remove "<base>.tmp.<pid>@<host>" in dir left by dead processes of this host. */
static void remove_stale_temporaries(const char *dir, const char *base, const char *host)
{
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t bl = strlen(base);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0) continue;
        char *at;
        errno = 0;
        long pid = strtol(n + bl + 5, &at, 10);
        if (errno || at == n + bl + 5 || pid <= 0 || *at != '@' || strcmp(at + 1, host) != 0 ||
            pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours) */
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

/* The parameter file's bytes into f (arg: the values of tensor i, vals[i]).
 * Returns 0 or an errno. */
typedef struct {
    hyfi_graph *g;
    float *const *vals;
} params_file;

static int write_params(FILE *f, void *arg)
{
    const params_file *pf = arg;
    hyfi_graph *g = pf->g;
    stream s = {.f = f, .sum = FNV_INIT};
    uint32_t count = 0;
    for (int i = 0; i < g->ntensors; i++) count += (uint32_t)hyfi_tensor_saved(g->tensors[i]);
    put(&s, MAGIC, sizeof MAGIC);
    put(&s, &count, sizeof count);
    for (int i = 0; i < g->ntensors && !s.err; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        uint32_t len = (uint32_t)strlen(t->name);
        int32_t dims[4] = {t->dims[0], t->dims[1], t->dims[2], t->dims[3]};
        put(&s, &len, sizeof len);
        put(&s, t->name, len);
        put(&s, dims, sizeof dims);
        put(&s, pf->vals[i], t->numel * sizeof(float));
    }
    uint64_t sum = s.sum;
    put(&s, &sum, sizeof sum);
    return s.err;
}

/* Give the unnamed file behind fd the name tmp. Returns 0 or an errno. */
static int name_file(int fd, const char *tmp)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    unlink(tmp); /* ours: left by an earlier process with this pid */
    if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) return 0;
    /* without /proc: needs CAP_DAC_READ_SEARCH */
    return linkat(fd, "", AT_FDCWD, tmp, AT_EMPTY_PATH) == 0 ? 0 : errno;
}

hyfi_status hyfi_io_write_atomic(hyfi_graph *g, const char *who, const char *path,
                                 hyfi_io_writer fn, void *arg)
{
    char *dir = NULL, *base = NULL, *tmp = NULL, *final = NULL, host[256];
    struct stat tst;
    int exists;
    hyfi_status st = resolve_target(g, who, path, &dir, &base, &tst, &exists);
    if (st != HYFI_OK) return st;
    host_name(host, sizeof host);
    const size_t tl = strlen(dir) + strlen(base) + strlen(host) + 48;
    tmp = malloc(tl);
    final = malloc(tl);
    if (!tmp || !final) {
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    } else {
        snprintf(tmp, tl, "%s/%s.tmp.%ld@%s", dir, base, (long)getpid(), host);
        snprintf(final, tl, "%s/%s", dir, base); /* the link's target when path is a link */
        remove_stale_temporaries(dir, base, host);
    }
    /* An unnamed file (O_TMPFILE), named once complete; where the file system
     * or the lack of /proc does not allow it, the named temporary. */
    int err = 0, created = 0;
    for (int named = 0; st == HYFI_OK && named < 2; named++) {
        if (named) unlink(tmp); /* ours: left by an earlier process with this pid */
        int fd = named ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)
                       : open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0) {
            if (!named && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) continue;
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: cannot create a file in %s "
                                                "for %s: %s; check that the folder exists and "
                                                "is writable", who, dir, path, strerror(errno));
            break;
        }
        if (exists) (void)fchmod(fd, tst.st_mode & 07777); /* the replaced file's permissions */
        FILE *f = fdopen(fd, "wb");
        if (!f) {
            err = errno;
            close(fd);
        } else {
            err = fn(f, arg);
            if (!err && fflush(f) != 0) err = errno;
            if (!err && fsync(fileno(f)) != 0) err = errno;
            int lerr = !err && !named ? name_file(fileno(f), tmp) : 0;
            if (fclose(f) != 0 && !err) err = errno;
            if (lerr && !err) continue; /* could not name it: write a named one */
        }
        created = 1;
        if (!err && rename(tmp, final) != 0) err = errno;
        break;
    }
    if (st == HYFI_OK && err) {
        if (created) unlink(tmp);
        st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: writing %s failed: %s (the "
                                            "previous file, if any, is intact)", who, path,
                            strerror(err));
    } else if (st == HYFI_OK) {
        /* the rename is durable once the folder is synced */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL))
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s is written, but syncing "
                                                "its folder %s failed: %s; it may not survive a "
                                                "crash of the machine", who, path, dir,
                                strerror(errno));
        if (dfd >= 0) close(dfd);
    }
    free(final);
    free(tmp);
    free(dir);
    free(base);
    return st;
}

struct hyfi_io_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t pending;
};

typedef struct {
    hyfi_io_batch *b;
    starpu_data_handle_t h;
    void *host;
    size_t bytes;
} gather_item;

hyfi_io_batch *hyfi_io_batch_new(void)
{
    hyfi_io_batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

/* StarPU calls it once the handle is readable here: copy, release, count down. */
static void gather_done(void *arg)
{
    gather_item *it = arg;
    memcpy(it->host, (void *)starpu_vector_get_local_ptr(it->h), it->bytes);
    starpu_data_release(it->h);
    pthread_mutex_lock(&it->b->mu);
    if (--it->b->pending == 0) pthread_cond_signal(&it->b->cv);
    pthread_mutex_unlock(&it->b->mu);
    free(it);
}

void hyfi_io_gather(hyfi_graph *g, hyfi_io_batch *b, hyfi_ref r, void *host, size_t bytes)
{
    starpu_data_handle_t h = hyfi_ref_h(g->cc, r);
    if (!h) return; /* not registered here (share.c): neither the owner nor rank 0 */
    gather_item *it = b && host && g->ctx->rank == 0 ? malloc(sizeof *it) : NULL;
    if (!it) { /* another rank's part, rank 0 out of memory, or no batch: one at a time */
        if (host || g->ctx->rank != 0) {
            hyfi_handle_read(g, r, 0, host, bytes);
        } else if (g->ctx->mpi) {
            starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, 0, NULL, NULL);
            starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
        }
        return;
    }
    if (g->ctx->mpi) starpu_mpi_get_data_on_node_detached(MPI_COMM_WORLD, h, 0, NULL, NULL);
    *it = (gather_item){.b = b, .h = h, .host = host, .bytes = bytes};
    pthread_mutex_lock(&b->mu);
    b->pending++;
    pthread_mutex_unlock(&b->mu);
    if (starpu_data_acquire_cb(h, STARPU_R, gather_done, it) != 0) {
        /* not taken: do it here (the handle is valid; this cannot happen in practice) */
        starpu_data_acquire(h, STARPU_R);
        gather_done(it);
    }
    /* As hyfi_handle_read: no received copy stays behind (its invalidation
     * comes after the read just submitted, in the handle's order). */
    if (g->ctx->mpi) starpu_mpi_cache_flush(MPI_COMM_WORLD, h);
}

void hyfi_io_gather_wait(hyfi_graph *g, hyfi_io_batch *b)
{
    if (!b) return;
    hyfi_wait_begin(g->ctx, "gathering tensors to rank 0 (saving a checkpoint or model)");
    pthread_mutex_lock(&b->mu);
    while (b->pending) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    hyfi_wait_end(g->ctx);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

hyfi_status hyfi_save_params(hyfi_graph *g, const char *path)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "hyfi_save_params: graph or path is NULL");
    if (!g->cc)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_save_params: compile the graph first");
    /* Every rank takes part (the values come from the ranks that own them);
     * rank 0 holds them and writes the file. The transfers are the same on
     * every rank whatever happens on rank 0. */
    const int root = g->ctx->rank == 0;
    float **vals = root ? calloc((size_t)g->ntensors, sizeof *vals) : NULL;
    int oom = root && !vals;
    for (int i = 0; i < g->ntensors && root && !oom; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        if (!(vals[i] = malloc(t->numel * sizeof(float)))) oom = 1;
    }
    hyfi_io_batch *batch = hyfi_io_batch_new();
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (hyfi_tensor_saved(t))
            hyfi_io_gather(g, batch, TH(t, 0), root && !oom ? vals[i] : NULL,
                           t->numel * sizeof(float));
    }
    hyfi_io_gather_wait(g, batch);
    for (int i = 0; root && !oom && i < g->ntensors; i++) /* OIHW in the file (layout.c) */
        if (vals[i] && hyfi_layout_convert(g->tensors[i], vals[i], 1)) oom = 1;
    hyfi_status st = HYFI_OK;
    if (oom) st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_save_params: out of memory");
    else if (root) {
        params_file pf = {.g = g, .vals = vals};
        st = hyfi_io_write_atomic(g, "hyfi_save_params", path, write_params, &pf);
    }
    for (int i = 0; vals && i < g->ntensors; i++) free(vals[i]);
    free(vals);
    return hyfi_io_agree(g, st, 1);
}

/* ----------------------------------------------------------------- loading */
hyfi_status hyfi_io_read_whole(hyfi_graph *g, const char *who, const char *path,
                               unsigned char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hyfi_call_fail(g, HYFI_ERR_IO, "%s: cannot open %s: %s", who, path,
                              strerror(errno));
    struct stat st;
    hyfi_status s = HYFI_OK;
    if (fstat(fd, &st) != 0) {
        s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: cannot examine %s: %s", who, path,
                           strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s is not a regular file", who, path);
    } else if (!(*buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1))) {
        s = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory for %s (%lld bytes)", who,
                           path, (long long)st.st_size);
    } else {
        size_t want = (size_t)st.st_size;
        while (*len < want) {
            ssize_t n = read(fd, *buf + *len, want - *len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                s = hyfi_call_fail(g, HYFI_ERR_IO, "%s: reading %s failed: %s", who, path,
                                   n < 0 ? strerror(errno) : "it shrank while being read");
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
    for (int i = 0; i < g->ntensors; i++) expected += (uint32_t)hyfi_tensor_saved(g->tensors[i]);
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
        if (!t || !hyfi_tensor_saved(t))
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
    if (!g->cc)
        return hyfi_call_fail(g, HYFI_ERR_STATE, "hyfi_load_params: compile the graph first");
    unsigned char *buf = NULL;
    size_t n = 0, zeros_n = 0;
    const unsigned char **vals = calloc((size_t)g->ntensors, sizeof *vals);
    float *zeros = NULL, *flat = NULL, *blocked = NULL;
    hyfi_status st = vals ? HYFI_OK
                          : hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
    if (st == HYFI_OK) st = hyfi_io_read_whole(g, "hyfi_load_params", path, &buf, &n);
    if (st == HYFI_OK) st = check_file(g, path, buf, n, vals);
    if (st == HYFI_OK) { /* a loaded model starts with fresh momentum */
        for (int i = 0; i < g->ntensors; i++)
            if (hyfi_tensor_has_momentum(g->tensors[i]) && g->tensors[i]->numel > zeros_n)
                zeros_n = g->tensors[i]->numel;
        size_t blk_n = 0; /* the largest tensor kept blocked (layout.c) */
        for (int i = 0; i < g->ntensors; i++)
            if (vals[i] && g->tensors[i]->blk && g->tensors[i]->numel > blk_n)
                blk_n = g->tensors[i]->numel;
        if ((zeros_n && !(zeros = calloc(zeros_n, sizeof *zeros))) ||
            (blk_n && (!(flat = malloc(blk_n * sizeof *flat)) ||
                       !(blocked = malloc(blk_n * sizeof *blocked)))))
            st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "hyfi_load_params: out of memory");
    }
    /* every rank applies, or none */
    st = hyfi_io_agree(g, st, 0);
    for (int i = 0; st == HYFI_OK && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!vals[i]) continue;
        const void *v = vals[i];
        if (t->blk) { /* stored blocked (layout.c); OIHW in the file */
            memcpy(flat, vals[i], t->numel * sizeof *flat);
            hyfi_layout_copy(t, blocked, flat, 0);
            v = blocked;
        }
        /* every replica's copy */
        for (int k = 0; k < t->nh; k++)
            hyfi_handle_write(g, TH(t, k), hyfi_trank(g, t, k), v, t->numel * sizeof(float));
        for (int k = 0; hyfi_tensor_has_momentum(t) && k < t->nh; k++)
            hyfi_handle_write(g, TK(t, HK_MOMENTUM, k), hyfi_trank(g, t, k), zeros,
                              t->numel * sizeof(float));
    }
    free(zeros);
    free(flat);
    free(blocked);
    free(vals);
    free(buf);
    return st;
}
