/* Checkpoints (the whole training state) and exported models, as safetensors
 * files (engine/safetensors.h).
 *
 * Both are logical: each parameter and running statistic once (replica 0's,
 * which every replica equals after a step), under a name that does not depend
 * on the plan; so a file written under one plan loads under any other.
 *
 *   checkpoint: hyfi names; parameters, running statistics and, for each
 *     parameter, "<name>.momentum_buffer"; metadata "hyfi.kind" = "checkpoint",
 *     the learning rate, momentum and weight decay in force ("hyfi.lr", ...),
 *     and the application's entries as "app.<key>".
 *   model: the names the caller's rename gives (PyTorch's, for hyfi-train's
 *     models), PyTorch's shapes, and an int64 "num_batches_tracked" per batch
 *     norm; "hyfi.kind" = "model".
 *
 * Both carry "format" = "pt" (what safetensors.torch writes) and
 * "hyfi.checksum": FNV-1a 64 over the whole file (hyfi_sum's 8 lanes of words
 * where "hyfi.checksum_kind" = "fnv1a-64x8", byte by byte in files without
 * it), computed with the checksum's
 * 16 hex digits written as zeros, then written in their place; a loader finds
 * the key in the header's bytes, zeroes the digits again and compares. Files
 * from elsewhere (safetensors.torch.save_file) have no checksum and are
 * loaded after the format's own checks.
 *
 * Saving gathers the values on rank 0, which writes the file through io.c's
 * atomic write; loading reads and checks the file on every rank, the ranks
 * agree on the outcome, then each writes the tensors it owns into every
 * replica. */
#include "internal.h"
#include "safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECKSUM_KEY "hyfi.checksum"
#define CHECKSUM_PATTERN "\"" CHECKSUM_KEY "\":\""
#define MOMENTUM_SUFFIX ".momentum_buffer"
#define NBT_SUFFIX ".num_batches_tracked"
#define RM_SUFFIX ".running_mean"
#define FNV_INIT 0xCBF29CE484222325ull
/* The checksum's algorithm: hyfi_sum (init.c) where the header says so, else
 * (files of before) FNV-1a byte by byte, 10x slower. */
#define SUM_KIND_KEY "hyfi.checksum_kind"
#define SUM_KIND "fnv1a-64x8"
#define SUM_KIND_PATTERN "\"" SUM_KIND_KEY "\":\"" SUM_KIND "\""
#define NAME_LEN (HYFI_NAME_MAX + 64)

/* Where `pattern`, followed by `tail` more bytes, starts in a file's header
 * (hlen bytes of JSON after the 8-byte length), or NULL. */
static char *header_find(unsigned char *file, size_t hlen, const char *pattern, size_t tail)
{
    const char *h = (const char *)file + 8;
    const size_t pl = strlen(pattern);
    for (size_t p = 0; p + pl + tail <= hlen; p++)
        if (!memcmp(h + p, pattern, pl)) return (char *)file + 8 + p;
    return NULL;
}

/* The 16 hex digits of "hyfi.checksum" in a file's header, or NULL when it has none. */
static char *checksum_digits(unsigned char *file, size_t hlen)
{
    char *at = header_find(file, hlen, CHECKSUM_PATTERN, 16);
    return at ? at + strlen(CHECKSUM_PATTERN) : NULL;
}

/* The file's checksum, as written in its header's kind. */
static uint64_t file_sum(unsigned char *file, size_t len, size_t hlen)
{
    /* hyfi_sum where the header names it */
    if (!header_find(file, hlen, SUM_KIND_PATTERN, 0)) return hyfi_hash_bytes(FNV_INIT, file, len);
    hyfi_sum s;
    hyfi_sum_init(&s);
    hyfi_sum_add(&s, file, len);
    return hyfi_sum_end(&s);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* ------------------------------------------------------------- metadata */
static int good_key(const char *k)
{
    size_t n = k ? strlen(k) : 0;
    if (n == 0 || n > 63) return 0;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '.' || *p == '-'))
            return 0;
    return 1;
}

