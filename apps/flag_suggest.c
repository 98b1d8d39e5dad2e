/* "did you mean" for hyfi-train's unknown flags (flag_suggest.h): each known
 * flag gets a score against the one typed, both compared as names (lower
 * case, '_' read as '-', leading dashes dropped); the lowest scores are
 * named.
 *   0  the same name (--Batch_Size, -lr);
 *   d  the optimal-string-alignment distance (Damerau-Levenshtein where no
 *      letter is edited twice: --data-paralel, --splitsize, --sede), when it
 *      is at most one plus one per five letters typed (at most 3);
 *   1  typed (3 letters or more) is the start of the flag (--num-spatial,
 *      --check: both checkpoint flags);
 *   2  typed (4 letters or more) is a part of the flag (--epochs). */
#include "flag_suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 64
#define MAX_NAMED 4
#define FAR 1000

/* name without its leading dashes, in lower case with '_' as '-' */
static size_t normalise(const char *flag, char *out)
{
    while (*flag == '-') flag++;
    size_t n = 0;
    for (; flag[n] && n < NAME_MAX_LEN; n++)
        out[n] = flag[n] == '_' ? '-' : (char)tolower((unsigned char)flag[n]);
    out[n] = 0;
    return n;
}

/* The optimal-string-alignment distance of a (na letters) and b (nb). */
static int osa_distance(const char *a, size_t na, const char *b, size_t nb)
{
    int d[NAME_MAX_LEN + 1][NAME_MAX_LEN + 1];
    for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            const int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[na][nb];
}

static int score(const char *t, size_t nt, const char *k, size_t nk)
{
    if (nt == nk && !memcmp(t, k, nt)) return 0;
    int s = FAR;
    int most = 1 + (int)nt / 5;
    if (most > 3) most = 3;
    const int d = osa_distance(t, nt, k, nk);
    if (d <= most) s = d;
    if (nt >= 3 && nt < nk && !memcmp(t, k, nt) && s > 1) s = 1;
    if (nt >= 4 && strstr(k, t) && s > 2) s = 2;
    return s;
}

void flag_suggest(const char *typed, const char *const *known, size_t n, char *out, size_t len)
{
    if (!len) return;
    out[0] = 0;
    char t[NAME_MAX_LEN + 1], k[NAME_MAX_LEN + 1];
    const size_t nt = normalise(typed, t);
    if (!nt || strlen(typed) > NAME_MAX_LEN + 2) return;
    int best = FAR;
    size_t named[MAX_NAMED], count = 0;
    for (size_t i = 0; i < n; i++) {
        const int s = score(t, nt, k, normalise(known[i], k));
        if (s > best || s == FAR) continue;
        if (s < best) best = s, count = 0;
        if (count < MAX_NAMED) named[count] = i;
        count++;
    }
    if (!count || count > MAX_NAMED) return;
    size_t used = (size_t)snprintf(out, len, " (did you mean ");
    for (size_t i = 0; i < count && used < len; i++)
        used += (size_t)snprintf(out + used, len - used, "%s%s",
                                 !i ? "" : i + 1 < count ? ", " : " or ", known[named[i]]);
    if (used < len) snprintf(out + used, len - used, "?)");
}
