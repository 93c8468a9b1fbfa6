/* The MPI library's own MPI_Bcast measured with osu_bcast's method, the baseline of
 * `ringcast bench --compare-mpi` (host/cli/src/compare.rs), which runs it beside ringcast's
 * `bench --barrier` with the same sizes and iterations. Per size: up to 10 untimed warm-up
 * broadcasts, then `iters` of them (a tenth, at least 10, from 64 KiB: ringcast's `iters_for`),
 * each after an untimed MPI_Barrier, only the MPI_Bcast (root 0, MPI_BYTE) timed; each rank's
 * mean, then the mean, fastest and slowest over ranks. Rank 0 prints one line per size:
 *   size S avg_us A min_us B max_us C iters I
 * The last broadcast's bytes are checked at every rank. Usage:
 *   mpirun -np N mpi-osu-bcast SIZES ITERS      (SIZES: comma list of bytes, e.g. 2,8192) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

/* Timed broadcasts for `size` bytes, as ringcast's `iters_for`. */
static long iters_for(long iters, long size) {
    if (size >= 65536) return iters / 10 > 10 ? iters / 10 : 10;
    return iters > 1 ? iters : 1;
}

/* The byte a broadcast of `size` bytes carries at offset `i` (the same pattern as ringcast's). */
static unsigned char pattern(long i, long size) { return (unsigned char)(i * 31 + size); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 3) {
        if (rank == 0) fprintf(stderr, "usage: mpi-osu-bcast SIZES ITERS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long sizes[MAX_SIZES], largest = 1, iters = atol(argv[2]);
    int n = 0;
    for (char *s = argv[1], *end; *s && n < MAX_SIZES; s = *end ? end + 1 : end) {
        sizes[n] = strtol(s, &end, 10);
        if (end == s || sizes[n] < 1 || sizes[n] > (1L << 30) || (*end && *end != ',')) {
            if (rank == 0) fprintf(stderr, "mpi-osu-bcast: bad size list %s\n", argv[1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (sizes[n] > largest) largest = sizes[n];
        n++;
    }
    if (iters < 1) {
        if (rank == 0) fprintf(stderr, "mpi-osu-bcast: bad iteration count %s\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *buf = malloc(largest);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int k = 0; k < n; k++) {
        long size = sizes[k], timed = iters_for(iters, size), warm = timed < 10 ? timed : 10;
        if (rank == 0)
            for (long i = 0; i < size; i++) buf[i] = pattern(i, size);
        else
            memset(buf, 0, size);
        double total = 0;
        for (long i = 0; i < warm + timed; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
            t = MPI_Wtime() - t;
            if (i >= warm) total += t;
        }
        for (long i = 0; i < size; i++)
            if (buf[i] != pattern(i, size)) {
                fprintf(stderr, "mpi-osu-bcast: rank %d: %ld B broadcast delivered wrong bytes\n", rank, size);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        double mine = total / timed * 1e6, sum = 0, min = 0, max = 0;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("size %ld avg_us %.3f min_us %.3f max_us %.3f iters %ld\n", size, sum / ranks, min, max, timed);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