hyfi_status hyfi_checkpoint_meta_set(hyfi_checkpoint_meta *m, const char *key, const char *value)
{
    if (!m || !value) return hyfi_fail(HYFI_ERR_ARG, "hyfi_checkpoint_meta_set: meta or value "
                                                     "is NULL");
    if (!good_key(key))
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_checkpoint_meta_set: key \"%s\" must be 1 to 63 "
                                       "characters of A-Z a-z 0-9 _ . -", key ? key : "(null)");
    if (strlen(value) >= sizeof m->entry[0].value)
        return hyfi_fail(HYFI_ERR_ARG, "hyfi_checkpoint_meta_set: the value of \"%s\" has %zu "
                                       "bytes; at most %zu", key, strlen(value),
                         sizeof m->entry[0].value - 1);
    int i = 0;
    while (i < m->n && strcmp(m->entry[i].key, key)) i++;
    if (i == m->n) {
        if (m->n >= HYFI_CHECKPOINT_META || m->n < 0)
            return hyfi_fail(HYFI_ERR_ARG, "hyfi_checkpoint_meta_set: no room for \"%s\" (%d "
                                           "entries at most)", key, HYFI_CHECKPOINT_META);
        m->n++;
    }
    snprintf(m->entry[i].key, sizeof m->entry[i].key, "%s", key);
    snprintf(m->entry[i].value, sizeof m->entry[i].value, "%s", value);
    return HYFI_OK;
}

const char *hyfi_checkpoint_meta_get(const hyfi_checkpoint_meta *m, const char *key)
{
    for (int i = 0; m && key && i < m->n && i < HYFI_CHECKPOINT_META; i++)
        if (!strcmp(m->entry[i].key, key)) return m->entry[i].value;
    return NULL;
}

/* ------------------------------------------------------- names and shapes */
/* PyTorch's shape of a saved tensor: convolution weights (O, I, kh, kw), fully
 * connected weights (out, in), everything else 1-D. Returns the dimensions. */
static int torch_shape(const hyfi_graph *g, const hyfi_tensor *t, int64_t shape[ST_MAX_DIMS])
{
    for (int i = 0; i < g->nnodes; i++) {
        const node *nd = &g->nodes[i];
        if (nd->p[0] != t) continue;
        if (nd->op == OP_CONV2D) {
            for (int d = 0; d < 4; d++) shape[d] = t->dims[d];
            return 4;
        }
        if (nd->op == OP_FC) {
            shape[0] = t->dims[0];
            shape[1] = (int64_t)(t->numel / (size_t)t->dims[0]);
            return 2;
        }
    }
    shape[0] = (int64_t)t->numel;
    return 1;
}

/* The name of t in a file: its own (checkpoints, no rename), or rename's.
 * Returns 0, 1 (left out) or -1 (failed: message set). */
