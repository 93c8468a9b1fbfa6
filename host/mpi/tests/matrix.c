/* The interposer's conformance matrix (issue 37): every intercepted call, blocking and
 * non-blocking, x every predefined datatype (the pair and padded types included) plus a resized,
 * a vector and a contiguous-of-padded derived type x counts 0, 1, odd (7) and past the fragment
 * size (> 8 KiB) x in place and not where the standard allows it x the world, a dup, a split
 * (reversed order) and an uneven placement (every rank but rank 1) — at the thread level the
 * first argument names: `single`, `funneled`, or `multiple` (two threads calling at once: one on
 * the world and the uneven communicator, the other on the dup and the split).
 *
 * Each cell runs the call twice on the same inputs: once through PMPI_* (what the MPI library
 * computes itself, in the same form: a non-blocking cell's reference is PMPI_I* + PMPI_Wait —
 * Open MPI's own MPI_Ireduce and MPI_Reduce of complex numbers differ at np 8), once through
 * the intercepted MPI_*; every rank compares its own result with
 * the library's — the packed bytes of every significant output (MPI_Pack: a padded element's
 * holes are no data; a long double's 6 unused bytes masked), the bytes after the output untouched,
 * and the error class when the library refuses the call. Reductions draw values whose result is
 * exact in any order (small integers), so floats compare bit for bit; each cell of a reduction
 * takes the next operation its type allows (MPI's groups) and MPI_Reduce the next root. Every
 * cell is a correct call. A cell the matrix cannot compare is a gap, not a pass: the library
 * refusing it (MPICH 4.0.2 fails large in-place alltoalls of padded types with MPI_ERR_OTHER)
 * or dying on it (MPICH's in-place MPI_Reduce past 4 KiB: not run), MPI_Pack refusing a result.
 *
 * Prints, at rank 0: "matrix <level> np <N>: C cells, P passed, F failed, G gaps; offloaded O,
 * packed K, pmpi M" — the paths from the interposer's counters (ringcast_mpi_paths, a weak
 * symbol: without the interposer every cell is the library's). Exits non-zero on any failure. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The interposer's path counters (offloaded, packed, PMPI), if it is there. */
extern void ringcast_mpi_paths(long long out[3]) __attribute__((weak));

enum call { BCAST, ALLGATHER, ALLREDUCE, REDUCE, ALLTOALL, BARRIER, NCALLS };
static const char *call_names[NCALLS] = {"bcast", "allgather", "allreduce", "reduce", "alltoall", "barrier"};

/* How a type's elements hold values a reduction can take (0: data movement only). */
enum vk { V_NONE, V_INT, V_UINT, V_FLT, V_BOOL, V_BYTE, V_CPLX, V_PAIR };
/* Operation groups (MPI 4.0, 6.9.2). */
#define G_ARITH 1 /* SUM PROD MIN MAX */
#define G_BITS 2  /* BAND BOR BXOR */
#define G_LOGIC 4 /* LAND LOR LXOR */
#define G_LOC 8   /* MAXLOC MINLOC */
#define G_CPLX 16 /* SUM PROD */

struct dtype {
    const char *name;
    MPI_Datatype t;
    enum vk vk;
    int groups;
    int ld; /* holds long doubles (masked: 6 unused bytes each) */
};

static struct dtype types[64];
static int mpich; /* the library is MPICH (its known failures are gaps) */
static int ntypes;

static void add(const char *name, MPI_Datatype t, enum vk vk, int groups, int ld) {
    types[ntypes++] = (struct dtype){name, t, vk, groups, ld};
}

