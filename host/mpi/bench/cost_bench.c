/* Two costs of the interposer, each against the library in one run, rounds interleaved, medians:
 *
 *   pack LEVEL   MPI_Bcast of MPI_DOUBLE_INT (size 12, extent 16: packed into the staging buffer
 *                and unpacked after) against PMPI_Bcast of the same, at 64 KiB and 1 MiB of
 *                array; and, for scale, MPI_Bcast of the same bytes as MPI_BYTE (staged, no pack).
 *   LEVEL        single | funneled | serialized | multiple: MPI_Init_thread at that level, then
 *                8-byte MPI_Bcast (offloaded: the interposer's path, RC_LOCK taken only at
 *                multiple) against PMPI_Bcast — so the lock's cost (or its absence) shows beside
 *                the library's own cost of the level.
 *
 * Usage: mpirun -np N -x LD_PRELOAD=.../libringcast_mpi.so -x RINGCAST_MPI_NODES=2 cost_bench
 *        LEVEL [pack] [rounds]. Prints, at rank 0, one line per measurement: median microseconds
 * per call over `rounds` rounds (each the mean of a batch), slowest rank per round. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_median.h"

struct di {
    double v;
    int i;
};

enum how { MPI, PMPI, BYTES };

/* Mean microseconds of one call over `batch` calls, slowest rank. */
static double batch_us(enum how how, void *buf, int count, int batch) {
    PMPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int b = 0; b < batch; b++) {
        if (how == MPI) MPI_Bcast(buf, count, MPI_DOUBLE_INT, b % 2, MPI_COMM_WORLD);
        else if (how == PMPI) PMPI_Bcast(buf, count, MPI_DOUBLE_INT, b % 2, MPI_COMM_WORLD);
        else MPI_Bcast(buf, count * (int)sizeof(struct di), MPI_BYTE, b % 2, MPI_COMM_WORLD);
    }
    double us = (MPI_Wtime() - t) * 1e6 / batch, slowest = 0;
    PMPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* Median over `rounds` of each way, the ways interleaved round by round. */
static void compare(const char *what, int count, int batch, int rounds, int ways, int rank) {
    struct di *buf = calloc((size_t)count, sizeof *buf);
    double *t[3];
    for (int w = 0; w < ways; w++) t[w] = calloc((size_t)rounds, sizeof(double));
    for (int w = 0; w < ways; w++) batch_us((enum how)w, buf, count, 2); /* warm-up */
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < ways; w++) t[w][r] = batch_us((enum how)w, buf, count, batch);
    if (rank == 0) {
        printf("%-44s MPI_Bcast %9.1f us, PMPI_Bcast %9.1f us (ratio %.2f)", what, rc_bench_median(t[0], rounds), rc_bench_median(t[1], rounds),
               rc_bench_median(t[0], rounds) / rc_bench_median(t[1], rounds));
        if (ways == 3) printf(", the same bytes as MPI_BYTE %9.1f us", rc_bench_median(t[2], rounds));
        printf("\n");
    }
    for (int w = 0; w < ways; w++) free(t[w]);
    free(buf);
}

int main(int argc, char **argv) {
    const char *level = argc > 1 ? argv[1] : "single";
    int pack = argc > 2 && strcmp(argv[2], "pack") == 0;
    int rounds = argc > 3 ? atoi(argv[3]) : 15;
    int want = strcmp(level, "multiple") == 0     ? MPI_THREAD_MULTIPLE
               : strcmp(level, "serialized") == 0 ? MPI_THREAD_SERIALIZED
               : strcmp(level, "funneled") == 0   ? MPI_THREAD_FUNNELED
                                                  : MPI_THREAD_SINGLE;
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, want, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) printf("cost_bench: np %d, thread level %s (granted %d), %d rounds\n", size, level, provided, rounds);
    if (pack) {
        /* 64 KiB and 1 MiB of array (extent 16: 4096 and 65536 elements). */
        compare("MPI_DOUBLE_INT, 64 KiB of array (48 KiB of data)", 4096, 20, rounds, 3, rank);
        compare("MPI_DOUBLE_INT, 1 MiB of array (768 KiB of data)", 65536, 4, rounds, 3, rank);
    } else {
        /* 8 bytes: MPI_BYTE through both. */
        char b8[8] = {0};
        double *tm = calloc((size_t)rounds, sizeof(double)), *tp = calloc((size_t)rounds, sizeof(double));
        for (int r = 0; r < rounds; r++) {
            for (int w = 0; w < 2; w++) {
                PMPI_Barrier(MPI_COMM_WORLD);
                double t = MPI_Wtime();
                for (int b = 0; b < 200; b++) {
                    if (w == 0) MPI_Bcast(b8, 8, MPI_BYTE, b % 2, MPI_COMM_WORLD);
                    else PMPI_Bcast(b8, 8, MPI_BYTE, b % 2, MPI_COMM_WORLD);
                }
                double us = (MPI_Wtime() - t) * 1e6 / 200, slowest;
                PMPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                (w == 0 ? tm : tp)[r] = slowest;
            }
        }
        if (rank == 0)
            printf("8 B MPI_Bcast at %-10s MPI_Bcast %7.2f us (offloaded), PMPI_Bcast %7.2f us\n", level, rc_bench_median(tm, rounds),
                   rc_bench_median(tp, rounds));
        free(tm), free(tp);
    }
    MPI_Finalize();
    return 0;
}
