/* hyfi data module: image-folder data sets (torchvision's ImageFolder):
 * directory listing, the train/val (or test) layout, class folders and their
 * images, and the loader, which reads each file's header only (data_image.c
 * decodes the pixels per batch). */
#ifndef _GNU_SOURCE
#define _POSIX_C_SOURCE 200809L /* stat, opendir, strcasecmp */
#endif
#include "data_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define FOLDER_MAX_DEPTH 16                     /* nested subfolders of a class folder */

static const char FOLDER_HINT[] =
    "pass --datapath DIR, a directory with one subfolder of .png/.jpg/.jpeg images per class "
    "(DIR/CLASS/IMAGE.png), optionally split into DIR/train/CLASS and DIR/val/CLASS";

/* ------------------------------------------------------------------ folder */
/* A growable list of malloc'd strings. */
typedef struct strlist {
    char **v;
    size_t n, cap;
} strlist;

static void sl_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* Append a copy of a, or of "a/b" when b is not NULL. */
static int sl_push(strlist *l, const char *a, const char *b)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v) return HYFI_DATA_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    size_t n = strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
    char *p = malloc(n);
    if (!p) return HYFI_DATA_ERR_NOMEM;
    if (b)
        snprintf(p, n, "%s/%s", a, b);
    else
        memcpy(p, a, n);
    l->v[l->n++] = p;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

enum { PATH_NONE = 0, PATH_DIR, PATH_FILE, PATH_OTHER };

/* What path is, following symbolic links. */
static int path_kind(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return PATH_NONE;
    return S_ISDIR(st.st_mode) ? PATH_DIR : S_ISREG(st.st_mode) ? PATH_FILE : PATH_OTHER;
}

static int path_kind2(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) return PATH_NONE;
    snprintf(p, n, "%s/%s", dir, name);
    int k = path_kind(p);
    free(p);
    return k;
}

/* The names in dir that do not start with '.', sorted bytewise; with
 * `kind` != PATH_NONE only the entries of that kind. */
static int list_dir(const char *dir, int kind, strlist *names, char *err, size_t errlen)
{
    memset(names, 0, sizeof *names);
    DIR *d = opendir(dir);
    if (!d)
        return hd_fail(err, errlen, errno == ENOENT ? HYFI_DATA_ERR_NOTFOUND : HYFI_DATA_ERR_IO,
                       "folder: %s: cannot open the directory: %s; check the path and permissions",
                       dir, strerror(errno));
    int rc = 0;
    for (;;) {
        errno = 0; /* readdir's only way to tell an error from the end */
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno)
                rc = hd_fail(err, errlen, HYFI_DATA_ERR_IO,
                             "folder: %s: cannot read the directory: %s", dir, strerror(errno));
            break;
        }
        if (e->d_name[0] == '.') continue;
        if (kind != PATH_NONE && path_kind2(dir, e->d_name) != kind) continue;
        if (sl_push(names, e->d_name, NULL)) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", dir);
            break;
        }
    }
    closedir(d);
    if (rc) {
        sl_free(names);
        return rc;
    }
    if (names->n) qsort(names->v, names->n, sizeof *names->v, cmp_str);
    return 0;
}

/* The file names a data set of `kind` takes: folder PNG/JPEG, slides PNG,
 * TIFF and the whole-slide formats of OpenSlide (data_slides.c). */
static bool has_image_ext(const char *name, hyfi_data_kind kind)
{
    const char *dot = strrchr(name, '.');
    if (kind == HYFI_DATA_SLIDES) return dot && hd_slides_ext(dot + 1);
    return dot && (strcasecmp(dot + 1, "png") == 0 || strcasecmp(dot + 1, "jpg") == 0 ||
                   strcasecmp(dot + 1, "jpeg") == 0);
}

/* Append the image files under dir to files: its own in name order, then
 * those of its subfolders in name order, recursively. */
static int collect_images(const char *dir, int depth, hyfi_data_kind dkind, strlist *files,
                          char *err, size_t errlen)
{
    strlist names, subdirs = {0};
    int rc = list_dir(dir, PATH_NONE, &names, err, errlen);
    for (size_t k = 0; rc == 0 && k < names.n; k++) {
        int kind = path_kind2(dir, names.v[k]);
        if (kind == PATH_FILE && has_image_ext(names.v[k], dkind))
            rc = sl_push(files, dir, names.v[k]);
        else if (kind == PATH_DIR)
            rc = sl_push(&subdirs, dir, names.v[k]);
        if (rc) rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", dir);
    }
    if (rc == 0 && subdirs.n && depth >= FOLDER_MAX_DEPTH)
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "folder: %s: subfolders nested more than %d deep (a symbolic link loop?); "
                     "flatten the class folder",
                     dir, FOLDER_MAX_DEPTH);
    for (size_t k = 0; rc == 0 && k < subdirs.n; k++)
        rc = collect_images(subdirs.v[k], depth + 1, dkind, files, err, errlen);
    sl_free(&names);
    sl_free(&subdirs);
    return rc;
}

