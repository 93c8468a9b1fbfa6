/* An MPI program one of whose ranks dies mid-loop (issue 13): `crash_rank HOW [ITERATIONS]`.
 * Every rank broadcasts 4 KiB from rank 0 in a loop, alternating between MPI_COMM_WORLD and a
 * dup of it, so that under the interposer the engines hold rings, bells and two group logs; at
 * iteration 50 rank 1 dies: HOW = abort (abort()), kill (SIGKILL) or exit (_exit(3) without
 * MPI_Finalize). HOW = none runs every iteration, checks the bytes and finalizes normally. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *how = argc > 1 ? argv[1] : "none";
    int iterations = argc > 2 ? atoi(argv[2]) : 200;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    static unsigned char buf[4096];
    for (int i = 0; i < iterations; i++) {
        if (i == 50 && rank == 1) {
            if (strcmp(how, "abort") == 0) abort();
            if (strcmp(how, "kill") == 0) raise(SIGKILL);
            if (strcmp(how, "exit") == 0) _exit(3);
        }
        memset(buf, rank == 0 ? (unsigned char)i : 0, sizeof buf);
        MPI_Bcast(buf, (int)sizeof buf, MPI_BYTE, 0, i % 2 ? dup : MPI_COMM_WORLD);
        if (buf[0] != (unsigned char)i || buf[sizeof buf - 1] != (unsigned char)i) {
            fprintf(stderr, "crash_rank[%d]: broadcast %d: wrong bytes\n", rank, i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Comm_free(&dup);
    if (rank == 0) printf("crash_rank: %d broadcasts, every byte checked\n", iterations);
    MPI_Finalize();
    return 0;
}