static int file_name(hyfi_graph *g, const char *who, const hyfi_export_options *opt,
                     const hyfi_tensor *t, char *out, size_t len)
{
    if (!opt || !opt->rename) {
        snprintf(out, len, "%s", t->name);
        return 0;
    }
    out[0] = 0;
    const int r = opt->rename(t->name, out, len, opt->user);
    if (r == 1) return 1;
    if (r != 0 || !out[0] || strnlen(out, len) >= len - 1) {
        hyfi_call_fail(g, HYFI_ERR_ARG, "%s: the rename function gave %s for \"%s\"; it must "
                                        "write a name (shorter than %zu bytes) and return 0, "
                                        "or return 1 to leave the tensor out", who,
                       r != 0 ? "an error" : "no name", t->name, len - 1);
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------------- saving */
typedef struct {
    unsigned char *hdr;
    size_t hlen;
    const st_entry *e;
    int n;
} st_out;

static int write_st(FILE *f, void *arg)
{
    const st_out *o = arg;
    if (fwrite(o->hdr, 1, o->hlen, f) != o->hlen) return errno ? errno : EIO;
    for (int i = 0; i < o->n; i++) {
        const size_t b = st_entry_bytes(&o->e[i]);
        if (b && fwrite(o->e[i].data, 1, b, f) != b) return errno ? errno : EIO;
    }
    return 0;
}

/* Metadata of a file being written: keys and values (values stored in
 * text[]), at most HYFI_CHECKPOINT_META + 8. */
#define META_OUT (HYFI_CHECKPOINT_META + 8)
typedef struct {
    const char *keys[META_OUT], *values[META_OUT];
    char key[META_OUT][80], value[META_OUT][256];
    int n;
} meta_out;

static void meta_add(meta_out *m, const char *prefix, const char *key, const char *value)
{
    snprintf(m->key[m->n], sizeof m->key[m->n], "%s%s", prefix, key);
    snprintf(m->value[m->n], sizeof m->value[m->n], "%s", value);
    m->keys[m->n] = m->key[m->n];
    m->values[m->n] = m->value[m->n];
    m->n++;
}

/* Rank 0: the entries, header and checksum, then the file. vals[i] and
 * mvals[i]: tensor i's values and momentum (when saved). */
static hyfi_status write_file(hyfi_graph *g, const char *who, const char *path,
                              const hyfi_export_options *opt, int checkpoint,
                              const hyfi_checkpoint_meta *meta, float *const *vals,
                              float *const *mvals)
{
    const int maxe = 3 * g->ntensors + 1;
    const int bf16 = !checkpoint && opt && opt->bf16;
    uint16_t **half = bf16 ? calloc((size_t)g->ntensors, sizeof *half) : NULL;
    st_entry *e = calloc((size_t)maxe, sizeof *e);
    char(*names)[NAME_LEN] = calloc((size_t)maxe, sizeof *names);
    int64_t *nbt = calloc((size_t)g->ntensors + 1, sizeof *nbt);
    meta_out *mo = calloc(1, sizeof *mo);
    hyfi_status st = HYFI_OK;
    unsigned char *hdr = NULL;
    size_t hlen = 0;
    int n = 0;
    if (!e || !names || !nbt || !mo || (bf16 && !half))
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    for (int i = 0; st == HYFI_OK && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        const int r = file_name(g, who, checkpoint ? NULL : opt, t, names[n], NAME_LEN);
        if (r < 0) st = HYFI_ERR_ARG;
        if (r != 0) continue;
        st_entry *x = &e[n];
        x->name = names[n];
        x->dtype = ST_F32;
        x->ndim = torch_shape(g, t, x->shape);
        x->data = vals[i];
        if (bf16) { /* the export in BF16: each value rounded to nearest even */
            if (!(half[i] = malloc(t->numel * sizeof *half[i]))) {
                st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
                break;
            }
            hyfi_bf16_narrow(half[i], vals[i], t->numel); /* internal.h */
            x->dtype = ST_BF16;
            x->data = half[i];
        }
        n++;
        if (checkpoint && t->kind == T_PARAM) {
            snprintf(names[n], NAME_LEN, "%s%s", t->name, MOMENTUM_SUFFIX);
            e[n] = *x;
            e[n].name = names[n];
            e[n].data = mvals[i];
            n++;
        }
        if (!checkpoint && ends_with(t->name, RM_SUFFIX)) {
            /* PyTorch's BatchNorm2d: <prefix>.num_batches_tracked, a 0-d int64 */
            char rn[NAME_LEN];
            snprintf(rn, sizeof rn, "%s", x->name);
            if (ends_with(rn, RM_SUFFIX)) rn[strlen(rn) - strlen(RM_SUFFIX)] = 0;
            snprintf(names[n], NAME_LEN, "%s%s", rn, NBT_SUFFIX);
            nbt[i] = opt ? opt->num_batches_tracked : 0;
            e[n] = (st_entry){.name = names[n], .dtype = ST_I64, .ndim = 0, .data = &nbt[i]};
            n++;
        }
    }
    if (st == HYFI_OK) {
        char v[64];
        meta_add(mo, "", "format", "pt");
        meta_add(mo, "", "hyfi.kind", checkpoint ? "checkpoint" : "model");
        if (checkpoint) {
            snprintf(v, sizeof v, "%.9g", (double)g->train.lr);
            meta_add(mo, "", "hyfi.lr", v);
            snprintf(v, sizeof v, "%.9g", (double)g->train.momentum);
            meta_add(mo, "", "hyfi.momentum", v);
            snprintf(v, sizeof v, "%.9g", (double)g->train.weight_decay);
            meta_add(mo, "", "hyfi.weight_decay", v);
            for (int k = 0; meta && k < meta->n && k < HYFI_CHECKPOINT_META; k++)
                meta_add(mo, "app.", meta->entry[k].key, meta->entry[k].value);
        }
        meta_add(mo, "", SUM_KIND_KEY, SUM_KIND);
        meta_add(mo, "", CHECKSUM_KEY, "0000000000000000");
        char err[512] = "";
        hdr = st_header(e, n, mo->keys, mo->values, mo->n, &hlen, err, sizeof err);
        if (!hdr) st = hyfi_call_fail(g, HYFI_ERR_ARG, "%s: %s", who, err);
    }
    char *digits = st == HYFI_OK ? checksum_digits(hdr, hlen - 8) : NULL;
    if (st == HYFI_OK && !digits)
        st = hyfi_call_fail(g, HYFI_ERR_RUNTIME, "%s: no checksum in the header", who);
    if (st == HYFI_OK) {
        hyfi_sum hs;
        hyfi_sum_init(&hs);
        hyfi_sum_add(&hs, hdr, hlen);
        for (int k = 0; k < n; k++) hyfi_sum_add(&hs, e[k].data, st_entry_bytes(&e[k]));
        const uint64_t sum = hyfi_sum_end(&hs);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, sum);
        memcpy(digits, hex, 16);
        st_out o = {.hdr = hdr, .hlen = hlen, .e = e, .n = n};
        st = hyfi_io_write_atomic(g, who, path, write_st, &o);
    }
    free(hdr);
    free(mo);
    free(nbt);
    free(names);
    free(e);
    for (int i = 0; half && i < g->ntensors; i++) free(half[i]);
    free(half);
    return st;
}

static hyfi_status save(hyfi_graph *g, const char *who, const char *path,
                        const hyfi_export_options *opt, int checkpoint,
                        const hyfi_checkpoint_meta *meta)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "%s: graph or path is NULL", who);
    if (!g->cc) return hyfi_call_fail(g, HYFI_ERR_STATE, "%s: compile the graph first", who);
    /* Every rank takes part in the gathers (the same transfers whatever
     * happens on rank 0); rank 0 writes. */
    const int root = g->ctx->rank == 0;
    float **vals = root ? calloc((size_t)g->ntensors, sizeof *vals) : NULL;
    float **mvals = root ? calloc((size_t)g->ntensors, sizeof *mvals) : NULL;
    int oom = root && (!vals || !mvals);
    for (int i = 0; i < g->ntensors && root && !oom; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        if (!(vals[i] = malloc(t->numel * sizeof(float)))) oom = 1;
        if (checkpoint && t->kind == T_PARAM && !(mvals[i] = malloc(t->numel * sizeof(float))))
            oom = 1;
    }
    hyfi_io_batch *batch = hyfi_io_batch_new();
    for (int i = 0; i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        const size_t b = t->numel * sizeof(float);
        hyfi_io_gather(g, batch, TH(t, 0), root && !oom ? vals[i] : NULL, b);
        if (checkpoint && t->kind == T_PARAM)
            hyfi_io_gather(g, batch, TK(t, HK_MOMENTUM, 0), root && !oom ? mvals[i] : NULL, b);
    }
    hyfi_io_gather_wait(g, batch);
    for (int i = 0; root && !oom && i < g->ntensors; i++) /* OIHW in the file (layout.c) */
        if ((vals[i] && hyfi_layout_convert(g->tensors[i], vals[i], 1)) ||
            (mvals[i] && hyfi_layout_convert(g->tensors[i], mvals[i], 1)))
            oom = 1;
    hyfi_status st = HYFI_OK;
    if (oom) st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    else if (root) st = write_file(g, who, path, opt, checkpoint, meta, vals, mvals);
    for (int i = 0; root && i < g->ntensors; i++) {
        if (vals) free(vals[i]);
        if (mvals) free(mvals[i]);
    }
    free(vals);
    free(mvals);
    return hyfi_io_agree(g, st, 1);
}

