/* An unmodified MPI program: broadcasts of every size from every root on MPI_COMM_WORLD, on
 * communicators from MPI_Comm_split and MPI_Comm_dup, with MPI_BYTE, MPI_INT and MPI_DOUBLE,
 * each compared byte for byte with what PMPI_Bcast delivers for the same arguments; the same
 * for MPI_Ibcast (+ MPI_Wait), several MPI_Ibcasts in flight completed by every completion call
 * (Waitall, Waitany, Waitsome, Testall, Testany, Testsome, Test, Request_get_status), an
 * MPI_Ibcast in one Waitall with point-to-point requests, MPI_Bcast and MPI_Ibcast interleaved on
 * one communicator, MPI_Comm_free with an MPI_Ibcast pending, an MPI_Bcast beside a pending send
 * to its root; a message above the engine's limit and a non-contiguous datatype; then bad
 * arguments to MPI_Bcast and MPI_Ibcast, whose
 * error class must be the MPI library's own, and (when RINGCAST_CHECK_MISMATCH is set) counts
 * that disagree with the root's (MPI_ERR_TRUNCATE at the receivers) and an MPI_Ibcast request
 * freed while active. Run with and without LD_PRELOAD=libringcast_mpi.so; prints one line per
 * rank and exits non-zero on any mismatch. */
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

/* Byte counts of the sweeps: around a fragment, a page, many fragments, 1 MiB. */
static const int sweep_counts[] = {1, 7, 1000, 4096, 65536, 1 << 20};

/* `one(comm, count, root, k)` for every sweep count from every root, numbering the broadcasts
 * from `*k`. */
static long every_size_from_every_root(MPI_Comm comm, int *k, long (*one)(MPI_Comm, int, int, int)) {
    int n;
    long done = 0;
    MPI_Comm_size(comm, &n);
    for (int root = 0; root < n; root++)
        for (unsigned c = 0; c < sizeof sweep_counts / sizeof sweep_counts[0]; c++) done += one(comm, sweep_counts[c], root, (*k)++);
    return done;
}

static long bcheck(MPI_Comm comm, int count, int root, int k) { return check(comm, MPI_BYTE, 1, count, root, k); }

static long sweep(MPI_Comm comm, int k0) {
    int n, k = k0;
    MPI_Comm_size(comm, &n);
    long done = every_size_from_every_root(comm, &k, bcheck);
    done += check(comm, MPI_INT, 4, 3000, n - 1, k++);
    done += check(comm, MPI_DOUBLE, 8, 70000, 0, k++);
    return done;
}

/* Fills `n` buffers of `bytes[i]` for broadcast `k0 + i` from `roots[i]` (the root's pattern,
 * 0xEE elsewhere). */
static unsigned char *fill(MPI_Comm comm, size_t bytes, int root, int k) {
    int me;
    MPI_Comm_rank(comm, &me);
    unsigned char *a = malloc(bytes + 1);
    if (!a) die("out of memory");
    for (size_t i = 0; i < bytes; i++) a[i] = me == root ? pat(k, i) : (unsigned char)0xEE;
    return a;
}

/* `a` must hold what PMPI_Bcast delivers for broadcast `k` of `bytes` from `root` on `comm`
 * (collective: every rank calls it in the same order). */
