/* osu_bcast-style comparison in one run: per message size, the average time of MPI_Bcast (which
 * LD_PRELOAD=libringcast_mpi.so routes through ringcast) and of PMPI_Bcast (the MPI library's
 * own broadcast) on the same ranks, back to back from root 0 with a barrier per iteration, and
 * the ratio. Without the preload both columns measure the library. Usage:
 *   mpirun -np N [-x LD_PRELOAD=.../libringcast_mpi.so] bcast_bench [iterations] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double run(int (*bcast)(void *, int, MPI_Datatype, int, MPI_Comm), char *buf, int bytes, int iters) {
    double total = 0;
    for (int i = 0; i < iters + 5; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        bcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        if (i >= 5) total += t; /* the first five warm up */
    }
    double sum = 0;
    MPI_Reduce(&total, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    return sum / size / iters * 1e6;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, iters = argc > 1 ? atoi(argv[1]) : 200;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = malloc(1 << 20);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0) printf("# %-8s %16s %16s %8s\n", "Size", "MPI_Bcast(us)", "PMPI_Bcast(us)", "Ratio");
    for (int bytes = 2; bytes <= (1 << 20); bytes *= 4) {
        int n = bytes >= 65536 ? iters / 10 + 1 : iters;
        double ours = run(MPI_Bcast, buf, bytes, n), lib = run(PMPI_Bcast, buf, bytes, n);
        if (rank == 0) printf("%-10d %16.2f %16.2f %7.2fx\n", bytes, ours, lib, lib / ours);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