hyfi_status hyfi_save_checkpoint(hyfi_graph *g, const char *path, const hyfi_checkpoint_meta *meta)
{
    return save(g, "hyfi_save_checkpoint", path, NULL, 1, meta);
}

hyfi_status hyfi_save_safetensors(hyfi_graph *g, const char *path, const hyfi_export_options *opt)
{
    return save(g, "hyfi_save_safetensors", path, opt, 0, NULL);
}

/* ---------------------------------------------------------------- loading */
/* The checksum, where the file has one: 0 fine or absent (*has 0), -1 wrong
 * (message set). */
static int check_sum(hyfi_graph *g, const char *who, const char *path, unsigned char *buf,
                     size_t len, int *has)
{
    *has = 0;
    if (len < 8) return 0; /* st_parse says what is wrong */
    uint64_t hl;
    memcpy(&hl, buf, sizeof hl);
    if (hl > len - 8) return 0;
    char *digits = checksum_digits(buf, hl);
    if (!digits) return 0;
    *has = 1;
    char stored[17];
    memcpy(stored, digits, 16);
    stored[16] = 0;
    memset(digits, '0', 16);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, file_sum(buf, len, hl));
    memcpy(digits, stored, 16);
    if (strcmp(hex, stored)) {
        hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s is corrupt or truncated (its checksum does not "
                                       "match its contents); use another copy (an earlier "
                                       "checkpoint) or save it again", who, path);
        return -1;
    }
    return 0;
}

