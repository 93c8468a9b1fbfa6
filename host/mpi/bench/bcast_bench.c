/* osu_bcast-style comparison in one run: per message size, the average time of MPI_Bcast (which
 * LD_PRELOAD=libringcast_mpi.so routes through ringcast when its rule says so) and of PMPI_Bcast
 * (the MPI library's own broadcast) on the same ranks, then the same for MPI_Ibcast + MPI_Wait
 * against PMPI_Ibcast + PMPI_Wait; back to back from root 0 with a barrier per iteration, and the
 * ratios (library time / interposed time: above 1, the interposer is faster). Without the
 * preload every column measures the library. Usage:
 *   mpirun -np N [-x LD_PRELOAD=.../libringcast_mpi.so] bcast_bench [iterations] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Which broadcast one timing loop runs. */
enum how { BCAST, PBCAST, IBCAST, PIBCAST };

/* One broadcast of `bytes` from root 0 the way `how` says. */
static void once(enum how how, char *buf, int bytes) {
    MPI_Request r;
    switch (how) {
    case BCAST: MPI_Bcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    case PBCAST: PMPI_Bcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    case IBCAST:
        MPI_Ibcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        break;
    case PIBCAST:
        PMPI_Ibcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &r);
        PMPI_Wait(&r, MPI_STATUS_IGNORE);
        break;
    }
}

/* Mean time of one broadcast in microseconds over every rank and `iters` iterations (five more
 * warm up first). */
static double run(enum how how, char *buf, int bytes, int iters) {
    double total = 0;
    for (int i = 0; i < iters + 5; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        once(how, buf, bytes);
        t = MPI_Wtime() - t;
        if (i >= 5) total += t;
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
    if (rank == 0)
        printf("# %-8s %14s %14s %7s %14s %14s %7s\n", "Size", "MPI_Bcast(us)", "PMPI_Bcast(us)", "Ratio", "MPI_Ibcast(us)", "PMPI_Ibcast(us)",
               "Ratio");
    for (int bytes = 2; bytes <= (1 << 20); bytes *= 4) {
        int n = bytes >= 65536 ? iters / 10 + 1 : iters;
        double ours = run(BCAST, buf, bytes, n), lib = run(PBCAST, buf, bytes, n);
        double iours = run(IBCAST, buf, bytes, n), ilib = run(PIBCAST, buf, bytes, n);
        if (rank == 0) printf("%-10d %14.2f %14.2f %6.2fx %14.2f %14.2f %6.2fx\n", bytes, ours, lib, lib / ours, iours, ilib, ilib / iours);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