/* dir/train + dir/val (else dir/test) when both are directories, else dir and
 * no test split. *train and *test (or NULL) are malloc'd; dir loses trailing
 * slashes. */
int hd_folder_layout(const char *dir, char **train, char **test)
{
    *train = *test = NULL;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *base = malloc(n + 1);
    strlist cand = {0};
    if (!base) return HYFI_DATA_ERR_NOMEM;
    memcpy(base, dir, n);
    base[n] = '\0';
    if (sl_push(&cand, base, "train") || sl_push(&cand, base, "val") ||
        sl_push(&cand, base, "test")) {
        sl_free(&cand);
        free(base);
        return HYFI_DATA_ERR_NOMEM;
    }
    if (path_kind(cand.v[0]) == PATH_DIR) {
        int t = path_kind(cand.v[1]) == PATH_DIR ? 1 : path_kind(cand.v[2]) == PATH_DIR ? 2 : 0;
        if (t) {
            *train = cand.v[0];
            *test = cand.v[t];
            cand.v[0] = cand.v[t] = NULL;
            free(base);
            base = NULL;
        }
    }
    if (base) *train = base;
    sl_free(&cand);
    return 0;
}

int hyfi_dataset_load_folder(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                             char *err, size_t errlen)
{
    return hd_load_folder_kind(dir, split, HYFI_DATA_FOLDER, out, err, errlen);
}

/* A folder (kind_ HYFI_DATA_FOLDER) or slides (HYFI_DATA_SLIDES) data set: the
 * same layout; slides take other files and read their headers with the
 * region readers (hd_slides_header). */