/* t's source in the file: found under name, with as many values, in
 * PyTorch's or hyfi's shape, in a dtype that converts to float. 0 or -1. */
static int check_tensor(hyfi_graph *g, const char *who, const char *path, const hyfi_tensor *t,
                        const st_tensor *x)
{
    int64_t ts[ST_MAX_DIMS];
    const int tn = torch_shape(g, t, ts);
    int same_torch = x->ndim == tn, same_hyfi = x->ndim == 4;
    for (int d = 0; d < x->ndim && d < ST_MAX_DIMS; d++) {
        if (same_torch && x->shape[d] != ts[d]) same_torch = 0;
        if (same_hyfi && x->shape[d] != t->dims[d]) same_hyfi = 0;
    }
    if (!same_torch && !same_hyfi) {
        char have[128] = "", want[128] = "";
        for (int d = 0; d < x->ndim && d < ST_MAX_DIMS; d++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%" PRId64, d ? ", " : "",
                     x->shape[d]);
        for (int d = 0; d < tn; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%" PRId64, d ? ", " : "",
                     ts[d]);
        hyfi_call_fail(g, HYFI_ERR_IO, "%s: \"%s\" is (%s) in %s but the graph's \"%s\" is (%s); "
                                       "it was saved from another model (or with other "
                                       "--num-classes / widths)", who, x->name, have, path,
                       t->name, want);
        return -1;
    }
    if (x->dtype != ST_F32 && x->dtype != ST_F64 && x->dtype != ST_F16 && x->dtype != ST_BF16) {
        hyfi_call_fail(g, HYFI_ERR_IO, "%s: \"%s\" in %s is %s; hyfi loads F32, F64, F16 or BF16",
                       who, x->name, path, st_dtype_name(x->dtype));
        return -1;
    }
    return 0;
}

