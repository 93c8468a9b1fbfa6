/* One allgather size in a loop, a PMPI_Barrier before each call: rank 0's mean time in
 * MPI_Allgather (which LD_PRELOAD=libringcast_mpi.so may route through ringcast) and the loop's
 * mean time per call — the barrier waits for the slowest rank, so the loop is its time. For
 * A/B runs of one setting against another (docs/performance.md, "Leader-based against per-rank
 * allgather"). Usage:
 *   mpirun -np N [-x LD_PRELOAD=...] allgather_loop BLOCK_BYTES CALLS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int block = argc > 1 ? atoi(argv[1]) : 8192, calls = argc > 2 ? atoi(argv[2]) : 300;
    if (block < 1 || calls < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    char *send = malloc((size_t)block), *recv = malloc((size_t)block * (size_t)size);
    if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < block; i++) send[i] = (char)(rank + i);
    for (int i = 0; i < 10; i++) MPI_Allgather(send, block, MPI_BYTE, recv, block, MPI_BYTE, MPI_COMM_WORLD);
    PMPI_Barrier(MPI_COMM_WORLD);
    double in_call = 0, start = MPI_Wtime();
    for (int i = 0; i < calls; i++) {
        PMPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allgather(send, block, MPI_BYTE, recv, block, MPI_BYTE, MPI_COMM_WORLD);
        in_call += MPI_Wtime() - t;
    }
    double loop = MPI_Wtime() - start;
    if (rank == 0) printf("%d B: %.1f us per call, %.1f us loop\n", block, in_call / calls * 1e6, loop / calls * 1e6);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
