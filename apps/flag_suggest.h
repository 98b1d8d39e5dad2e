/* "did you mean": the known flags closest to one that is not known
 * (apps/flag_suggest.c), for hyfi-train's "unknown flag" message. */
#ifndef HYFI_APPS_FLAG_SUGGEST_H
#define HYFI_APPS_FLAG_SUGGEST_H

#include <stddef.h>

/* Write " (did you mean --a?)" or " (did you mean --a or --b?)" into out (len
 * bytes) when flags among known[0..n-1] are close to typed, else "". Close:
 * the same name but for case, '_' for '-' or the number of leading dashes;
 * within a few edits (insertions, deletions, substitutions, swaps of two
 * neighbours: one, plus one per five letters typed, at most 3); or typed (3
 * letters or more) the start of a flag, or (4 or more) a part of one. The
 * closest are named, at most 4 (when more are as close: none, such a choice
 * would not help). */
void flag_suggest(const char *typed, const char *const *known, size_t n, char *out, size_t len);

#endif
