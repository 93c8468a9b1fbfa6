/* What the interleaved MPI benchmarks of this folder share: the median of their rounds (each
 * round's figure is the slowest rank's mean; the median keeps one noisy round from moving it). */
#ifndef RC_BENCH_MEDIAN_H
#define RC_BENCH_MEDIAN_H
#include <stdlib.h>

static int rc_bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of `v[0..n)` (sorted in place). */
static double rc_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], rc_bench_cmp);
    return v[n / 2];
}
#endif
