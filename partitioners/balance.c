/* Contiguous layer balancing: exact min-max partition by dynamic programming. */
#include "balance.h"

#include <stdio.h>
#include <stdlib.h>

int hyfi_balance_by_cost(const double *cost, int n, int stages, int *counts)
{
    if (!cost || !counts || stages < 1 || stages > n) return -1;
    /* best[s][i]: minimal max-stage cost of the first i layers in s stages;
     * cut[s][i]: where the last of those s stages starts. */
    size_t cells = (size_t)(stages + 1) * (size_t)(n + 1);
    double *best = malloc(cells * sizeof *best), *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    int *cut = malloc(cells * sizeof *cut);
    if (!best || !cut || !prefix) {
        free(best);
        free(cut);
        free(prefix);
        return -1;
    }
    prefix[0] = 0;
    for (int i = 0; i < n; i++) prefix[i + 1] = prefix[i] + cost[i];
#define B(s, i) best[(size_t)(s) * (size_t)(n + 1) + (size_t)(i)]
#define C(s, i) cut[(size_t)(s) * (size_t)(n + 1) + (size_t)(i)]
    for (int i = 0; i <= n; i++) {
        B(1, i) = prefix[i];
        C(1, i) = 0;
    }
    for (int s = 2; s <= stages; s++) {
        for (int i = s; i <= n; i++) {
            double b = -1;
            int bc = s - 1;
            for (int j = s - 1; j < i; j++) { /* last stage = layers [j, i) */
                double last = prefix[i] - prefix[j];
                double m = B(s - 1, j) > last ? B(s - 1, j) : last;
                if (b < 0 || m < b) {
                    b = m;
                    bc = j;
                }
            }
            B(s, i) = b;
            C(s, i) = bc;
        }
    }
    int end = n;
    for (int s = stages; s >= 1; s--) {
        int start = (s == 1) ? 0 : C(s, end);
        counts[s - 1] = end - start;
        end = start;
    }
#undef B
#undef C
    free(best);
    free(cut);
    free(prefix);
    return 0;
}

int hyfi_balance_check(const int *counts, int stages, int n, char *err, size_t errlen)
{
    if (stages < 1) {
        snprintf(err, errlen, "%d stages: use at least 1", stages);
        return -1;
    }
    if (stages > n) {
        snprintf(err, errlen, "%d stages for %d layers: use at most %d stages", stages, n, n);
        return -1;
    }
    long sum = 0;
    for (int s = 0; s < stages; s++) {
        if (counts[s] < 1) {
            snprintf(err, errlen, "stage %d has %d layers: every stage needs at least one", s,
                     counts[s]);
            return -1;
        }
        sum += counts[s];
    }
    if (sum != n) {
        snprintf(err, errlen, "the balance sums to %ld layers but the model has %d; make the "
                              "counts add up to %d", sum, n, n);
        return -1;
    }
    return 0;
}