static void same_as_pmpi(MPI_Comm comm, const unsigned char *a, size_t bytes, int root, int k, const char *what) {
    unsigned char *b = fill(comm, bytes, root, k);
    if (PMPI_Bcast(b, (int)bytes, MPI_BYTE, root, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
    if (memcmp(a, b, bytes) != 0) {
        fprintf(stderr, "rank %d: %s %d (%zu bytes from %d) differs from PMPI_Bcast\n", rank, what, k, bytes, root);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < bytes; i++)
        if (a[i] != pat(k, i)) die("wrong bytes");
    free(b);
}

/* One MPI_Ibcast + MPI_Wait, compared with PMPI_Bcast. */
static long icheck(MPI_Comm comm, int count, int root, int k) {
    unsigned char *a = fill(comm, (size_t)count, root, k);
    MPI_Request r;
    if (MPI_Ibcast(a, count, MPI_BYTE, root, comm, &r) != MPI_SUCCESS) die("MPI_Ibcast failed");
    if (MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS || r != MPI_REQUEST_NULL) die("MPI_Wait failed");
    same_as_pmpi(comm, a, (size_t)count, root, k, "MPI_Ibcast");
    free(a);
    return 1;
}

/* MPI_Ibcast of every size from every root. */
static long isweep(MPI_Comm comm, int k0) {
    int k = k0;
    return every_size_from_every_root(comm, &k, icheck);
}

/* Completes every request of `r` with completion call `how`; each completes exactly once. */
static void complete(int how, int n, MPI_Request *r) {
    int left = n, idx[16], out, flag, i;
    MPI_Status st[16];
    switch (how) {
    case 0:
        if (MPI_Waitall(n, r, st) != MPI_SUCCESS) die("MPI_Waitall failed");
        return;
    case 1:
        while (left) {
            if (MPI_Waitany(n, r, &i, &st[0]) != MPI_SUCCESS || i == MPI_UNDEFINED || r[i] != MPI_REQUEST_NULL) die("MPI_Waitany failed");
            left--;
        }
        break;
    case 2:
        while (left) {
            if (MPI_Waitsome(n, r, &out, idx, st) != MPI_SUCCESS || out == MPI_UNDEFINED || out < 1) die("MPI_Waitsome failed");
            left -= out;
        }
        break;
    case 3:
        while (left) {
            if (MPI_Testsome(n, r, &out, idx, st) != MPI_SUCCESS || out == MPI_UNDEFINED) die("MPI_Testsome failed");
            left -= out;
        }
        break;
    case 4:
        do
            if (MPI_Testall(n, r, &flag, st) != MPI_SUCCESS) die("MPI_Testall failed");
        while (!flag);
        left = 0;
        break;
    case 5:
        while (left) {
            if (MPI_Testany(n, r, &i, &flag, &st[0]) != MPI_SUCCESS) die("MPI_Testany failed");
            if (flag && i == MPI_UNDEFINED) die("MPI_Testany: nothing active");
            left -= flag;
        }
        break;
    default:
        /* Request_get_status until done (it frees nothing), then MPI_Test frees. */
        for (i = 0; i < n; i++) {
            do
                if (MPI_Request_get_status(r[i], &flag, &st[0]) != MPI_SUCCESS) die("MPI_Request_get_status failed");
            while (!flag);
            if (MPI_Test(&r[i], &flag, &st[0]) != MPI_SUCCESS || !flag) die("MPI_Test failed");
        }
        left = 0;
        break;
    }
    for (i = 0; i < n; i++)
        if (r[i] != MPI_REQUEST_NULL) die("a request left active");
}

/* Five MPI_Ibcasts in flight at once (different roots and sizes), completed by `how`, each then
 * compared with PMPI_Bcast. */
static long inflight(MPI_Comm comm, int how, int k0) {
    enum { N = 5 };
    const size_t bytes[N] = {1, 1000, 65536, 7, 300000};
    int n;
    MPI_Comm_size(comm, &n);
    unsigned char *a[N];
    MPI_Request r[N];
    for (int i = 0; i < N; i++) {
        a[i] = fill(comm, bytes[i], (i + how) % n, k0 + i);
        if (MPI_Ibcast(a[i], (int)bytes[i], MPI_BYTE, (i + how) % n, comm, &r[i]) != MPI_SUCCESS) die("MPI_Ibcast failed");
    }
    complete(how, N, r);
    for (int i = 0; i < N; i++) {
        same_as_pmpi(comm, a[i], bytes[i], (i + how) % n, k0 + i, "in-flight MPI_Ibcast");
        free(a[i]);
    }
    return N;
}

/* An MPI_Ibcast between a point-to-point receive and send (a ring shift) in one Waitall (how 0)
 * or Waitsome loop (how 2). */
static long mixed(int how, int k) {
    int from = (rank + size - 1) % size, to = (rank + 1) % size, got = -1, sent = rank;
    unsigned char *a = fill(MPI_COMM_WORLD, 65536, 1 % size, k);
    MPI_Request r[3];
    MPI_Irecv(&got, 1, MPI_INT, from, 77, MPI_COMM_WORLD, &r[0]);
    if (MPI_Ibcast(a, 65536, MPI_BYTE, 1 % size, MPI_COMM_WORLD, &r[1]) != MPI_SUCCESS) die("MPI_Ibcast failed");
    MPI_Isend(&sent, 1, MPI_INT, to, 77, MPI_COMM_WORLD, &r[2]);
    complete(how, 3, r);
    if (got != from) die("point-to-point beside MPI_Ibcast: wrong value");
    same_as_pmpi(MPI_COMM_WORLD, a, 65536, 1 % size, k, "MPI_Ibcast beside point-to-point");
    free(a);
    return 1;
}

/* MPI_Ibcast, MPI_Bcast, MPI_Ibcast, MPI_Bcast on one communicator, the nonblocking ones
 * completed last and in reverse order: broadcasts match by order of call on every rank. */
static long interleaved(MPI_Comm comm, int k) {
    int n;
    MPI_Comm_size(comm, &n);
    const size_t bytes[4] = {1000, 65536, 7, 1 << 20};
    unsigned char *a[4];
    MPI_Request r[2];
    for (int i = 0; i < 4; i++) {
        a[i] = fill(comm, bytes[i], i % n, k + i);
        if (i % 2 == 0) {
            if (MPI_Ibcast(a[i], (int)bytes[i], MPI_BYTE, i % n, comm, &r[i / 2]) != MPI_SUCCESS) die("MPI_Ibcast failed");
        } else if (MPI_Bcast(a[i], (int)bytes[i], MPI_BYTE, i % n, comm) != MPI_SUCCESS) {
            die("MPI_Bcast failed");
        }
    }
    if (MPI_Wait(&r[1], MPI_STATUS_IGNORE) != MPI_SUCCESS || MPI_Wait(&r[0], MPI_STATUS_IGNORE) != MPI_SUCCESS) die("MPI_Wait failed");
    for (int i = 0; i < 4; i++) {
        same_as_pmpi(comm, a[i], bytes[i], i % n, k + i, "interleaved broadcast");
        free(a[i]);
    }
    return 4;
}

/* MPI_Comm_free with an MPI_Ibcast pending on the communicator (legal): the broadcast completes
 * normally afterwards. Compared on MPI_COMM_WORLD (the dup's ranks are the world's). */
static long freed_pending(int k) {
    MPI_Comm d;
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    unsigned char *a = fill(MPI_COMM_WORLD, 65536, size - 1, k);
    MPI_Request r;
    if (MPI_Ibcast(a, 65536, MPI_BYTE, size - 1, d, &r) != MPI_SUCCESS) die("MPI_Ibcast failed");
    if (MPI_Comm_free(&d) != MPI_SUCCESS || d != MPI_COMM_NULL) die("MPI_Comm_free failed");
    if (MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS) die("MPI_Wait after MPI_Comm_free failed");
    same_as_pmpi(MPI_COMM_WORLD, a, 65536, size - 1, k, "MPI_Ibcast on a freed communicator");
    free(a);
    return 1;
}

/* MPI's progress rule across an MPI_Bcast: rank 0 sends 8 MiB to the root (nonblocking) and
 * enters the broadcast, which the root joins only after receiving it — so rank 0's send must
 * progress while rank 0 sits in MPI_Bcast. */
static long progress(int k) {
    int root = 1 % size;
    const int big = 8 << 20;
    char *m = malloc((size_t)big);
    if (!m) die("out of memory");
    memset(m, rank, (size_t)big);
    unsigned char *a = fill(MPI_COMM_WORLD, 65536, root, k);
    MPI_Request r = MPI_REQUEST_NULL;
    if (rank == 0 && root != 0) MPI_Isend(m, big, MPI_CHAR, root, 78, MPI_COMM_WORLD, &r);
    if (rank == root && root != 0) MPI_Recv(m, big, MPI_CHAR, 0, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (MPI_Bcast(a, 65536, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS) die("MPI_Bcast failed");
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (rank == root && root != 0 && (m[0] != 0 || m[big - 1] != 0)) die("the point-to-point message beside MPI_Bcast is wrong");
    same_as_pmpi(MPI_COMM_WORLD, a, 65536, root, k, "MPI_Bcast beside a pending send");
    free(a);
    free(m);
    return 1;
}

/* The error class MPI_Ibcast returns for these arguments must be PMPI_Ibcast's. */
static void same_ierror(MPI_Comm comm, void *buf, int count, int root, const char *what) {
    MPI_Request r1 = MPI_REQUEST_NULL, r2 = MPI_REQUEST_NULL;
    int e1 = MPI_Ibcast(buf, count, MPI_INT, root, comm, &r1), e2 = PMPI_Ibcast(buf, count, MPI_INT, root, comm, &r2), c1, c2;
    MPI_Error_class(e1, &c1);
    MPI_Error_class(e2, &c2);
    if (c1 != c2 || c1 == MPI_SUCCESS) {
        fprintf(stderr, "rank %d: MPI_Ibcast, %s: class %d, PMPI_Ibcast's %d\n", rank, what, c1, c2);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
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
    unsigned char *f = NULL; /* the freed MPI_Ibcast's buffer: kept until MPI_Finalize */
    long done = sweep(MPI_COMM_WORLD, 0);
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half); /* reversed order inside */
    done += sweep(half, 1000);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    done += sweep(dup, 2000);
    /* Nonblocking broadcasts. */
    long idone = isweep(MPI_COMM_WORLD, 3000) + isweep(half, 4000);
    for (int how = 0; how < 7; how++) idone += inflight(how % 2 ? half : MPI_COMM_WORLD, how, 5000 + 10 * how);
    idone += mixed(0, 5100) + mixed(2, 5101);
    idone += interleaved(MPI_COMM_WORLD, 5200) + interleaved(half, 5210);
    idone += freed_pending(5300);
    /* Beyond the offload: a message above the engine's default limit (4 MiB) and a
     * non-contiguous datatype; both must still be right. */
    done += progress(5350);
    done += check(MPI_COMM_WORLD, MPI_BYTE, 1, 5 << 20, 0, 5400);
    MPI_Datatype vec;
    MPI_Type_vector(100, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int *v1 = calloc(200, sizeof(int)), *v2 = calloc(200, sizeof(int));
    if (!v1 || !v2) die("out of memory");
    for (int i = 0; i < 200; i++) v1[i] = v2[i] = rank == 1 % size ? i * 7 : -1;
    if (MPI_Bcast(v1, 1, vec, 1 % size, MPI_COMM_WORLD) != MPI_SUCCESS || PMPI_Bcast(v2, 1, vec, 1 % size, MPI_COMM_WORLD) != MPI_SUCCESS ||
        memcmp(v1, v2, 200 * sizeof(int)) != 0)
        die("non-contiguous broadcast differs from PMPI_Bcast");
    free(v1);
    free(v2);
    MPI_Type_free(&vec);
    done++;
    /* Bad arguments: the same error class as the library's own. */
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int x[4] = {0};
    same_error(dup, x, 1, size + 3, "root outside the communicator");
    same_error(dup, x, 1, -5, "negative root");
    same_error(dup, x, -1, 0, "negative count");
    same_ierror(dup, x, 1, size + 3, "root outside the communicator");
    same_ierror(dup, x, 1, -5, "negative root");
    same_ierror(dup, x, -1, 0, "negative count");
#ifndef MPICH_VERSION
    /* MPICH 4.0.2 does not check MPI_IN_PLACE in MPI_Bcast: it reads the buffer at (void *)-1
     * and dies of SIGSEGV, with or without the interposer (which passes it to PMPI_Bcast). */
    same_error(dup, MPI_IN_PLACE, 1, 0, "MPI_IN_PLACE");
    same_ierror(dup, MPI_IN_PLACE, 1, 0, "MPI_IN_PLACE");
#endif
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
    /* Every receiver gets an error, never MPI_SUCCESS: MPI_ERR_TRUNCATE where its engine saw the
     * root's longer frames, or MPI_ERR_OTHER where the engines' call check (issue 38: calls that
     * disagree end typed; node-mates' calls are compared before they post) found the
     * disagreement first, which also breaks the communicator; the root may complete first. */
#define MISMATCH_OK(c) (rank == 0 ? ((c) == MPI_SUCCESS || (c) == MPI_ERR_OTHER) \
                                  : ((c) == MPI_ERR_TRUNCATE || (c) == MPI_ERR_OTHER))
    MPI_Error_class(MPI_Bcast(big, rank == 0 ? 100 : 50, MPI_INT, 0, bad), &cls);
    if (!MISMATCH_OK(cls)) {
        fprintf(stderr, "rank %d: mismatched count: class %d\n", rank, cls);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    MPI_Comm_free(&bad);
    /* The same through MPI_Ibcast, on a communicator of its own (the first may be broken): the
     * receivers' MPI_Wait reports it. */
    MPI_Comm_dup(MPI_COMM_WORLD, &bad);
    MPI_Comm_set_errhandler(bad, MPI_ERRORS_RETURN);
    MPI_Request r;
    if (MPI_Ibcast(big, rank == 0 ? 100 : 50, MPI_INT, 0, bad, &r) != MPI_SUCCESS) die("mismatched MPI_Ibcast: post failed");
    MPI_Error_class(MPI_Wait(&r, MPI_STATUS_IGNORE), &cls);
    if (!MISMATCH_OK(cls)) {
        fprintf(stderr, "rank %d: mismatched count, MPI_Ibcast: class %d\n", rank, cls);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    MPI_Comm_free(&bad);
    /* An active MPI_Ibcast request freed (erroneous for collectives in MPI-3): the broadcast
     * still completes, and the next one on the communicator is right. */
    MPI_Comm_dup(MPI_COMM_WORLD, &bad);
    MPI_Comm_set_errhandler(bad, MPI_ERRORS_RETURN);
    f = fill(bad, 4096, 0, 5500);
    if (MPI_Ibcast(f, 4096, MPI_BYTE, 0, bad, &r) != MPI_SUCCESS || MPI_Request_free(&r) != MPI_SUCCESS) die("freeing an active MPI_Ibcast failed");
    idone += icheck(bad, 1000, size - 1, 5501);
    MPI_Comm_free(&bad);
    }
    MPI_Comm_free(&half);
    printf("rank %d of %d: %ld broadcasts identical to PMPI_Bcast, %ld nonblocking\n", rank, size, done, idone);
    MPI_Finalize();
    free(f);
    return 0;
}
