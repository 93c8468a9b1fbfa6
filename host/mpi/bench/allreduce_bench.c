/* osu_allreduce-style comparison in one run: per message size, the time of MPI_Allreduce (which
 * LD_PRELOAD=libringcast_mpi.so routes through ringcast when its rule says so) and of
 * PMPI_Allreduce (the MPI library's own; MPI_SUM of doubles) on the same ranks, interleaved round by round: warm-up,
 * a barrier before each timed call, each rank's mean, and the slowest rank's mean reported (osu's
 * "max" column); the ratio is library time / interposed time (above 1, the interposer is
 * faster). Without the preload both columns measure the library. Usage:
 *   mpirun -np N [-x LD_PRELOAD=.../libringcast_mpi.so] allreduce_bench [iterations] [rounds] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_median.h"

/* The slowest rank's mean time of one allreduce of `block` bytes (doubles), in microseconds,
 * over `iters` timed calls after five warm-up ones. */
static double run(int library, char *send, char *recv, int block, int iters) {
    int n = block / 8;
    double total = 0;
    for (int i = 0; i < iters + 5; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        if (library)
            PMPI_Allreduce(send, recv, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else
            MPI_Allreduce(send, recv, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        if (i >= 5) total += t;
    }
    double mean = total / iters * 1e6, slowest = 0;
    MPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 100, rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (rounds < 1 || rounds > 15) rounds = 3;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int max = 1 << 18;
    char *send = malloc(max), *recv = malloc((size_t)max * size);
    if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < max / 8; i++) ((double *)send)[i] = rank + i * 0.5;
    if (rank == 0)
        printf("# %d ranks, MPI_SUM of doubles, median over %d interleaved rounds of the slowest rank's mean\n# %-8s %16s %16s %7s\n", size,
               rounds, "Bytes", "MPI_Allreduce(us)", "PMPI_Allreduce(us)", "Ratio");
    for (int block = 8; block <= max; block *= 8) {
        int n = block >= 32768 ? iters / 10 + 1 : iters;
        double ours[15], lib[15];
        for (int r = 0; r < rounds; r++) {
            ours[r] = run(0, send, recv, block, n);
            lib[r] = run(1, send, recv, block, n);
        }
        double o = rc_bench_median(ours, rounds), l = rc_bench_median(lib, rounds);
        if (rank == 0) printf("%-10d %16.2f %16.2f %6.2fx\n", block, o, l, l / o);
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
