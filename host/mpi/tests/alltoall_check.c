/* An unmodified MPI program for the interposer's MPI_Alltoall and MPI_Ialltoall: on
 * MPI_COMM_WORLD, a duplicate, a split half and the world reordered evens first (so a node's ranks
 * are not consecutive in it: 0, 2, 1, 3 puts ranks 0 and 2 on the first node), blocks of 1 B to
 * 256 KiB per pair in bytes, ints
 * and doubles, pairs of MPI_Ialltoall in flight completed in reverse, every result compared
 * byte for byte with PMPI_Alltoall's; then calls the interposer leaves to the library: a block
 * whose whole send buffer passes the engine's message limit, MPI_IN_PLACE, a vector datatype.
 * Prints one line per rank: "rank R: N alltoalls identical to PMPI_Alltoall". Exits non-zero on
 * any difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pat(int k, int from, int to, size_t i) { return (unsigned char)(k * 31 + from * 101 + to * 7 + i * 13 + (i >> 8)); }

/* `count` elements of `type` (`esize` bytes) per pair on `comm`, blocking or as two
 * MPI_Ialltoall in flight, compared with PMPI_Alltoall. */
static int one(MPI_Comm comm, MPI_Datatype type, int esize, int count, int nonblocking, int k) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    size_t block = (size_t)count * (size_t)esize, total = block * (size_t)n;
    unsigned char *send = malloc(total), *a = malloc(total), *a2 = malloc(total), *b = malloc(total);
    if (!send || !a || !a2 || !b) die("malloc");
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < block; i++) send[(size_t)q * block + i] = pat(k, me, q, i);
    memset(a, 0xEE, total);
    memset(a2, 0xEE, total);
    if (nonblocking) {
        MPI_Request r[2];
        if (MPI_Ialltoall(send, count, type, a, count, type, comm, &r[0]) != MPI_SUCCESS ||
            MPI_Ialltoall(send, count, type, a2, count, type, comm, &r[1]) != MPI_SUCCESS)
            die("MPI_Ialltoall failed");
        if (MPI_Wait(&r[1], MPI_STATUS_IGNORE) != MPI_SUCCESS || MPI_Wait(&r[0], MPI_STATUS_IGNORE) != MPI_SUCCESS) die("MPI_Wait failed");
    } else if (MPI_Alltoall(send, count, type, a, count, type, comm) != MPI_SUCCESS) {
        die("MPI_Alltoall failed");
    }
    if (PMPI_Alltoall(send, count, type, b, count, type, comm) != MPI_SUCCESS) die("PMPI_Alltoall failed");
    if (memcmp(a, b, total) != 0 || (nonblocking && memcmp(a2, b, total) != 0)) {
        fprintf(stderr, "rank %d: alltoall %d (%zu B per pair) differs from PMPI_Alltoall\n", rank, k, block);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(send);
    free(a);
    free(a2);
    free(b);
    return nonblocking ? 2 : 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup, half, evens_first;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_split(MPI_COMM_WORLD, 0, (rank % 2) * size + rank, &evens_first);
    MPI_Comm comms[4] = {MPI_COMM_WORLD, dup, half, evens_first};
    int n = 0, k = 0;
    for (int c = 0; c < 4; c++) {
        n += one(comms[c], MPI_BYTE, 1, 1, 0, k++);
        n += one(comms[c], MPI_BYTE, 1, 100, 0, k++);
        n += one(comms[c], MPI_INT, 4, 1024, 0, k++);
        n += one(comms[c], MPI_DOUBLE, 8, 32768, 0, k++);
        n += one(comms[c], MPI_INT, 4, 77, 1, k++);
    }
    /* The library's: a whole send buffer past the limit, MPI_IN_PLACE, a vector datatype. */
    n += one(MPI_COMM_WORLD, MPI_BYTE, 1, 2 << 20, 0, k++);
    int *inplace = malloc(sizeof(int) * (size_t)size), *expect = malloc(sizeof(int) * (size_t)size);
    if (!inplace || !expect) die("malloc");
    for (int q = 0; q < size; q++) inplace[q] = rank * 1000 + q;
    for (int q = 0; q < size; q++) expect[q] = q * 1000 + rank;
    if (MPI_Alltoall(MPI_IN_PLACE, 1, MPI_INT, inplace, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) die("MPI_IN_PLACE failed");
    if (memcmp(inplace, expect, sizeof(int) * (size_t)size) != 0) die("MPI_IN_PLACE alltoall wrong");
    n++;
    MPI_Datatype vec;
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int *vs = calloc((size_t)size * 4, sizeof(int)), *vr = calloc((size_t)size * 4, sizeof(int));
    if (!vs || !vr) die("calloc");
    if (MPI_Alltoall(vs, 1, vec, vr, 1, vec, MPI_COMM_WORLD) != MPI_SUCCESS) die("vector alltoall failed");
    n++;
    MPI_Type_free(&vec);
    free(vs);
    free(vr);
    free(inplace);
    free(expect);
    MPI_Comm_free(&evens_first);
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    printf("rank %d: %d alltoalls identical to PMPI_Alltoall\n", rank, n);
    MPI_Finalize();
    return 0;
}
