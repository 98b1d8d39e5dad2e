/* Helpers shared by the data module's tests; see data_testutil.h. */
#ifndef _GNU_SOURCE
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */
#endif
#include "data_testutil.h"

#include "data.h"
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

void check(bool ok, const char *name)
{
    printf("%-4s %s\n", ok ? "ok" : "FAIL", name);
    tu_check(!ok, name);
}

void check_msg(int rc, int want_rc, const char *err, const char *what, const char *what2,
               const char *name)
{
    bool ok = rc == want_rc && strstr(err, what) && (!what2 || strstr(err, what2));
    printf("%-4s %s: rc %s (want %s): \"%s\"\n", ok ? "ok" : "FAIL", name,
           hyfi_data_status_name(rc), hyfi_data_status_name(want_rc), err);
    tu_check(!ok, name);
}

int write_bytes(const char *path, const void *data, size_t n, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f) return -1;
        int w = n ? gzwrite(f, data, (unsigned)n) : 0;
        return (gzclose(f) == Z_OK && (size_t)w == n) ? 0 : -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

unsigned char *idx3(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                    const unsigned char *pix, size_t *len)
{
    *len = 16 + (size_t)n * rows * cols;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    put_be32(b + 8, rows);
    put_be32(b + 12, cols);
    memcpy(b + 16, pix, (size_t)n * rows * cols);
    return b;
}

unsigned char *idx1(uint32_t magic, uint32_t n, const unsigned char *lab, size_t *len)
{
    *len = 8 + (size_t)n;
    unsigned char *b = malloc(*len);
    put_be32(b, magic);
    put_be32(b + 4, n);
    memcpy(b + 8, lab, n);
    return b;
}

unsigned char pix_of(int i, int k) { return (unsigned char)((i * 37 + k * 11) % 256); }

void write_idx_set(const char *dir, bool gz)
{
    unsigned char pix[N * R * C], lab[N];
    for (int i = 0; i < N; i++) {
        lab[i] = (unsigned char)(i % 10);
        for (int k = 0; k < R * C; k++) pix[i * R * C + k] = pix_of(i, k);
    }
    const char *ext = gz ? ".gz" : "";
    char p[512];
    size_t len;
    unsigned char *b;
    b = idx3(0x803, N, R, C, pix, &len);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx1(0x801, N, lab, &len);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx3(0x803, NT, R, C, pix, &len);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
    b = idx1(0x801, NT, lab, &len);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte%s", dir, ext);
    write_bytes(p, b, len, gz);
    free(b);
}

char *mkpath(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "test: out of memory\n");
        exit(99);
    }
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

char *subdir(const char *root, const char *name)
{
    char *p = mkpath(root, name);
    mkdir(p, 0755);
    return p;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int data_test_root(char *root, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, n, "%s/hyfi_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

void data_test_cleanup(const char *root) { nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }
