/* osu_allgather- and osu_alltoall-style comparison in one run: per block size, the time of
 * MPI_Allgather (or, with "alltoall", MPI_Alltoall) — which LD_PRELOAD=libringcast_mpi.so routes
 * through ringcast when its rule says so — and of PMPI_Allgather (PMPI_Alltoall: the MPI
 * library's own) on the same ranks, interleaved round by round: warm-up, a barrier before each
 * timed call, each rank's mean, and the slowest rank's mean reported (osu's "max" column); the
 * ratio is library time / interposed time (above 1, the interposer is faster). Without the
 * preload both columns measure the library. Blocks up to 256 KiB per rank (allgather) or 64 KiB
 * per pair (alltoall: the interposer offloads one while a whole send buffer fits the engine's
 * message limit). With "evens" the calls run on the world reordered evens first (0, 2, …, 1, 3,
 * …), where a node's ranks are not consecutive. Usage:
 *   mpirun -np N [-x LD_PRELOAD=.../libringcast_mpi.so] allgather_bench [iterations] [rounds] [alltoall|allgather] [evens] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_median.h"
#include <string.h>

/* MPI_Allgather and MPI_Alltoall take the same arguments. */
typedef int (*exchange_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm);

/* The slowest rank's mean time of one call of `call` with `block` bytes per rank (or pair), in
 * microseconds, over `iters` timed calls after five warm-up ones. */
static double run(exchange_fn call, char *send, char *recv, int block, int iters, MPI_Comm comm) {
    double total = 0;
    for (int i = 0; i < iters + 5; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        call(send, block, MPI_BYTE, recv, block, MPI_BYTE, comm);
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
    int alltoall = argc > 3 && strcmp(argv[3], "alltoall") == 0;
    if (rounds < 1 || rounds > 15) rounds = 3;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm comm = MPI_COMM_WORLD;
    int evens = argc > 4 && strcmp(argv[4], "evens") == 0;
    if (evens) MPI_Comm_split(MPI_COMM_WORLD, 0, (rank % 2) * size + rank, &comm);
    exchange_fn ours = alltoall ? MPI_Alltoall : MPI_Allgather, lib = alltoall ? PMPI_Alltoall : PMPI_Allgather;
    const int max = alltoall ? 1 << 16 : 1 << 18;
    char *send = malloc((size_t)max * size), *recv = malloc((size_t)max * size);
    if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < (size_t)max * size; i++) send[i] = (char)(rank + i);
    if (rank == 0)
        printf("# %d ranks%s, median over %d interleaved rounds of the slowest rank's mean\n# %-8s %16s %16s %7s\n", size, evens ? " (evens first)" : "", rounds, "Block",
               alltoall ? "MPI_Alltoall(us)" : "MPI_Allgather(us)", alltoall ? "PMPI_Alltoall(us)" : "PMPI_Allgather(us)", "Ratio");
    for (int block = 2; block <= max; block *= 8) {
        int n = block >= 32768 ? iters / 10 + 1 : iters;
        double o[15], l[15];
        for (int r = 0; r < rounds; r++) {
            o[r] = run(ours, send, recv, block, n, comm);
            l[r] = run(lib, send, recv, block, n, comm);
        }
        double om = rc_bench_median(o, rounds), lm = rc_bench_median(l, rounds);
        if (rank == 0) printf("%-10d %16.2f %16.2f %6.2fx\n", block, om, lm, lm / om);
    }
    if (evens) MPI_Comm_free(&comm);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