#define INTG (G_ARITH | G_BITS | G_LOGIC)
static void make_types(void) {
    add("MPI_CHAR", MPI_CHAR, V_NONE, 0, 0);
    add("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, V_INT, INTG, 0);
    add("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, V_UINT, INTG, 0);
    add("MPI_BYTE", MPI_BYTE, V_BYTE, G_BITS, 0);
    add("MPI_WCHAR", MPI_WCHAR, V_NONE, 0, 0);
    add("MPI_SHORT", MPI_SHORT, V_INT, INTG, 0);
    add("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, V_UINT, INTG, 0);
    add("MPI_INT", MPI_INT, V_INT, INTG, 0);
    add("MPI_UNSIGNED", MPI_UNSIGNED, V_UINT, INTG, 0);
    add("MPI_LONG", MPI_LONG, V_INT, INTG, 0);
    add("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, V_UINT, INTG, 0);
    add("MPI_LONG_LONG", MPI_LONG_LONG, V_INT, INTG, 0);
    add("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, V_UINT, INTG, 0);
    add("MPI_FLOAT", MPI_FLOAT, V_FLT, G_ARITH, 0);
    add("MPI_DOUBLE", MPI_DOUBLE, V_FLT, G_ARITH, 0);
    add("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, V_FLT, G_ARITH, 1);
    add("MPI_INT8_T", MPI_INT8_T, V_INT, INTG, 0);
    add("MPI_INT16_T", MPI_INT16_T, V_INT, INTG, 0);
    add("MPI_INT32_T", MPI_INT32_T, V_INT, INTG, 0);
    add("MPI_INT64_T", MPI_INT64_T, V_INT, INTG, 0);
    add("MPI_UINT8_T", MPI_UINT8_T, V_UINT, INTG, 0);
    add("MPI_UINT16_T", MPI_UINT16_T, V_UINT, INTG, 0);
    add("MPI_UINT32_T", MPI_UINT32_T, V_UINT, INTG, 0);
    add("MPI_UINT64_T", MPI_UINT64_T, V_UINT, INTG, 0);
    add("MPI_AINT", MPI_AINT, V_INT, INTG, 0);
    add("MPI_OFFSET", MPI_OFFSET, V_INT, INTG, 0);
    add("MPI_COUNT", MPI_COUNT, V_INT, INTG, 0);
    add("MPI_C_BOOL", MPI_C_BOOL, V_BOOL, G_LOGIC, 0);
    add("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, V_CPLX, G_CPLX, 0);
    add("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, V_CPLX, G_CPLX, 0);
    add("MPI_C_LONG_DOUBLE_COMPLEX", MPI_C_LONG_DOUBLE_COMPLEX, V_CPLX, G_CPLX, 1);
    add("MPI_FLOAT_INT", MPI_FLOAT_INT, V_PAIR, G_LOC, 0);
    add("MPI_DOUBLE_INT", MPI_DOUBLE_INT, V_PAIR, G_LOC, 0);
    add("MPI_LONG_INT", MPI_LONG_INT, V_PAIR, G_LOC, 0);
    add("MPI_2INT", MPI_2INT, V_PAIR, G_LOC, 0);
    add("MPI_SHORT_INT", MPI_SHORT_INT, V_PAIR, G_LOC, 0);
    add("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, V_PAIR, G_LOC, 1);
    /* Derived: an int resized to 8 bytes of extent (holes), a vector of 3 blocks of 2 doubles
     * stride 3, 3 contiguous MPI_DOUBLE_INT (padded inside). Data movement only. */
    MPI_Datatype resized, vector, contig;
    MPI_Type_create_resized(MPI_INT, 0, 8, &resized);
    MPI_Type_vector(3, 2, 3, MPI_DOUBLE, &vector);
    MPI_Type_contiguous(3, MPI_DOUBLE_INT, &contig);
    MPI_Type_commit(&resized);
    MPI_Type_commit(&vector);
    MPI_Type_commit(&contig);
    add("resized(MPI_INT, 8)", resized, V_NONE, 0, 0);
    add("vector(3, 2, 3, MPI_DOUBLE)", vector, V_NONE, 0, 0);
    add("contiguous(3, MPI_DOUBLE_INT)", contig, V_NONE, 0, 0);
}

static const MPI_Op ops_arith[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
static const MPI_Op ops_bits[] = {MPI_BAND, MPI_BOR, MPI_BXOR};
static const MPI_Op ops_logic[] = {MPI_LAND, MPI_LOR, MPI_LXOR};
static const MPI_Op ops_loc[] = {MPI_MAXLOC, MPI_MINLOC};
static const MPI_Op ops_cplx[] = {MPI_SUM, MPI_PROD};

/* The `k`-th operation type `d` allows (rotating over all it allows). */
static MPI_Op op_of(const struct dtype *d, int k) {
    MPI_Op all[16];
    int n = 0;
#define TAKE(g, a)                                                           \
    if (d->groups & (g))                                                     \
        for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) all[n++] = a[i];
    TAKE(G_ARITH, ops_arith);
    TAKE(G_BITS, ops_bits);
    TAKE(G_LOGIC, ops_logic);
    TAKE(G_LOC, ops_loc);
    TAKE(G_CPLX, ops_cplx);
#undef TAKE
    return n ? all[k % n] : MPI_OP_NULL;
}

/* Value `v` (a small integer) into one element of `d` at `p`; the element's other bytes keep
 * whatever they held (padding never relied on). `idx` is a pair's index. */
static void put(const struct dtype *d, char *p, int v, int idx) {
    int size;
    MPI_Type_size(d->t, &size);
    MPI_Datatype t = d->t;
#define SET(T, x)     \
    do {              \
        T y = (T)(x); \
        memcpy(p, &y, sizeof y); \
    } while (0)
    switch (d->vk) {
    case V_INT:
    case V_UINT:
        if (d->vk == V_UINT && v < 0) v = -v;
        if (size == 1) SET(signed char, v);
        else if (size == 2) SET(short, v);
        else if (size == 4) SET(int, v);
        else SET(long long, v);
        break;
    case V_BYTE:
        SET(unsigned char, v * 37 + 11);
        break;
    case V_BOOL:
        SET(_Bool, v & 1);
        break;
    case V_FLT:
    case V_CPLX: {
        int parts = d->vk == V_CPLX ? 2 : 1;
        for (int q = 0; q < parts; q++) {
            int w = q ? v - 1 : v;
            if (t == MPI_FLOAT || t == MPI_C_FLOAT_COMPLEX) {
                SET(float, w);
                p += sizeof(float);
            } else if (t == MPI_DOUBLE || t == MPI_C_DOUBLE_COMPLEX) {
                SET(double, w);
                p += sizeof(double);
            } else {
                SET(long double, w);
                p += sizeof(long double);
            }
        }
        break;
    }
    case V_PAIR:
        if (t == MPI_FLOAT_INT) {
            SET(float, v);
            memcpy(p + sizeof(float), &idx, 4);
        } else if (t == MPI_DOUBLE_INT) {
            SET(double, v);
            memcpy(p + sizeof(double), &idx, 4);
        } else if (t == MPI_LONG_INT) {
            SET(long, v);
            memcpy(p + sizeof(long), &idx, 4);
        } else if (t == MPI_2INT) {
            SET(int, v);
            memcpy(p + sizeof(int), &idx, 4);
        } else if (t == MPI_SHORT_INT) {
            struct { short a; int b; } s;
            memcpy(&s, p, sizeof s);
            s.a = (short)v, s.b = idx;
            memcpy(p, &s, sizeof s);
        } else {
            struct { long double a; int b; } s;
            memcpy(&s, p, sizeof s);
            s.a = v, s.b = idx;
            memcpy(p, &s, sizeof s);
        }
        break;
    default:
        break;
    }
#undef SET
}

/* Fills `n` elements of `d` (extent apart) at `p` for rank `r`, cell `k`: random bytes for data
 * movement, exact small values for reductions (PROD: -1, 1, 2 only, so products stay exact). */
static void fill(const struct dtype *d, char *p, int n, int r, int k, int reduce, MPI_Op op) {
    MPI_Aint lb, extent;
    MPI_Type_get_extent(d->t, &lb, &extent);
    unsigned x = (unsigned)(k * 2654435761u + (unsigned)r * 40503u + 17u);
    for (MPI_Aint i = 0; i < (MPI_Aint)n * extent; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (char)(x >> 16);
    }
    if (!reduce) return;
    for (int i = 0; i < n; i++) {
        int v = (r * 7 + i * 3 + k) % 7 - 3;
        if (op == MPI_PROD) v = (r + i + k) % 3 == 0 ? 2 : (r + i) % 2 ? 1 : -1;
        put(d, p + (MPI_Aint)i * extent, v, r * 3 + i % 2);
    }
}

/* Whether outputs `a` and `b` (`n` elements of `d`) hold the same data: 1, 0, or -1 (a gap). */
static int same(const struct dtype *d, const void *a, const void *b, int n, MPI_Comm comm) {
    if (n == 0) return 1;
    int size = 0, qa = 0, qb = 0;
    if (MPI_Pack_size(n, d->t, comm, &size) != MPI_SUCCESS) return -1;
    char *pa = malloc((size_t)size + 1), *pb = malloc((size_t)size + 1);
    if (!pa || !pb || MPI_Pack(a, n, d->t, pa, size, &qa, comm) != MPI_SUCCESS ||
        MPI_Pack(b, n, d->t, pb, size, &qb, comm) != MPI_SUCCESS) {
        free(pa), free(pb);
        return -1;
    }
    int eq = qa == qb;
    if (eq && d->ld) {
        /* Long doubles in the packed stream: 16 bytes each, 10 of value; every element of these
         * types starts with one (a pair's index follows, a complex's second part at +16). */
        int tsize;
        MPI_Type_size(d->t, &tsize);
        for (int i = 0; i < qa; i++) {
            int off = i % tsize;
            if ((off % 16) >= 10 && off < (d->vk == V_PAIR ? 16 : tsize)) pa[i] = pb[i] = 0;
        }
    }
    eq = eq && memcmp(pa, pb, (size_t)qa) == 0;
    free(pa), free(pb);
    return eq;
}

/* ---- one cell ----------------------------------------------------------------------------- */

struct tally {
    long cells, passed, failed, gaps;
};

#define GUARD 64

/* Runs cell (`c`, `d`, `count`, `inplace`, `nb`) on `comm`; `k` numbers it (values, operation,
 * root). 1 passed, 0 failed, -1 gap. */
static int cell(enum call c, const struct dtype *d, int count, int inplace, int nb, MPI_Comm comm, int k, const char *cname) {
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    MPI_Aint lb, extent;
    MPI_Type_get_extent(d->t, &lb, &extent);
    int reduce = c == ALLREDUCE || c == REDUCE;
    MPI_Op op = reduce ? op_of(d, k / 7) : MPI_OP_NULL;
    int root = (k / 3) % n;
    /* Output elements and input elements per rank. */
    int out_n = c == ALLGATHER || c == ALLTOALL ? n * count : count;
    int in_n = c == ALLTOALL ? n * count : count;
    size_t out_bytes = (size_t)out_n * (size_t)extent + GUARD, in_bytes = (size_t)in_n * (size_t)extent + GUARD;
    char *in = malloc(in_bytes), *a = malloc(out_bytes), *b = malloc(out_bytes);
    if (!in || !a || !b) {
        fprintf(stderr, "matrix: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fill(d, in, in_n, me, k, reduce, op);
    memset(a, 0x5c, out_bytes);
    fill(d, a, out_n, me + 1000, k, 0, op); /* the output's prior contents: the same garbage in both */
    /* In place: the input is in the output buffer (at this rank's block for an allgather). */
    if (inplace) {
        MPI_Aint at = c == ALLGATHER ? (MPI_Aint)me * count * extent : 0;
        memcpy(a + at, in, (size_t)in_n * (size_t)extent);
    }
    memcpy(b, a, out_bytes);
    const void *sb = inplace ? MPI_IN_PLACE : in;
    /* MPI_IN_PLACE's ignored send count and type: given as -1 and MPI_DATATYPE_NULL. */
    int scount = inplace ? -1 : count;
    MPI_Datatype stype = inplace ? MPI_DATATYPE_NULL : d->t;
    /* MPICH 4.0.2's own MPI_Reduce with MPI_IN_PLACE at the root dies of SIGSEGV past a few KiB
     * (without the interposer too): the library computes nothing to compare with — a gap. */
    int tsize;
    MPI_Type_size(d->t, &tsize);
    if (mpich && c == REDUCE && inplace && (long)count * tsize > 4096) {
        fprintf(stderr, "matrix: %sreduce %s count %d in place on %s: gap (not run: MPICH's own dies on it)\n", nb ? "i" : "", d->name,
                count, cname);
        free(in), free(a), free(b);
        return -1;
    }
    if (getenv("MATRIX_TRACE"))
        fprintf(stderr, "matrix: cell %d: %s%s %s count %d%s on %s\n", k, nb ? "i" : "", call_names[c], d->name, count,
                inplace ? " in place" : "", cname);
    int ea = MPI_SUCCESS, eb = MPI_SUCCESS;
    MPI_Request r = MPI_REQUEST_NULL, rb = MPI_REQUEST_NULL;
    if (c == BCAST && me == root) memcpy(a, in, (size_t)count * (size_t)extent), memcpy(b, in, (size_t)count * (size_t)extent);
    switch (c) {
    case BCAST:
        eb = nb ? PMPI_Ibcast(b, count, d->t, root, comm, &rb) : PMPI_Bcast(b, count, d->t, root, comm);
        ea = nb ? MPI_Ibcast(a, count, d->t, root, comm, &r) : MPI_Bcast(a, count, d->t, root, comm);
        break;
    case ALLGATHER:
        eb = nb ? PMPI_Iallgather(sb, scount, stype, b, count, d->t, comm, &rb) : PMPI_Allgather(sb, scount, stype, b, count, d->t, comm);
        ea = nb ? MPI_Iallgather(sb, scount, stype, a, count, d->t, comm, &r) : MPI_Allgather(sb, scount, stype, a, count, d->t, comm);
        break;
    case ALLREDUCE:
        eb = nb ? PMPI_Iallreduce(sb, b, count, d->t, op, comm, &rb) : PMPI_Allreduce(sb, b, count, d->t, op, comm);
        ea = nb ? MPI_Iallreduce(sb, a, count, d->t, op, comm, &r) : MPI_Allreduce(sb, a, count, d->t, op, comm);
        break;
    case REDUCE: {
        /* In place only at the root; elsewhere the send buffer. */
        const void *rs = inplace && me == root ? MPI_IN_PLACE : in;
        if (inplace && me != root) memcpy(b, a, out_bytes);
        eb = nb ? PMPI_Ireduce(rs, b, count, d->t, op, root, comm, &rb) : PMPI_Reduce(rs, b, count, d->t, op, root, comm);
        ea = nb ? MPI_Ireduce(rs, a, count, d->t, op, root, comm, &r) : MPI_Reduce(rs, a, count, d->t, op, root, comm);
        break;
    }
    case ALLTOALL:
        eb = nb ? PMPI_Ialltoall(sb, scount, stype, b, count, d->t, comm, &rb) : PMPI_Alltoall(sb, scount, stype, b, count, d->t, comm);
        ea = nb ? MPI_Ialltoall(sb, scount, stype, a, count, d->t, comm, &r) : MPI_Alltoall(sb, scount, stype, a, count, d->t, comm);
        break;
    default:
        eb = nb ? PMPI_Ibarrier(comm, &rb) : PMPI_Barrier(comm);
        ea = nb ? MPI_Ibarrier(comm, &r) : MPI_Barrier(comm);
    }
    if (nb && ea == MPI_SUCCESS) ea = MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (nb && eb == MPI_SUCCESS) eb = PMPI_Wait(&rb, MPI_STATUS_IGNORE);
    int ok;
    int ca = MPI_SUCCESS, cb = MPI_SUCCESS;
    if (ea != MPI_SUCCESS) MPI_Error_class(ea, &ca);
    if (eb != MPI_SUCCESS) MPI_Error_class(eb, &cb);
    if (cb != MPI_SUCCESS && ca == MPI_SUCCESS) {
        ok = -1; /* the library refused a correct call (MPICH: large in-place alltoalls of padded
                  * types): nothing to compare with */
    } else if (ca != cb) {
        ok = 0;
    } else if (cb != MPI_SUCCESS || c == BARRIER || (c == REDUCE && me != root)) {
        ok = 1; /* both refused alike, or nothing to compare here */
    } else {
        ok = same(d, a, b, out_n, comm);
        if (ok == 1 && memcmp(a + out_bytes - GUARD, b + out_bytes - GUARD, GUARD) != 0) ok = 0; /* wrote past the output */
    }
    if (ok != 1)
        fprintf(stderr, "matrix: %s%s %s count %d%s on %s (op %d, root %d): %s (classes %d / library %d)\n", nb ? "i" : "",
                call_names[c], d->name, count, inplace ? " in place" : "", cname, k, root, ok ? "gap (not compared)" : "FAILED", ca, cb);
    free(in), free(a), free(b);
    return ok;
}

/* ---- the matrix over a set of communicators ------------------------------------------------ */

struct run {
    MPI_Comm comms[2];
    const char *names[2];
    struct tally t;
};

/* Counts of the cells: 0, 1, odd, past the fragment size (> 8 KiB of data). */
static int count_of(int j, const struct dtype *d) {
    int size;
    MPI_Type_size(d->t, &size);
    const int fixed[3] = {0, 1, 7};
    return j < 3 ? fixed[j] : 8200 / (size ? size : 1) + 1;
}

static void *run_cells(void *arg) {
    struct run *run = arg;
    int k = 0;
    for (int ci = 0; ci < 2; ci++) {
        MPI_Comm comm = run->comms[ci];
        if (comm == MPI_COMM_NULL) continue;
        for (int c = 0; c < NCALLS; c++)
            for (int nb = 0; nb < 2; nb++)
                for (int ti = 0; ti < (c == BARRIER ? 1 : ntypes); ti++) {
                    const struct dtype *d = &types[ti];
                    int reduce = c == ALLREDUCE || c == REDUCE;
                    if (reduce && !d->groups) continue; /* no operation is defined on it */
                    for (int j = 0; j < (c == BARRIER ? 1 : 4); j++)
                        for (int ip = 0; ip < (c == BCAST || c == BARRIER ? 1 : 2); ip++) {
                            int r = cell((enum call)c, d, count_of(j, d), ip, nb, comm, k++, run->names[ci]);
                            run->t.cells++;
                            if (r == 1) run->t.passed++;
                            else if (r == 0) run->t.failed++;
                            else run->t.gaps++;
                        }
                }
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *level = argc > 1 ? argv[1] : "single";
    int want = strcmp(level, "multiple") == 0 ? MPI_THREAD_MULTIPLE : strcmp(level, "funneled") == 0 ? MPI_THREAD_FUNNELED : MPI_THREAD_SINGLE;
    int provided = MPI_THREAD_SINGLE, rank, size;
    if (want == MPI_THREAD_SINGLE) MPI_Init(&argc, &argv);
    else MPI_Init_thread(&argc, &argv, want, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (want != MPI_THREAD_SINGLE && provided < want) {
        if (rank == 0) printf("SKIP: matrix %s: the library grants thread level %d\n", level, provided);
        MPI_Finalize();
        return 0;
    }
    make_types();
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int vlen = 0;
    MPI_Get_library_version(version, &vlen);
    mpich = strstr(version, "MPICH") != NULL;
    /* The communicators (made through the interposer, which follows them). */
    MPI_Comm dup, split, uneven;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &split);
    MPI_Comm_split(MPI_COMM_WORLD, rank == 1 ? MPI_UNDEFINED : 0, rank, &uneven);
    MPI_Comm all[4] = {MPI_COMM_WORLD, dup, split, uneven};
    for (int i = 0; i < 4; i++)
        if (all[i] != MPI_COMM_NULL) MPI_Comm_set_errhandler(all[i], MPI_ERRORS_RETURN);
    long long before[3] = {0, 0, 0}, after[3] = {0, 0, 0};
    if (ringcast_mpi_paths) ringcast_mpi_paths(before);
    struct run runs[2] = {{{MPI_COMM_WORLD, uneven}, {"world", "uneven"}, {0, 0, 0, 0}},
                          {{dup, split}, {"dup", "split"}, {0, 0, 0, 0}}};
    if (want == MPI_THREAD_MULTIPLE) {
        /* Two threads calling at once, each on its own communicators. */
        pthread_t th;
        pthread_create(&th, NULL, run_cells, &runs[1]);
        run_cells(&runs[0]);
        pthread_join(th, NULL);
    } else {
        run_cells(&runs[0]);
        run_cells(&runs[1]);
    }
    if (ringcast_mpi_paths) ringcast_mpi_paths(after);
    long local[7] = {runs[0].t.cells + runs[1].t.cells, runs[0].t.passed + runs[1].t.passed, runs[0].t.failed + runs[1].t.failed,
                     runs[0].t.gaps + runs[1].t.gaps, (long)(after[0] - before[0]), (long)(after[1] - before[1]),
                     (long)(after[2] - before[2])};
    long bad[2] = {local[2], local[3]}, sum_bad[2];
    PMPI_Allreduce(bad, sum_bad, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    /* Rank 0 is in every communicator: its cells and paths are the matrix's; failures and gaps
     * of every rank count. */
    if (rank == 0)
        printf("matrix %s np %d: %ld cells, %ld passed (at rank 0), %ld failed and %ld gaps (at any rank); offloaded %ld, packed %ld, "
               "pmpi %ld\n",
               level, size, local[0], local[1], sum_bad[0], sum_bad[1], local[4], local[5], local[6]);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&split);
    if (uneven != MPI_COMM_NULL) MPI_Comm_free(&uneven);
    MPI_Finalize();
    return sum_bad[0] ? 1 : 0; /* gaps are reported, and judged by the caller (mpi-matrix.sh) */
}
