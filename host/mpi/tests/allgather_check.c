/* An unmodified MPI program for the interposer's MPI_Allgather and MPI_Iallgather: on
 * MPI_COMM_WORLD, a duplicate and a split half, blocks of 1 B to 64 KiB per rank in bytes, ints
 * and doubles, with a send buffer and MPI_IN_PLACE, two nonblocking ones in flight at once, every
 * result compared byte for byte with PMPI_Allgather's; a vector datatype (not contiguous: the
 * library's path) too. Prints one line per rank:
 * "rank R: N allgathers identical to PMPI_Allgather". Exits non-zero on any difference. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static unsigned char pat(int k, int r, size_t i) { return (unsigned char)(k * 29 + r * 101 + i * 13 + (i >> 7)); }

/* The same through MPI_Iallgather + MPI_Wait (two in flight at once, completed in reverse). */
static void ione(MPI_Comm comm, int count, int k) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    size_t block = (size_t)count, total = block * (size_t)n;
    unsigned char *send = malloc(block), *a = malloc(total), *a2 = malloc(total), *b = malloc(total);
    if (!send || !a || !a2 || !b) die("malloc");
    for (size_t i = 0; i < block; i++) send[i] = pat(k, me, i);
    memset(a, 0xEE, total);
    memset(a2, 0xEE, total);
    memcpy(a2 + (size_t)me * block, send, block);
    MPI_Request r[2];
    if (MPI_Iallgather(send, count, MPI_BYTE, a, count, MPI_BYTE, comm, &r[0]) != MPI_SUCCESS ||
        MPI_Iallgather(MPI_IN_PLACE, count, MPI_BYTE, a2, count, MPI_BYTE, comm, &r[1]) != MPI_SUCCESS)
        die("MPI_Iallgather failed");
    if (MPI_Wait(&r[1], MPI_STATUS_IGNORE) != MPI_SUCCESS || MPI_Wait(&r[0], MPI_STATUS_IGNORE) != MPI_SUCCESS) die("MPI_Wait failed");
    if (PMPI_Allgather(send, count, MPI_BYTE, b, count, MPI_BYTE, comm) != MPI_SUCCESS) die("PMPI_Allgather failed");
    if (memcmp(a, b, total) != 0 || memcmp(a2, b, total) != 0) {
        fprintf(stderr, "rank %d: iallgather %d (%d B) differs from PMPI_Allgather\n", rank, k, count);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(send);
    free(a);
    free(a2);
    free(b);
}

/* One allgather of `count` elements of `type` (`esize` bytes) per rank on `comm`, in place or
 * not, compared with PMPI_Allgather's result. */
static void one(MPI_Comm comm, MPI_Datatype type, int esize, int count, int in_place, int k) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    size_t block = (size_t)count * (size_t)esize, total = block * (size_t)n;
    unsigned char *send = malloc(block ? block : 1), *a = malloc(total ? total : 1), *b = malloc(total ? total : 1);
    if (!send || !a || !b) die("malloc");
    for (size_t i = 0; i < block; i++) send[i] = pat(k, me, i);
    memset(a, 0xEE, total);
    memset(b, 0xDD, total);
    if (in_place) memcpy(a + (size_t)me * block, send, block);
    if (MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, type, a, count, type, comm) != MPI_SUCCESS) die("MPI_Allgather failed");
    if (PMPI_Allgather(send, count, type, b, count, type, comm) != MPI_SUCCESS) die("PMPI_Allgather failed");
    if (memcmp(a, b, total) != 0) {
        fprintf(stderr, "rank %d: allgather %d (%d x %d B, %s) differs from PMPI_Allgather\n", rank, k, count, esize,
                in_place ? "in place" : "send buffer");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(send);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dup, half;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    const int bytes[] = {1, 7, 1000, 4096, 65536};
    int k = 0;
    MPI_Comm comms[] = {MPI_COMM_WORLD, dup, half};
    for (int c = 0; c < 3; c++) {
        for (size_t s = 0; s < sizeof bytes / sizeof bytes[0]; s++) {
            for (int in_place = 0; in_place < 2; in_place++) one(comms[c], MPI_BYTE, 1, bytes[s], in_place, k++);
        }
        one(comms[c], MPI_INT, 4, 1000, 0, k++);
        one(comms[c], MPI_DOUBLE, 8, 513, 1, k++);
        for (int s2 = 0; s2 < 3; s2++) ione(comms[c], (int[]){3, 2000, 40000}[s2], k++);
    }
    /* A vector datatype: not contiguous, so the library's own path, with the same result. */
    MPI_Datatype vec;
    MPI_Type_vector(4, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int sv[8], rv[8 * 64], rp[8 * 64];
    if (size > 64) die("at most 64 ranks");
    for (int i = 0; i < 8; i++) sv[i] = rank * 100 + i;
    memset(rv, 0, sizeof rv);
    memset(rp, 0, sizeof rp);
    if (MPI_Allgather(sv, 1, vec, rv, 1, vec, MPI_COMM_WORLD) != MPI_SUCCESS ||
        PMPI_Allgather(sv, 1, vec, rp, 1, vec, MPI_COMM_WORLD) != MPI_SUCCESS || memcmp(rv, rp, sizeof rv) != 0)
        die("vector datatype allgather differs");
    MPI_Type_free(&vec);
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    printf("rank %d: %d allgathers identical to PMPI_Allgather (9 pairs of them nonblocking)\n", rank, k + 1 + 9);
    MPI_Finalize();
    return 0;
}
