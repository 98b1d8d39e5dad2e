/* safetensors_util.h: what the safetensors codec's reader (safetensors.c)
 * and writer (safetensors_write.c) share. Internal to engine/. */
#ifndef HYFI_SAFETENSORS_UTIL_H
#define HYFI_SAFETENSORS_UTIL_H

#include "safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* Byte order: the format is little-endian and so must the host be:
 * st_tensor.data and st_entry.data are used as they are. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the safetensors codec assumes a little-endian host, as the format is");
#else
#error "the safetensors codec cannot tell the host's byte order (a little-endian host is assumed)"
#endif

#define MAX_HEADER 100000000u /* bytes of JSON, as the reference implementation's limit */
#define QLEN 112              /* a quoted name in a message, at most */

/* printf into err (errlen bytes), when err is not NULL */
void st_set_err(char *err, size_t errlen, const char *fmt, ...);
/* Length of the valid UTF-8 sequence at p (< end) that starts with a byte >=
 * 0x80, or 0 (invalid) */
int st_utf8_len(const unsigned char *p, const unsigned char *end);
/* s quoted for a message, escapes shown, cut to QLEN */
const char *st_quoted(const char *s, char out[QLEN]);
/* Elements of a shape (all dimensions >= 0), or -1 when the count or its
 * bytes (elements of `size` bytes) do not fit in a size_t */
int st_count_elements(const int64_t *shape, int ndim, size_t size, size_t *numel);
/* names sorted in place: the first one that appears twice, or NULL */
const char *st_first_duplicate(const char **names, size_t n);

#endif
