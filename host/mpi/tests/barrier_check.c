/* An unmodified MPI program for the interposer's MPI_Barrier and MPI_Ibarrier: on
 * MPI_COMM_WORLD, a duplicate and a split half, each rank in turn arrives last (after a nap)
 * and says when it arrived (PMPI_Bcast right after the barrier); no rank may have left the
 * barrier before that — a causal check on one machine's clock (every rank of these runs is on
 * this host), no timing bound. Blocking barriers, nonblocking ones completed by MPI_Wait and
 * by MPI_Test, and two in flight at once. Prints one line per rank:
 * "rank R: N barriers, none left before the last rank arrived". Exits non-zero otherwise. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int rank;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One barrier on `comm` (`how`: 0 MPI_Barrier, 1 MPI_Ibarrier + MPI_Wait, 2 MPI_Ibarrier +
 * MPI_Test, 3 two MPI_Ibarriers at once) with rank `late` of it arriving 20 ms after the others. */
static void one(MPI_Comm comm, int late, int how) {
    int me;
    MPI_Comm_rank(comm, &me);
    if (me == late) {
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    double arrived = now();
    MPI_Request r[2];
    int rc = MPI_SUCCESS, flag = 0;
    switch (how) {
    case 0:
        rc = MPI_Barrier(comm);
        break;
    case 1:
        rc = MPI_Ibarrier(comm, &r[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        break;
    case 2:
        rc = MPI_Ibarrier(comm, &r[0]);
        while (rc == MPI_SUCCESS && !flag) rc = MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
        break;
    default: {
        rc = MPI_Ibarrier(comm, &r[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Ibarrier(comm, &r[1]);
        /* (Real statuses: MPICH's MPI_STATUSES_IGNORE trips GCC's bounds warning.) */
        MPI_Status st[2];
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(2, r, st);
        break;
    }
    }
    if (rc != MPI_SUCCESS) die("a barrier failed");
    double left = now();
    if (PMPI_Bcast(&arrived, 1, MPI_DOUBLE, late, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
    if (left < arrived) {
        fprintf(stderr, "rank %d: barrier (how %d) left at %.6f, before rank %d arrived at %.6f\n", rank, how, left, late,
                arrived);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm comms[3] = {MPI_COMM_WORLD, dup, half};
    int done = 0;
    for (int c = 0; c < 3; c++) {
        int n;
        MPI_Comm_size(comms[c], &n);
        for (int how = 0; how < 4; how++) {
            one(comms[c], how % n, how);
            done += how == 3 ? 2 : 1;
        }
    }
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    printf("rank %d: %d barriers, none left before the last rank arrived\n", rank, done);
    MPI_Finalize();
    return 0;
}
