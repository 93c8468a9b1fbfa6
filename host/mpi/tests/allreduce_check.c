/* An unmodified MPI program for the interposer's MPI_Allreduce, MPI_Iallreduce (pairs in
 * flight), MPI_Reduce (to rotating roots, in place at the root and not: 24 per rank,
 * compared at the root) and MPI_Ireduce (4 per rank, likewise): on MPI_COMM_WORLD and a split
 * half, every predefined operation on int, unsigned, long long, signed char and unsigned short
 * (compared byte for byte with PMPI_Allreduce's result), and sum, prod, min and max on float and
 * double (within the rounding another reduction order allows, and bit-identical at every rank:
 * rank 0's result broadcast with PMPI_Bcast and compared), counts of 1 to 10,000, with a send
 * buffer and MPI_IN_PLACE; MPI_MINLOC (not offloaded) too. Prints one line per rank:
 * "rank R: N allreduces matching PMPI_Allreduce". Exits non-zero on any difference. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static void die(const char *what) {
    fprintf(stderr, "rank %d: %s\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Fills `n` elements of `t` for this rank: small integers (zeros now and then, so logical
 * operations see both), floats of mixed sign and magnitude. */
static void fill(void *buf, MPI_Datatype t, int n, int me, int k) {
    for (int i = 0; i < n; i++) {
        long v = ((i * 31 + me * 17 + k * 7) % 11 == 0) ? 0 : (i * 13 + me * 29 + k) % 97 - 40;
        if (t == MPI_INT) ((int *)buf)[i] = (int)v;
        else if (t == MPI_UNSIGNED) ((unsigned *)buf)[i] = (unsigned)(v + 40);
        else if (t == MPI_LONG_LONG) ((long long *)buf)[i] = v * 100003LL;
        else if (t == MPI_SIGNED_CHAR) ((signed char *)buf)[i] = (signed char)v;
        else if (t == MPI_UNSIGNED_SHORT) ((unsigned short *)buf)[i] = (unsigned short)(v + 40);
        else if (t == MPI_FLOAT) ((float *)buf)[i] = (float)v * powf(10.0f, (float)((i + me) % 7 - 3)) + 0.25f;
        else ((double *)buf)[i] = (double)v * pow(10.0, (double)((i + me) % 13 - 6)) + 0.125;
    }
}

static int one(MPI_Comm comm, MPI_Datatype t, int tsize, MPI_Op op, int count, int in_place, int k) {
    int me;
    MPI_Comm_rank(comm, &me);
    size_t bytes = (size_t)count * (size_t)tsize;
    unsigned char *send = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes), *r0 = malloc(bytes);
    if (!send || !a || !b || !r0) die("malloc");
    fill(send, t, count, me, k);
    if (in_place) memcpy(a, send, bytes);
    if (MPI_Allreduce(in_place ? MPI_IN_PLACE : send, a, count, t, op, comm) != MPI_SUCCESS) die("MPI_Allreduce failed");
    if (PMPI_Allreduce(send, b, count, t, op, comm) != MPI_SUCCESS) die("PMPI_Allreduce failed");
    int is_float = t == MPI_FLOAT || t == MPI_DOUBLE;
    if (!is_float) {
        if (memcmp(a, b, bytes) != 0) {
            fprintf(stderr, "rank %d: allreduce %d differs from PMPI_Allreduce\n", rank, k);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    } else {
        for (int i = 0; i < count; i++) {
            double x = t == MPI_FLOAT ? ((float *)a)[i] : ((double *)a)[i];
            double y = t == MPI_FLOAT ? ((float *)b)[i] : ((double *)b)[i];
            double tol = (t == MPI_FLOAT ? 1e-4 : 1e-10) * (fabs(y) + 1.0);
            if (fabs(x - y) > tol) {
                fprintf(stderr, "rank %d: allreduce %d element %d: %g vs PMPI %g\n", rank, k, i, x, y);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        /* Bit-identical at every rank. */
        memcpy(r0, a, bytes);
        if (PMPI_Bcast(r0, (int)bytes, MPI_BYTE, 0, comm) != MPI_SUCCESS) die("PMPI_Bcast failed");
        if (memcmp(a, r0, bytes) != 0) {
            fprintf(stderr, "rank %d: allreduce %d not bit-identical to rank 0's\n", rank, k);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    free(send);
    free(a);
    free(b);
    free(r0);
    return 1;
}

/* Two MPI_Iallreduce in flight at once (ints summed from a send buffer, doubles summed in
 * place), completed in reverse, compared with PMPI_Allreduce: ints exactly, doubles within
 * rounding and bit-identical at every rank. */
static int ione(MPI_Comm comm, int k) {
    int me;
    MPI_Comm_rank(comm, &me);
    const int ni = 1000, nd = 3000;
    int *is = malloc(ni * sizeof(int)), *ia = malloc(ni * sizeof(int)), *ib = malloc(ni * sizeof(int));
    double *ds = malloc(nd * sizeof(double)), *da = malloc(nd * sizeof(double)), *db = malloc(nd * sizeof(double)),
           *d0 = malloc(nd * sizeof(double));
    if (!is || !ia || !ib || !ds || !da || !db || !d0) die("malloc");
    fill(is, MPI_INT, ni, me, k);
    fill(ds, MPI_DOUBLE, nd, me, k);
    memcpy(da, ds, nd * sizeof(double));
    MPI_Request r[2];
    if (MPI_Iallreduce(is, ia, ni, MPI_INT, MPI_SUM, comm, &r[0]) != MPI_SUCCESS ||
        MPI_Iallreduce(MPI_IN_PLACE, da, nd, MPI_DOUBLE, MPI_SUM, comm, &r[1]) != MPI_SUCCESS)
        die("MPI_Iallreduce failed");
    if (MPI_Wait(&r[1], MPI_STATUS_IGNORE) != MPI_SUCCESS || MPI_Wait(&r[0], MPI_STATUS_IGNORE) != MPI_SUCCESS) die("MPI_Wait failed");
    if (PMPI_Allreduce(is, ib, ni, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS || PMPI_Allreduce(ds, db, nd, MPI_DOUBLE, MPI_SUM, comm) != MPI_SUCCESS)
        die("PMPI_Allreduce failed");
    if (memcmp(ia, ib, ni * sizeof(int)) != 0) die("MPI_Iallreduce of ints differs from PMPI_Allreduce");
    for (int i = 0; i < nd; i++)
        if (fabs(da[i] - db[i]) > 1e-10 * (fabs(db[i]) + 1.0)) die("MPI_Iallreduce of doubles differs from PMPI_Allreduce");
    memcpy(d0, da, nd * sizeof(double));
    if (PMPI_Bcast(d0, nd, MPI_DOUBLE, 0, comm) != MPI_SUCCESS || memcmp(d0, da, nd * sizeof(double)) != 0)
        die("MPI_Iallreduce of doubles not bit-identical to rank 0's");
    free(is);
    free(ia);
    free(ib);
    free(ds);
    free(da);
    free(db);
    free(d0);
    return 2;
}

/* MPI_Reduce to `root`, in place at the root or not, compared at the root with PMPI_Reduce's
 * result (integers exactly, floats within rounding). */
static int reduce_one(MPI_Comm comm, MPI_Datatype t, int tsize, MPI_Op op, int count, int root, int in_place, int k,
                      int nonblocking) {
    int me;
    MPI_Comm_rank(comm, &me);
    size_t bytes = (size_t)count * (size_t)tsize;
    unsigned char *send = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
    if (!send || !a || !b) die("malloc");
    fill(send, t, count, me, k);
    int here = in_place && me == root;
    if (here) memcpy(a, send, bytes);
    if (nonblocking) {
        MPI_Request r;
        if (MPI_Ireduce(here ? MPI_IN_PLACE : send, a, count, t, op, root, comm, &r) != MPI_SUCCESS ||
            MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            die("MPI_Ireduce failed");
    } else if (MPI_Reduce(here ? MPI_IN_PLACE : send, a, count, t, op, root, comm) != MPI_SUCCESS) {
        die("MPI_Reduce failed");
    }
    if (PMPI_Reduce(send, b, count, t, op, root, comm) != MPI_SUCCESS) die("PMPI_Reduce failed");
    if (me == root) {
        for (int i = 0; i < count; i++) {
            int ok;
            if (t == MPI_DOUBLE) {
                double x = ((double *)a)[i], y = ((double *)b)[i];
                ok = fabs(x - y) <= 1e-10 * (fabs(y) + 1.0);
            } else {
                ok = memcmp(a + (size_t)i * tsize, b + (size_t)i * tsize, (size_t)tsize) == 0;
            }
            if (!ok) {
                fprintf(stderr, "rank %d: reduce %d element %d differs from PMPI_Reduce\n", rank, k, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    free(send);
    free(a);
    free(b);
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Datatype ints[] = {MPI_INT, MPI_UNSIGNED, MPI_LONG_LONG, MPI_SIGNED_CHAR, MPI_UNSIGNED_SHORT};
    int isz[] = {4, 4, 8, 1, 2};
    MPI_Op iops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR};
    MPI_Datatype floats[] = {MPI_FLOAT, MPI_DOUBLE};
    int fsz[] = {4, 8};
    MPI_Op fops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
    const int counts[] = {1, 100, 10000};
    int n = 0, k = 0;
    MPI_Comm comms[] = {MPI_COMM_WORLD, half};
    for (int c = 0; c < 2; c++) {
        for (int t = 0; t < 5; t++)
            for (int o = 0; o < 9; o++) n += one(comms[c], ints[t], isz[t], iops[o], counts[(t + o) % 3], (t + o) % 2, k++);
        for (int t = 0; t < 2; t++)
            for (int o = 0; o < 4; o++)
                for (int s = 0; s < 3; s++) n += one(comms[c], floats[t], fsz[t], fops[o], counts[s], s % 2, k++);
    }
    int nr = 0;
    for (int c = 0; c < 2; c++) {
        int n;
        MPI_Comm_size(comms[c], &n);
        for (int t = 0; t < 5; t++) {
            nr += reduce_one(comms[c], ints[t], isz[t], MPI_SUM, 1000, k % n, k % 2, k, 0);
            k++;
            nr += reduce_one(comms[c], ints[t], isz[t], MPI_MAX, 7, k % n, k % 2, k, 0);
            k++;
        }
        for (int s = 0; s < 2; s++, k++) nr += reduce_one(comms[c], MPI_DOUBLE, 8, MPI_SUM, 5000, k % n, s, k, 0);
    }
    int nir = 0;
    for (int c = 0; c < 2; c++) {
        int n;
        MPI_Comm_size(comms[c], &n);
        for (int s = 0; s < 2; s++, k++) nir += reduce_one(comms[c], s ? MPI_DOUBLE : MPI_INT, s ? 8 : 4, MPI_SUM, 300, k % n, s, k, 1);
    }
    int ni = 0;
    for (int c = 0; c < 2; c++) ni += ione(comms[c], k++);
    /* MPI_MINLOC on pairs: not offloaded, the library's result. */
    struct { double v; int i; } in = {1.0 / (rank + 1), rank}, out;
    if (MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD) != MPI_SUCCESS) die("MINLOC failed");
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (out.i != size - 1) die("MINLOC wrong");
    MPI_Comm_free(&half);
    printf("rank %d: %d allreduces matching PMPI_Allreduce (%d of them nonblocking), %d reduces matching PMPI_Reduce (%d more "
           "nonblocking)\n",
           rank, n + 1 + ni, ni, nr, nir);
    MPI_Finalize();
    return 0;
}
