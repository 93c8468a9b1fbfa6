/* The MPI library's own collectives measured with osu_bcast's method (the OSU micro-benchmarks'
 * osu_allreduce, osu_allgather, ... use the same), the baseline of `ringcast bench
 * --compare-mpi` (host/cli/src/compare.rs), which runs it beside ringcast's `bench --barrier`
 * with the same collective, sizes and iterations. Per size: up to 10 untimed warm-up calls,
 * then `iters` of them (a tenth, at least 10, from 64 KiB: ringcast's `iters_for`), each after
 * an untimed MPI_Barrier, only the collective timed; each rank's mean, then the mean, fastest
 * and slowest over ranks. Rank 0 prints one line per size:
 *   size S avg_us A min_us B max_us C iters I
 * The sizes mean what they mean to `ringcast bench` (host/cli/src/bench_rank.rs): the message
 * (bcast, root 0), each rank's vector of uint64 summed (allreduce; reduce to root 0; rounded to
 * whole elements by the caller), each rank's block (allgather, alltoall); a barrier takes the
 * size 0. The last call's result is checked at every rank with the same patterns. Usage:
 *   mpirun -np N mpi-osu-bcast SIZES ITERS [COLLECTIVE]   (SIZES: comma list, e.g. 2,8192;
 *   COLLECTIVE: bcast (default), allreduce, reduce, allgather, alltoall or barrier) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

enum coll { BCAST, ALLREDUCE, REDUCE, ALLGATHER, ALLTOALL, BARRIER };

/* Timed calls for `size` bytes, as ringcast's `iters_for`. */
static long iters_for(long iters, long size) {
    if (size >= 65536) return iters / 10 > 10 ? iters / 10 : 10;
    return iters > 1 ? iters : 1;
}

/* SplitMix64's finalizer: ringcast's `mix` in bench_rank.rs. */
static uint64_t mix(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The byte rank `from`'s input holds at offset `i` (for an alltoall, of its block for `to`):
 * ringcast's `pattern` in bench_rank.rs, a hash so that misplaced data cannot match. */
static unsigned char pattern(long i, long size, int from, int to) {
    return (unsigned char)(mix((uint64_t)i ^ (uint64_t)size << 40 ^ (uint64_t)from << 20 ^ (uint64_t)to << 52) >> 24);
}

/* Element `i` of rank `r`'s reduction input: ringcast's `element`, a hash. */
static uint64_t element(long i, int r) { return mix((uint64_t)i ^ (uint64_t)r << 40); }

static void die(int rank, const char *what, long size) {
    fprintf(stderr, "mpi-osu-bcast: rank %d: %s of %ld B delivered wrong bytes\n", rank, what, size);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 3 && argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi-osu-bcast SIZES ITERS [COLLECTIVE]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    static const char *names[] = {"bcast", "allreduce", "reduce", "allgather", "alltoall", "barrier"};
    enum coll coll = BCAST;
    if (argc == 4) {
        int found = 0;
        for (int c = 0; c <= BARRIER; c++)
            if (!strcmp(argv[3], names[c])) coll = (enum coll)c, found = 1;
        if (!found) {
            if (rank == 0) fprintf(stderr, "mpi-osu-bcast: unknown collective %s\n", argv[3]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    long sizes[MAX_SIZES], largest = 1, iters = atol(argv[2]);
    int n = 0;
    for (char *s = argv[1], *end; *s && n < MAX_SIZES; s = *end ? end + 1 : end) {
        sizes[n] = strtol(s, &end, 10);
        if (end == s || sizes[n] < 0 || sizes[n] > (1L << 30) || (*end && *end != ',') ||
            (sizes[n] == 0 && coll != BARRIER) || ((coll == ALLREDUCE || coll == REDUCE) && sizes[n] % 8)) {
            if (rank == 0) fprintf(stderr, "mpi-osu-bcast: bad size list %s for %s\n", argv[1], names[coll]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (sizes[n] > largest) largest = sizes[n];
        n++;
    }
    if (iters < 1) {
        if (rank == 0) fprintf(stderr, "mpi-osu-bcast: bad iteration count %s\n", argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Room for the largest of every layout: an alltoall's ranks blocks each way. */
    unsigned char *send = malloc((size_t)largest * ranks), *recv = malloc((size_t)largest * ranks);
    if (!send || !recv) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int k = 0; k < n; k++) {
        long size = sizes[k], timed = iters_for(iters, size), warm = timed < 10 ? timed : 10;
        long elems = size / 8;
        memset(recv, 0xEE, (size_t)largest * ranks);
        switch (coll) {
        case BCAST:
            for (long i = 0; i < size; i++) recv[i] = rank == 0 ? pattern(i, size, 0, 0) : 0;
            break;
        case ALLREDUCE:
        case REDUCE:
            for (long i = 0; i < elems; i++) ((uint64_t *)send)[i] = element(i, rank);
            break;
        case ALLGATHER:
            for (long i = 0; i < size; i++) send[i] = pattern(i, size, rank, 0);
            break;
        case ALLTOALL:
            for (int to = 0; to < ranks; to++)
                for (long i = 0; i < size; i++) send[to * size + i] = pattern(i, size, rank, to);
            break;
        case BARRIER:
            break;
        }
        double total = 0;
        for (long i = 0; i < warm + timed; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t = MPI_Wtime();
            switch (coll) {
            case BCAST: MPI_Bcast(recv, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD); break;
            case ALLREDUCE: MPI_Allreduce(send, recv, (int)elems, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD); break;
            case REDUCE: MPI_Reduce(send, recv, (int)elems, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD); break;
            case ALLGATHER: MPI_Allgather(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE, MPI_COMM_WORLD); break;
            case ALLTOALL: MPI_Alltoall(send, (int)size, MPI_BYTE, recv, (int)size, MPI_BYTE, MPI_COMM_WORLD); break;
            case BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
            }
            t = MPI_Wtime() - t;
            if (i >= warm) total += t;
        }
        switch (coll) {
        case BCAST:
            for (long i = 0; i < size; i++)
                if (recv[i] != pattern(i, size, 0, 0)) die(rank, "bcast", size);
            break;
        case ALLREDUCE:
        case REDUCE:
            if (coll == REDUCE && rank != 0) break;
            for (long i = 0; i < elems; i++) {
                uint64_t want = 0;
                for (int r = 0; r < ranks; r++) want += element(i, r);
                if (((uint64_t *)recv)[i] != want) die(rank, names[coll], size);
            }
            break;
        case ALLGATHER:
        case ALLTOALL:
            for (int from = 0; from < ranks; from++)
                for (long i = 0; i < size; i++)
                    if (recv[from * size + i] != pattern(i, size, from, coll == ALLTOALL ? rank : 0))
                        die(rank, names[coll], size);
            break;
        case BARRIER:
            break;
        }
        double mine = total / timed * 1e6, sum = 0, min = 0, max = 0;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("size %ld avg_us %.3f min_us %.3f max_us %.3f iters %ld\n", size, sum / ranks, min, max, timed);
        fflush(stdout);
    }
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
