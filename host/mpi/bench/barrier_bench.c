/* osu_barrier-style comparison in one run: the time of MPI_Barrier (which
 * LD_PRELOAD=libringcast_mpi.so routes through ringcast when its rule says so) and of
 * PMPI_Barrier (the MPI library's own) on the same ranks, interleaved round by round: warm-up,
 * each rank's mean over back-to-back barriers, and the slowest rank's mean reported (osu's "max"
 * column); the ratio is library time / interposed time (above 1, the interposer is faster).
 * On MPI_COMM_WORLD and on a duplicate. Without the preload both columns measure the library.
 * Usage:
 *   mpirun -np N [-x LD_PRELOAD=.../libringcast_mpi.so] barrier_bench [iterations] [rounds] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_median.h"

/* The slowest rank's mean time of one barrier on `comm`, in microseconds, over `iters` timed
 * calls after ten warm-up ones. */
static double run(int library, MPI_Comm comm, int iters) {
    for (int i = 0; i < 10; i++) library ? PMPI_Barrier(comm) : MPI_Barrier(comm);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++) library ? PMPI_Barrier(comm) : MPI_Barrier(comm);
    double mean = (MPI_Wtime() - t) / iters * 1e6, slowest = 0;
    PMPI_Reduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    return slowest;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 1000, rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rounds < 1 || rounds > 15) rounds = 5;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (rank == 0)
        printf("# %d ranks, median over %d interleaved rounds of the slowest rank's mean of %d barriers\n# %-8s %16s %16s %7s\n", size,
               rounds, iters, "Comm", "MPI_Barrier(us)", "PMPI_Barrier(us)", "Ratio");
    MPI_Comm comms[2] = {MPI_COMM_WORLD, dup};
    const char *names[2] = {"world", "dup"};
    for (int c = 0; c < 2; c++) {
        double ours[15], lib[15];
        for (int r = 0; r < rounds; r++) {
            ours[r] = run(0, comms[c], iters);
            lib[r] = run(1, comms[c], iters);
        }
        double o = rc_bench_median(ours, rounds), l = rc_bench_median(lib, rounds);
        if (rank == 0) printf("%-10s %16.2f %16.2f %6.2fx\n", names[c], o, l, l / o);
    }
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return 0;
}
