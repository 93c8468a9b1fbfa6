/* The three defects of issue 37, each a correct MPI program the interposer once got wrong:
 *
 *   padded   MPI_Bcast of 8 MPI_DOUBLE_INT (size 12, extent 16: 128 bytes of array) and the
 *            "rank of the largest residual" idiom: MPI_Allreduce / MPI_Reduce with MPI_MAXLOC on
 *            MPI_DOUBLE_INT, the answer broadcast. Once offloaded as count x size contiguous
 *            bytes: the receivers got 2 of 8 elements wrong, with MPI_SUCCESS.
 *   inplace  MPI_Alltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, ...) and the same for
 *            MPI_Iallgather and MPI_Ialltoall (and MPI_Allgather, MPI_Allreduce, MPI_Reduce at
 *            the root): the standard ignores the send count and type with MPI_IN_PLACE; the
 *            interposer once inspected the ignored type and the job aborted (MPI_ERR_TYPE).
 *   threads  run with first argument "multiple" (else "single"): MPI_Init_thread(MPI_THREAD_MULTIPLE), as mpi4py does
 *            by default; every call above must still be offloaded (the Makefile counts the
 *            RINGCAST_MPI_VERBOSE lines). The interposer once declined every call at that level.
 *
 * Every result is compared with what the library computes itself (PMPI_*) on the same inputs,
 * the padded ones by their packed bytes (MPI_Pack: the padding of an element is no data).
 * Prints "rank R: defects checked, every result identical to the library's". Exits non-zero
 * (MPI_Abort) on any difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

struct di {
    double v;
    int i;
};

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Whether `n` elements of `type` at `a` and `b` hold the same data (their packed bytes). */
static int same_packed(const void *a, const void *b, int n, MPI_Datatype type, MPI_Comm comm) {
    int size = 0;
    MPI_Pack_size(n, type, comm, &size);
    char *pa = malloc((size_t)size + 1), *pb = malloc((size_t)size + 1);
    int qa = 0, qb = 0;
    if (!pa || !pb) die("malloc");
    MPI_Pack(a, n, type, pa, size, &qa, comm);
    MPI_Pack(b, n, type, pb, size, &qb, comm);
    int same = qa == qb && memcmp(pa, pb, (size_t)qa) == 0;
    free(pa);
    free(pb);
    return same;
}