static hyfi_status load(hyfi_graph *g, const char *who, const char *path,
                        const hyfi_export_options *opt, int checkpoint, hyfi_checkpoint_meta *meta)
{
    if (!g || !path) return hyfi_fail(HYFI_ERR_ARG, "%s: graph or path is NULL", who);
    if (!g->cc) return hyfi_call_fail(g, HYFI_ERR_STATE, "%s: compile the graph first", who);
    unsigned char *buf = NULL;
    size_t len = 0, maxn = 0;
    st_file f = {0};
    const st_tensor **src = calloc((size_t)g->ntensors, sizeof *src);
    const st_tensor **msrc = calloc((size_t)g->ntensors, sizeof *msrc);
    float *scratch = NULL, *flat = NULL, *zeros = NULL;
    char *used = NULL;
    float lr = 0;
    int has_sum = 0, parsed = 0;
    hyfi_status st = src && msrc ? HYFI_OK
                                 : hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    if (st == HYFI_OK) st = hyfi_io_read_whole(g, who, path, &buf, &len);
    if (st == HYFI_OK && check_sum(g, who, path, buf, len, &has_sum)) st = HYFI_ERR_IO;
    if (st == HYFI_OK) {
        char err[512] = "";
        if (st_parse(buf, len, &f, err, sizeof err))
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s is not a valid safetensors file: %s%s",
                                who, path, err,
                                has_sum ? "" : " (a truncated or damaged file, or another format)");
        else parsed = 1;
    }
    const char *kind = parsed ? st_meta(&f, "hyfi.kind") : NULL;
    if (st == HYFI_OK && checkpoint && (!kind || strcmp(kind, "checkpoint") || !has_sum))
        st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s is %s, not a hyfi checkpoint; load a model "
                                            "file with hyfi_load_safetensors (hyfi-train "
                                            "--load)", who, path,
                            kind && !strcmp(kind, "model") ? "an exported model"
                                                           : "a safetensors file");
    if (st == HYFI_OK && !(used = calloc((size_t)f.ntensors + 1, 1)))
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    /* every tensor of the graph in the file, with its momentum for checkpoints */
    for (int i = 0; st == HYFI_OK && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!hyfi_tensor_saved(t)) continue;
        char name[NAME_LEN];
        const int r = file_name(g, who, checkpoint ? NULL : opt, t, name, sizeof name);
        if (r < 0) st = HYFI_ERR_ARG;
        if (r != 0) continue;
        const st_tensor *x = st_find(&f, name);
        if (!x) x = st_find(&f, t->name);
        if (!x) {
            const int renamed = strcmp(name, t->name) != 0;
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s has no tensor \"%s\"%s%s%s; it was "
                                                "saved from another model", who, path, name,
                                renamed ? " (the graph's \"" : "", renamed ? t->name : "",
                                renamed ? "\")" : "");
            break;
        }
        if (check_tensor(g, who, path, t, x)) {
            st = HYFI_ERR_IO;
            break;
        }
        src[i] = x;
        used[x - f.tensors] = 1;
        if (t->numel > maxn) maxn = t->numel;
        if (checkpoint && t->kind == T_PARAM) {
            snprintf(name, sizeof name, "%s%s", t->name, MOMENTUM_SUFFIX);
            if (!(x = st_find(&f, name))) {
                st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s has no momentum buffer \"%s\"; it "
                                                    "is not a complete checkpoint", who, path,
                                    name);
                break;
            }
            if (check_tensor(g, who, path, t, x)) {
                st = HYFI_ERR_IO;
                break;
            }
            msrc[i] = x;
            used[x - f.tensors] = 1;
        }
    }
    /* nothing in the file that the graph lacks */
    for (int k = 0; st == HYFI_OK && k < f.ntensors; k++)
        if (!used[k] && !(!checkpoint && ends_with(f.tensors[k].name, NBT_SUFFIX)) &&
            !(!checkpoint && kind && !strcmp(kind, "checkpoint") &&
              ends_with(f.tensors[k].name, MOMENTUM_SUFFIX)))
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s has tensor \"%s\", which this graph does "
                                                "not have; it was saved from another model",
                                who, path, f.tensors[k].name);
    if (st == HYFI_OK && checkpoint) {
        const char *v = st_meta(&f, "hyfi.lr");
        char *end = NULL;
        lr = v ? strtof(v, &end) : 0;
        if (!v || end == v || *end || !(lr > 0))
            st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s has no valid learning rate (hyfi.lr: "
                                                "%s)", who, path, v ? v : "missing");
    }
    if (st == HYFI_OK && meta) {
        memset(meta, 0, sizeof *meta);
        for (int k = 0; k < f.nmeta && st == HYFI_OK; k++)
            if (!strncmp(f.meta_keys[k], "app.", 4) &&
                hyfi_checkpoint_meta_set(meta, f.meta_keys[k] + 4, f.meta_values[k]) != HYFI_OK)
                st = hyfi_call_fail(g, HYFI_ERR_IO, "%s: %s: metadata \"%s\": %s", who, path,
                                    f.meta_keys[k], hyfi_last_error());
    }
    if (st == HYFI_OK && maxn &&
        (!(scratch = malloc(maxn * sizeof *scratch)) || !(flat = malloc(maxn * sizeof *flat)) ||
         !(zeros = calloc(maxn, sizeof *zeros))))
        st = hyfi_call_fail(g, HYFI_ERR_NOMEM, "%s: out of memory", who);
    /* every rank applies, or none */
    st = hyfi_io_agree(g, st, 0);
    for (int i = 0; st == HYFI_OK && i < g->ntensors; i++) {
        hyfi_tensor *t = g->tensors[i];
        if (!src[i]) continue;
        const size_t b = t->numel * sizeof(float);
        /* OIHW in the file, maybe blocked here (layout.c) */
        st_to_f32(src[i], flat);
        hyfi_layout_copy(t, scratch, flat, 0);
        for (int k = 0; k < t->nh; k++)
            hyfi_handle_write(g, TH(t, k), hyfi_trank(g, t, k), scratch, b);
        if (!hyfi_tensor_has_momentum(t)) continue;
        if (msrc[i]) {
            st_to_f32(msrc[i], flat);
            hyfi_layout_copy(t, scratch, flat, 0);
        }
        for (int k = 0; k < t->nh; k++)
            hyfi_handle_write(g, TK(t, HK_MOMENTUM, k), hyfi_trank(g, t, k),
                              msrc[i] ? scratch : zeros, b);
    }
    if (st == HYFI_OK && checkpoint) st = hyfi_set_lr(g, lr);
    if (parsed) st_free(&f);
    free(used);
    free(zeros);
    free(scratch);
    free(flat);
    free(msrc);
    free(src);
    free(buf);
    return st;
}

hyfi_status hyfi_load_checkpoint(hyfi_graph *g, const char *path, hyfi_checkpoint_meta *meta)
{
    return load(g, "hyfi_load_checkpoint", path, NULL, 1, meta);
}

hyfi_status hyfi_load_safetensors(hyfi_graph *g, const char *path, const hyfi_export_options *opt)
{
    return load(g, "hyfi_load_safetensors", path, opt, 0, NULL);
}

hyfi_status hyfi_checkpoint_peek(const char *path, hyfi_checkpoint_meta *meta,
                                 hyfi_train_config *tc)
{
    static const char who[] = "hyfi_checkpoint_peek";
    if (!path) return hyfi_fail(HYFI_ERR_ARG, "%s: path is NULL", who);
    unsigned char *buf = NULL;
    size_t len = 0;
    int has_sum = 0, parsed = 0;
    st_file f = {0};
    hyfi_status st = hyfi_io_read_whole(NULL, who, path, &buf, &len);
    if (st == HYFI_OK && check_sum(NULL, who, path, buf, len, &has_sum)) st = HYFI_ERR_IO;
    if (st == HYFI_OK) {
        char err[512] = "";
        if (st_parse(buf, len, &f, err, sizeof err))
            st = hyfi_fail(HYFI_ERR_IO, "%s: %s is not a valid safetensors file: %s%s", who,
                           path, err,
                           has_sum ? "" : " (a truncated or damaged file, or another format)");
        else parsed = 1;
    }
    const char *kind = parsed ? st_meta(&f, "hyfi.kind") : NULL;
    if (st == HYFI_OK && (!kind || strcmp(kind, "checkpoint") || !has_sum))
        st = hyfi_fail(HYFI_ERR_IO, "%s: %s is %s, not a hyfi checkpoint", who, path,
                       kind && !strcmp(kind, "model") ? "an exported model" : "a safetensors file");
    /* the training settings in force */
    static const char *const keys[3] = {"hyfi.lr", "hyfi.momentum", "hyfi.weight_decay"};
    float v[3] = {0, 0, 0};
    for (int k = 0; st == HYFI_OK && k < 3; k++) {
        const char *t = st_meta(&f, keys[k]);
        char *end = NULL;
        v[k] = t ? strtof(t, &end) : 0;
        if (!t || end == t || *end || !(k == 0 ? v[k] > 0 : v[k] >= 0))
            st = hyfi_fail(HYFI_ERR_IO, "%s: %s has no valid %s (%s)", who, path, keys[k],
                           t ? t : "missing");
    }
    if (st == HYFI_OK && meta) {
        memset(meta, 0, sizeof *meta);
        for (int k = 0; k < f.nmeta && st == HYFI_OK; k++)
            if (!strncmp(f.meta_keys[k], "app.", 4) &&
                hyfi_checkpoint_meta_set(meta, f.meta_keys[k] + 4, f.meta_values[k]) != HYFI_OK)
                st = hyfi_fail(HYFI_ERR_IO, "%s: %s: metadata \"%s\": %s", who, path,
                               f.meta_keys[k], hyfi_last_error());
    }
    if (st == HYFI_OK && tc) {
        tc->lr = v[0];
        tc->momentum = v[1];
        tc->weight_decay = v[2];
    }
    if (parsed) st_free(&f);
    free(buf);
    return st;
}
