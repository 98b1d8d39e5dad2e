/* Layer balancing: the min-max partition against brute force on small chains,
 * and balance validation messages. */
#include "balance.h"
#include "testutil.h"

#include <stdio.h>
#include <string.h>

/* Brute force over all cut positions (n <= 10). */
static double brute(const double *c, int n, int stages, int start)
{
    if (stages == 1) {
        double s = 0;
        for (int i = start; i < n; i++) s += c[i];
        return s;
    }
    double best = -1, first = 0;
    for (int end = start + 1; end <= n - (stages - 1); end++) {
        first += c[end - 1];
        double rest = brute(c, n, stages - 1, end);
        double m = first > rest ? first : rest;
        if (best < 0 || m < best) best = m;
    }
    return best;
}

int main(void)
{
    uint64_t st = 3;
    int bad = 0;
    for (int trial = 0; trial < 200; trial++) {
        int n = tu_randint(&st, 1, 10), stages = tu_randint(&st, 1, n);
        double c[10];
        for (int i = 0; i < n; i++) c[i] = tu_uniform(&st, 0.1f, 10.0f);
        int counts[10];
        if (hyfi_balance_by_cost(c, n, stages, counts)) {
            bad++;
            continue;
        }
        double worst = 0, sum = 0;
        int k = 0, total = 0;
        for (int s = 0; s < stages; s++) {
            sum = 0;
            if (counts[s] < 1) bad++;
            for (int i = 0; i < counts[s]; i++) sum += c[k++];
            total += counts[s];
            if (sum > worst) worst = sum;
        }
        if (total != n || worst > brute(c, n, stages, 0) + 1e-9) bad++;
    }
    printf("%d of 200 random chains not optimally balanced\n", bad);
    tu_check(bad, "balance by cost is the optimal contiguous partition");
    int counts[3];
    tu_check(hyfi_balance_by_cost((double[]){1, 2}, 2, 3, counts) != -1, "more stages than layers");
    char err[160];
    tu_check(hyfi_balance_check((int[]){2, 2}, 2, 5, err, sizeof err) == 0 ||
                 !strstr(err, "sums to 4"), "balance that does not sum");
    printf("message: %s\n", err);
    tu_check(hyfi_balance_check((int[]){3, 0}, 2, 3, err, sizeof err) == 0, "empty stage");
    tu_check(hyfi_balance_check((int[]){2, 3}, 2, 5, err, sizeof err) != 0, "good balance");
    return tu_finish();
}
