/* Helpers shared by the data module's tests (test_data.c, test_data_images.c,
 * test_data_prefetch.c): the ok/FAIL lines, file writers, the tiny idx set,
 * and the scratch directory under $TMPDIR that every test program writes into. */
#ifndef HYFI_TESTS_DATA_TESTUTIL_H
#define HYFI_TESTS_DATA_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ERRLEN 1024

/* Prints "ok NAME" or "FAIL NAME" and counts it (tu_check). */
void check(bool ok, const char *name);

/* The message names `what` (a path or a word); prints it either way. */
void check_msg(int rc, int want_rc, const char *err, const char *what, const char *what2,
               const char *name);

/* Writes n bytes to path, gzipped when gz. Returns 0 or -1. */
int write_bytes(const char *path, const void *data, size_t n, bool gz);

/* idx3 image file bytes: header + n*rows*cols pixels; *len gets the size. */
unsigned char *idx3(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols,
                    const unsigned char *pix, size_t *len);
/* idx1 label file bytes: header + n labels; *len gets the size. */
unsigned char *idx1(uint32_t magic, uint32_t n, const unsigned char *lab, size_t *len);

/* A directory with the four idx files of a tiny set: train N images of R x C,
 * test NT images. Pixel k of image i is (i*37 + k*11) mod 256, label i mod 10. */
enum { N = 13, NT = 4, R = 3, C = 5 };

unsigned char pix_of(int i, int k);
void write_idx_set(const char *dir, bool gz);

/* "a/b", malloc'ed (exits 99 when out of memory); the caller frees it. */
char *mkpath(const char *a, const char *b);
/* root/name, created (mode 0755); the caller frees the path. */
char *subdir(const char *root, const char *name);

/* A fresh directory $TMPDIR/hyfi_test_data_XXXXXX (default /tmp) into root
 * (n bytes). Returns 0, or -1 after printing why. */
int data_test_root(char *root, size_t n);
/* Removes root and everything under it. */
void data_test_cleanup(const char *root);

#endif