int hd_load_folder_kind(const char *dir, hyfi_data_split split, hyfi_data_kind kind_,
                        hyfi_dataset **out, char *err, size_t errlen)
{
    if (!out) return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: out is NULL");
    *out = NULL;
    if (!dir || !*dir)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: no directory given; %s",
                       FOLDER_HINT);
    int kind = path_kind(dir);
    if (kind == PATH_NONE)
        return hd_fail(err, errlen, HYFI_DATA_ERR_NOTFOUND, "folder: %s: not found (%s); %s", dir,
                       strerror(errno), FOLDER_HINT);
    if (kind != PATH_DIR)
        return hd_fail(err, errlen, HYFI_DATA_ERR_ARG, "folder: %s: not a directory; %s", dir,
                       FOLDER_HINT);
    char *train_dir = NULL, *test_dir = NULL;
    strlist classes = {0}, sub = {0}, files = {0};
    int32_t *lab = NULL;
    size_t lab_cap = 0;
    hyfi_dataset *ds = NULL;
    hd_scratch s;
    memset(&s, 0, sizeof s);
    int rc = hd_folder_layout(dir, &train_dir, &test_dir);
    if (rc) {
        rc = hd_fail(err, errlen, rc, "folder: %s: out of memory", dir);
        goto done;
    }
    if (split == HYFI_SPLIT_TEST && !test_dir) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOTFOUND,
                     "folder: %s has no train/ and val/ (or test/) subfolders, so it has no test "
                     "split; add them (each with one subfolder per class) or train without one",
                     train_dir);
        goto done;
    }
    /* Classes: the subfolders of the train split, sorted bytewise. */
    if ((rc = list_dir(train_dir, PATH_DIR, &classes, err, errlen))) goto done;
    if (classes.n == 0) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                     "folder: %s: no class subfolders; put the images of each class in a subfolder "
                     "(%s/CLASS/IMAGE.png); %s",
                     train_dir, train_dir, FOLDER_HINT);
        goto done;
    }
    /* A folder of data sets (DIR/A/train/CLASS, DIR/B/train/CLASS, as
     * scripts/make_slides.py writes one per format) would train on the data
     * sets as classes, train and test splits mixed: refused. */
    for (size_t k = 0; k < classes.n; k++) {
        const size_t n = strlen(train_dir) + strlen(classes.v[k]) + 2;
        char *cdir = malloc(n), *ct = NULL, *cv = NULL;
        if (!cdir) continue;
        snprintf(cdir, n, "%s/%s", train_dir, classes.v[k]);
        const int lr = hd_folder_layout(cdir, &ct, &cv);
        const bool nested = lr == 0 && cv != NULL;
        free(ct);
        free(cv);
        if (nested) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                         "%s: %s holds train/ and %s/ folders: it is a data set of its own, not "
                         "a class, and %s would train on its subfolders (%s%s) as classes with "
                         "train and test images mixed; give --datapath %s (a folder whose "
                         "subfolders are classes, or train/ and val/)",
                         hyfi_data_kind_name(kind_), cdir, path_kind2(cdir, "val") == PATH_DIR
                                                               ? "val" : "test",
                         train_dir, classes.v[0], classes.n > 1 ? ", ..." : "", cdir);
            free(cdir);
            goto done;
        }
        free(cdir);
    }
    if (classes.n > (size_t)INT32_MAX) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "folder: %s: too many classes", train_dir);
        goto done;
    }
    const char *split_dir = split == HYFI_SPLIT_TRAIN ? train_dir : test_dir;
    const strlist *cls = &classes;
    if (split == HYFI_SPLIT_TEST) {
        if ((rc = list_dir(test_dir, PATH_DIR, &sub, err, errlen))) goto done;
        if (sub.n == 0) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                         "folder: %s: no class subfolders; put the test images of each class in a "
                         "subfolder named like the class folder in %s",
                         test_dir, train_dir);
            goto done;
        }
        cls = &sub;
    }
    /* Files of each class folder of the split, and their labels. */
    for (size_t k = 0; k < cls->n; k++) {
        const char *name = cls->v[k];
        char **hit = bsearch(&name, classes.v, classes.n, sizeof *classes.v, cmp_str);
        if (!hit) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                         "folder: %s/%s: class '%s' of the test split is not a class of %s; rename "
                         "or remove the folder, or add the class to the train split",
                         split_dir, name, name, train_dir);
            goto done;
        }
        const int32_t label = (int32_t)(hit - classes.v);
        const size_t before = files.n;
        size_t n = strlen(split_dir) + strlen(name) + 2;
        char *cdir = malloc(n);
        if (!cdir) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory", split_dir);
            goto done;
        }
        snprintf(cdir, n, "%s/%s", split_dir, name);
        rc = collect_images(cdir, 0, kind_, &files, err, errlen);
        if (rc == 0 && files.n == before)
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT,
                         "%s: %s: empty class folder: no %s in it or its subfolders; add images "
                         "or remove the folder", hyfi_data_kind_name(kind_), cdir,
                         kind_ == HYFI_DATA_SLIDES ? HD_SLIDES_EXTS : ".png, .jpg or .jpeg images");
        free(cdir);
        if (rc) goto done;
        if (files.n > lab_cap) {
            size_t cap = files.cap;
            int32_t *l = realloc(lab, cap * sizeof *l);
            if (!l) {
                rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory",
                             split_dir);
                goto done;
            }
            lab = l;
            lab_cap = cap;
        }
        for (size_t i = before; i < files.n; i++) lab[i] = label;
    }
    /* Headers: every file must be a readable PNG/JPEG of a sane size; the
     * split has 3 channels if any image has, and the first image's size. */
    int c = 1, h = 0, w = 0;
    size_t pool = 0;
    for (size_t i = 0; i < files.n; i++) {
        hd_img_info ii;
        if (kind_ == HYFI_DATA_SLIDES) rc = hd_slides_header(files.v[i], &ii, err, errlen);
        else rc = hd_image_read(files.v[i], true, &ii, &s, err, errlen);
        if (rc) goto done;
        if (kind_ == HYFI_DATA_SLIDES && i > 0 && (ii.h != h || ii.w != w)) {
            rc = hd_fail(err, errlen, HYFI_DATA_ERR_FORMAT, "slides: %s is %dx%d but %s is "
                         "%dx%d; slides are read region by region and not resized, so every "
                         "image of a split must have the same size (scripts/make_slides.py "
                         "--size N makes them so)", files.v[i], ii.w, ii.h, files.v[0], w, h);
            goto done;
        }
        if (ii.c > c) c = ii.c;
        if (i == 0) {
            h = ii.h;
            w = ii.w;
        }
        pool += strlen(files.v[i]) + 1;
    }
    /* ImageNet constants; their BT.601 luminance-weighted values for grey. */
    float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    if (c == 1) {
        mean[0] = hd_luma[0] * mean[0] + hd_luma[1] * mean[1] + hd_luma[2] * mean[2];
        std[0] = hd_luma[0] * std[0] + hd_luma[1] * std[1] + hd_luma[2] * std[2];
    }
    if ((rc = hd_dataset_new(kind_, split, files.n, c, h, w, (int)classes.n, mean,
                             std, &ds, err, errlen)))
        goto done;
    ds->paths = malloc(pool);
    ds->path_off = malloc(files.n * sizeof *ds->path_off);
    if (!ds->paths || !ds->path_off) {
        rc = hd_fail(err, errlen, HYFI_DATA_ERR_NOMEM, "folder: %s: out of memory for %zu paths",
                     split_dir, files.n);
        goto done;
    }
    size_t off = 0;
    for (size_t i = 0; i < files.n; i++) {
        size_t n = strlen(files.v[i]) + 1;
        memcpy(ds->paths + off, files.v[i], n);
        ds->path_off[i] = off;
        ds->labels[i] = lab[i];
        off += n;
    }
    *out = ds;
    ds = NULL;
    rc = 0;
done:
    hyfi_dataset_free(ds);
    hd_scratch_free(&s);
    sl_free(&classes);
    sl_free(&sub);
    sl_free(&files);
    free(lab);
    free(train_dir);
    free(test_dir);
    return rc;
}

/* A folder of slides (data_slides.c reads them region by region). */
int hyfi_dataset_load_slides(const char *dir, hyfi_data_split split, hyfi_dataset **out,
                             char *err, size_t errlen)
{
    return hd_load_folder_kind(dir, split, HYFI_DATA_SLIDES, out, err, errlen);
}