/* MPI_Bcast of 8 MPI_DOUBLE_INT from every root, against PMPI_Bcast. */
static int padded_bcast(MPI_Comm comm) {
    int me, n, done = 0;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int root = 0; root < n; root++) {
        struct di a[8], b[8];
        memset(a, 0x5A, sizeof a); /* the padding too: it must not matter */
        memset(b, 0x5A, sizeof b);
        if (me == root)
            for (int k = 0; k < 8; k++) a[k] = b[k] = (struct di){1.5 * k + root, 100 * root + k};
        if (MPI_Bcast(a, 8, MPI_DOUBLE_INT, root, comm) != MPI_SUCCESS) die("MPI_Bcast failed");
        if (PMPI_Bcast(b, 8, MPI_DOUBLE_INT, root, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
        if (!same_packed(a, b, 8, MPI_DOUBLE_INT, comm)) {
            for (int k = 0; k < 8; k++)
                fprintf(stderr, "rank %d: root %d element %d: {%g, %d}, the library's {%g, %d}\n", rank, root, k, a[k].v, a[k].i,
                        b[k].v, b[k].i);
            die("MPI_Bcast of MPI_DOUBLE_INT differs from PMPI_Bcast");
        }
        done++;
    }
    return done;
}

/* The rank with the largest residual: MAXLOC over (residual, rank), ties to the lowest rank,
 * by MPI_Allreduce and MPI_Reduce + MPI_Bcast; each against the library's own. */
static int maxloc(MPI_Comm comm) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    struct di mine[5], a[5], b[5];
    memset(mine, 0x33, sizeof mine);
    for (int k = 0; k < 5; k++) mine[k] = (struct di){(double)((me * 7 + k * 3) % 4), me}; /* ties on purpose */
    memset(a, 0x44, sizeof a);
    memset(b, 0x44, sizeof b);
    if (MPI_Allreduce(mine, a, 5, MPI_DOUBLE_INT, MPI_MAXLOC, comm) != MPI_SUCCESS) die("MPI_Allreduce failed");
    if (PMPI_Allreduce(mine, b, 5, MPI_DOUBLE_INT, MPI_MAXLOC, comm) != MPI_SUCCESS) die("PMPI_Allreduce failed");
    if (!same_packed(a, b, 5, MPI_DOUBLE_INT, comm)) die("MPI_Allreduce(MPI_MAXLOC, MPI_DOUBLE_INT) differs from the library's");
    memset(a, 0x44, sizeof a);
    memcpy(b, a, sizeof a);
    if (MPI_Reduce(mine, a, 5, MPI_DOUBLE_INT, MPI_MINLOC, n - 1, comm) != MPI_SUCCESS) die("MPI_Reduce failed");
    if (PMPI_Reduce(mine, b, 5, MPI_DOUBLE_INT, MPI_MINLOC, n - 1, comm) != MPI_SUCCESS) die("PMPI_Reduce failed");
    if (me == n - 1 && !same_packed(a, b, 5, MPI_DOUBLE_INT, comm)) die("MPI_Reduce(MPI_MINLOC, MPI_DOUBLE_INT) differs from the library's");
    /* The answer broadcast from the root that has it. */
    if (MPI_Bcast(a, 5, MPI_DOUBLE_INT, n - 1, comm) != MPI_SUCCESS) die("MPI_Bcast failed");
    if (PMPI_Bcast(b, 5, MPI_DOUBLE_INT, n - 1, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
    if (!same_packed(a, b, 5, MPI_DOUBLE_INT, comm)) die("the broadcast answer differs from the library's");
    return 4;
}

/* MPI_IN_PLACE with the ignored send count and type given as -1 and MPI_DATATYPE_NULL. */
static int inplace(MPI_Comm comm) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    int *a = malloc(sizeof(int) * 4 * (size_t)n), *b = malloc(sizeof(int) * 4 * (size_t)n);
    if (!a || !b) die("malloc");
#define FILL()                                                                 \
    for (int k = 0; k < 4 * n; k++) a[k] = b[k] = 1000 * me + k * (k % 3 + 1);
#define SAME(what)                                                       \
    if (memcmp(a, b, sizeof(int) * 4 * (size_t)n) != 0) die(what " in place differs from the library's");
    MPI_Request r;
    FILL();
    if (MPI_Alltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, a, 4, MPI_INT, comm) != MPI_SUCCESS) die("MPI_Alltoall failed");
    if (PMPI_Alltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, b, 4, MPI_INT, comm) != MPI_SUCCESS) die("PMPI_Alltoall failed");
    SAME("MPI_Alltoall");
    FILL();
    if (MPI_Ialltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, a, 4, MPI_INT, comm, &r) != MPI_SUCCESS ||
        MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        die("MPI_Ialltoall failed");
    if (PMPI_Alltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, b, 4, MPI_INT, comm) != MPI_SUCCESS) die("PMPI_Alltoall failed");
    SAME("MPI_Ialltoall");
    FILL();
    if (MPI_Allgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, a, 4, MPI_INT, comm) != MPI_SUCCESS) die("MPI_Allgather failed");
    if (PMPI_Allgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, b, 4, MPI_INT, comm) != MPI_SUCCESS) die("PMPI_Allgather failed");
    SAME("MPI_Allgather");
    FILL();
    if (MPI_Iallgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, a, 4, MPI_INT, comm, &r) != MPI_SUCCESS ||
        MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        die("MPI_Iallgather failed");
    if (PMPI_Allgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, b, 4, MPI_INT, comm) != MPI_SUCCESS) die("PMPI_Allgather failed");
    SAME("MPI_Iallgather");
    /* MPI_Reduce in place at the root; the others' receive buffer is not significant (NULL). */
    FILL();
    void *ra = me == 0 ? (void *)a : NULL, *rb = me == 0 ? (void *)b : NULL;
    if (MPI_Reduce(me == 0 ? MPI_IN_PLACE : a, ra, 4 * n, MPI_INT, MPI_SUM, 0, comm) != MPI_SUCCESS) die("MPI_Reduce failed");
    if (PMPI_Reduce(me == 0 ? MPI_IN_PLACE : b, rb, 4 * n, MPI_INT, MPI_SUM, 0, comm) != MPI_SUCCESS) die("PMPI_Reduce failed");
    SAME("MPI_Reduce");
#undef FILL
#undef SAME
    free(a);
    free(b);
    return 5;
}

int main(int argc, char **argv) {
    int multiple = argc > 1 && strcmp(argv[1], "multiple") == 0, provided = MPI_THREAD_SINGLE;
    if (multiple) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            printf("SKIP: the MPI library grants thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
            MPI_Finalize();
            return 0;
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int done = 0;
    /* A second argument runs one part alone ("padded" or "inplace"): each defect's own run. */
    const char *part = argc > 2 ? argv[2] : "all";
    int padded = strcmp(part, "inplace") != 0, in_place = strcmp(part, "padded") != 0;
    MPI_Comm comms[2] = {MPI_COMM_WORLD, dup};
    for (int c = 0; c < 2; c++) {
        if (padded) done += padded_bcast(comms[c]) + maxloc(comms[c]);
        if (in_place) done += inplace(comms[c]);
    }
    MPI_Comm_free(&dup);
    printf("rank %d: %d defects checks%s, every result identical to the library's\n", rank, done,
           multiple ? " at MPI_THREAD_MULTIPLE" : "");
    MPI_Finalize();
    return 0;
}
