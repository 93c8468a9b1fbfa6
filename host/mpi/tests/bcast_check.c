/* An unmodified MPI program: broadcasts of every size from every root on MPI_COMM_WORLD, on
 * communicators from MPI_Comm_split and MPI_Comm_dup, with MPI_BYTE, MPI_INT and MPI_DOUBLE,
 * each compared byte for byte with what PMPI_Bcast delivers for the same arguments; then bad
 * arguments, whose error class must be the MPI library's own, and counts that disagree with
 * the root's (MPI_ERR_TRUNCATE at the receivers). Run with and without
 * LD_PRELOAD=libringcast_mpi.so; prints one line per rank and exits non-zero on any mismatch. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pat(int k, size_t i) { return (unsigned char)(k * 37 + i * 11 + (i >> 8)); }

/* One broadcast through MPI_Bcast and the same through PMPI_Bcast; the results must match. */
static long check(MPI_Comm comm, MPI_Datatype type, int esize, int count, int root, int k) {
    int me;
    MPI_Comm_rank(comm, &me);
    size_t bytes = (size_t)count * (size_t)esize;
    unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
    if (!a || !b) die("out of memory");
    for (size_t i = 0; i < bytes; i++) a[i] = b[i] = me == root ? pat(k, i) : (unsigned char)0xEE;
    if (MPI_Bcast(a, count, type, root, comm) != MPI_SUCCESS) die("MPI_Bcast failed");
    if (PMPI_Bcast(b, count, type, root, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
    if (memcmp(a, b, bytes) != 0) {
        fprintf(stderr, "rank %d: broadcast %d (%zu bytes from %d) differs from PMPI_Bcast\n", rank, k, bytes, root);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < bytes && type == MPI_BYTE; i++)
        if (a[i] != pat(k, i)) die("wrong bytes");
    free(a);
    free(b);
    return 1;
}

static long sweep(MPI_Comm comm, int k0) {
    const int counts[] = {1, 7, 1000, 4096, 65536, 1 << 20};
    int n, k = k0;
    long done = 0;
    MPI_Comm_size(comm, &n);
    for (int root = 0; root < n; root++)
        for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) done += check(comm, MPI_BYTE, 1, counts[c], root, k++);
    done += check(comm, MPI_INT, 4, 3000, n - 1, k++);
    done += check(comm, MPI_DOUBLE, 8, 70000, 0, k++);
    return done;
}

/* The error class MPI_Bcast returns for these arguments must be PMPI_Bcast's. */
static void same_error(MPI_Comm comm, void *buf, int count, int root, const char *what) {
    int e1 = MPI_Bcast(buf, count, MPI_INT, root, comm), e2 = PMPI_Bcast(buf, count, MPI_INT, root, comm), c1, c2;
    MPI_Error_class(e1, &c1);
    MPI_Error_class(e2, &c2);
    if (c1 != c2 || c1 == MPI_SUCCESS) {
        fprintf(stderr, "rank %d: %s: class %d, PMPI_Bcast's %d\n", rank, what, c1, c2);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long done = sweep(MPI_COMM_WORLD, 0);
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half); /* reversed order inside */
    done += sweep(half, 1000);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    done += sweep(dup, 2000);
    /* Bad arguments: the same error class as the library's own. */
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int x[4] = {0};
    same_error(dup, x, 1, size + 3, "root outside the communicator");
    same_error(dup, x, 1, -5, "negative root");
    same_error(dup, x, -1, 0, "negative count");
    same_error(dup, MPI_IN_PLACE, 1, 0, "MPI_IN_PLACE");
    MPI_Comm_free(&dup);
    /* Counts that disagree with the root's (an erroneous program): through ringcast the
     * receivers with fewer elements get MPI_ERR_TRUNCATE, as Open MPI's own linear broadcast
     * gives; its tree broadcasts may hang instead, so this runs only when asked
     * (RINGCAST_CHECK_MISMATCH, set for the preloaded runs), on a communicator of its own. */
    if (getenv("RINGCAST_CHECK_MISMATCH")) {
    MPI_Comm bad;
    MPI_Comm_dup(MPI_COMM_WORLD, &bad);
    MPI_Comm_set_errhandler(bad, MPI_ERRORS_RETURN);
    int big[100] = {0}, cls;
    MPI_Error_class(MPI_Bcast(big, rank == 0 ? 100 : 50, MPI_INT, 0, bad), &cls);
    if (cls != (rank == 0 ? MPI_SUCCESS : MPI_ERR_TRUNCATE)) {
        fprintf(stderr, "rank %d: mismatched count: class %d\n", rank, cls);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    MPI_Comm_free(&bad);
    }
    MPI_Comm_free(&half);
    printf("rank %d of %d: %ld broadcasts identical to PMPI_Bcast\n", rank, size, done);
    MPI_Finalize();
    return 0;
}
