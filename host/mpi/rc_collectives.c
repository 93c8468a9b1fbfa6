/* The intercepted collectives of libringcast_mpi.so: the standard's argument rules, one table per
 * collective, and the one path every call takes (docs/mpi.md, "The rules, call by call").
 *
 * Each MPI_X and MPI_IX fills the same `struct rc_args` and calls rc_call: the blocking form is
 * the non-blocking one plus a wait. rc_call applies the rules, one function each — where an
 * argument is significant (rc_significant), what MPI_IN_PLACE means (rc_in_place), which
 * arguments the library must judge (rc_invalid), the message every rank agrees on (rc_block),
 * what this communicator and this thread level allow (rc_comm_rule), the byte bounds — to the
 * collective's table row (RC_COLLS), and either offloads the call (stages or packs this rank's
 * part, posts the ringcast operation, unpacks the result at completion) or calls the PMPI
 * function. The decision between the two uses only what every rank of a correct program shares
 * (the communicator, the receive side's or the reduction's count x type size, the type and
 * operation of a reduction, the root), so all ranks take the same path and the collectives stay
 * matched; how each rank lays out its own data (copied or packed) is its own business. */
#include "rc_internal.h"

/* Where an argument is significant. */
enum rc_at { AT_NONE, AT_ALL, AT_ROOT };
/* Where the send buffer may be MPI_IN_PLACE: nowhere (erroneous: the library reports it), at
 * every rank (the send count and type then ignored), at the root only (elsewhere erroneous). */
enum rc_ip { IP_NONE, IP_ALL, IP_ROOT };
enum rc_kind { K_BCAST, K_ALLGATHER, K_ALLREDUCE, K_REDUCE, K_ALLTOALL, K_BARRIER };

/* One collective's row of the rule table (docs/mpi.md has the same table). */
struct rc_coll {
    const char *name, *iname;
    enum rc_kind kind;
    unsigned char send_at; /* the send side (sendbuf, sendcount, sendtype) */
    unsigned char recv_at; /* the receive side (recvbuf, recvcount, recvtype; MPI_Bcast's buffer) */
    unsigned char in_place;
    unsigned char rooted, reduces;
    unsigned char per_rank; /* the engine's message is one block per rank (size x block) */
};

static const struct rc_coll RC_COLLS[] = {
    [K_BCAST] = {"MPI_Bcast", "MPI_Ibcast", K_BCAST, AT_NONE, AT_ALL, IP_NONE, 1, 0, 0},
    [K_ALLGATHER] = {"MPI_Allgather", "MPI_Iallgather", K_ALLGATHER, AT_ALL, AT_ALL, IP_ALL, 0, 0, 1},
    [K_ALLREDUCE] = {"MPI_Allreduce", "MPI_Iallreduce", K_ALLREDUCE, AT_ALL, AT_ALL, IP_ALL, 0, 1, 1},
    [K_REDUCE] = {"MPI_Reduce", "MPI_Ireduce", K_REDUCE, AT_ALL, AT_ROOT, IP_ROOT, 1, 1, 1},
    [K_ALLTOALL] = {"MPI_Alltoall", "MPI_Ialltoall", K_ALLTOALL, AT_ALL, AT_ALL, IP_ALL, 0, 0, 1},
    [K_BARRIER] = {"MPI_Barrier", "MPI_Ibarrier", K_BARRIER, AT_NONE, AT_NONE, IP_NONE, 0, 0, 0},
};

/* A call's arguments as the program gave them. A reduction's one count and type are both
 * sides'; MPI_Bcast's buffer is the receive side. */
struct rc_args {
    const struct rc_coll *k;
    int nb; /* the non-blocking form */
    const void *sbuf;
    int scount;
    MPI_Datatype stype;
    void *rbuf;
    int rcount;
    MPI_Datatype rtype;
    MPI_Op op;
    int root;
    MPI_Comm comm;
    MPI_Request *request;
};

/* ---- the rules, one place each ------------------------------------------------------------ */

/* Whether an argument significant `at` is significant at rank `me`. */
static int rc_significant(const struct rc_args *a, int at, int me) { return at == AT_ALL || (at == AT_ROOT && me == a->root); }

/* MPI_IN_PLACE: 0 not used, 1 used where the standard allows it (the send count and type are
 * then ignored and never looked at), -1 used where it is erroneous but the call is still ours
 * to run in step (MPI_Reduce at a rank other than the root: a zeroed contribution, MPI_ERR_ARG).
 * Where it is erroneous and no rank's call could run (MPI_Bcast's buffer, a receive buffer),
 * rc_invalid sends the call to the library. */
static int rc_in_place(const struct rc_args *a, int me) {
    if (a->k->in_place == IP_NONE || a->sbuf != MPI_IN_PLACE) return 0;
    return a->k->in_place == IP_ALL || me == a->root ? 1 : -1;
}

/* Why the library must judge the call (it checks before communicating and answers with its own
 * error class through the communicator's handler), or NULL. Only significant arguments are
 * looked at: an ignored send type may be MPI_DATATYPE_NULL, a root's receive buffer elsewhere
 * anything. */
static const char *rc_invalid(const struct rc_args *a, int me, int size) {
    if (a->nb && !a->request) return "no request handle";
    if (a->k->rooted && (a->root < 0 || a->root >= size)) return "root outside the communicator";
    if (a->k->reduces && a->op == MPI_OP_NULL) return "MPI_OP_NULL";
    if (rc_significant(a, a->k->recv_at, me) &&
        (a->rcount < 0 || a->rtype == MPI_DATATYPE_NULL || a->rbuf == MPI_IN_PLACE))
        return "receive side: negative count, null type or MPI_IN_PLACE";
    if (a->k->kind == K_REDUCE && (a->rcount < 0 || a->rtype == MPI_DATATYPE_NULL)) return "negative count or null type";
    if (rc_significant(a, a->k->send_at, me) && !rc_in_place(a, me) && a->sbuf != MPI_IN_PLACE &&
        (a->scount < 0 || a->stype == MPI_DATATYPE_NULL))
        return "send side: negative count or null type";
    if (a->k->in_place == IP_NONE && a->sbuf == MPI_IN_PLACE) return "MPI_IN_PLACE where the call has none";
    return NULL;
}

/* The bytes of one rank's block (MPI_Bcast: of the message) that every rank agrees on: the
 * receive side's type signature (the same at every rank of a correct program), or a
 * reduction's count x type size. */
static long long rc_block(const struct rc_args *a) {
    int size = 0;
    if (a->k->kind == K_BARRIER || PMPI_Type_size(a->rtype, &size) != MPI_SUCCESS) return 0;
    return (long long)a->rcount * size;
}

/* The communicator's part of the rule: NULL (offload), or why not. At MPI_THREAD_MULTIPLE only
 * MPI_COMM_WORLD is offloaded: the engines today serve the collectives of one node's processes
 * in one order across communicators, and two threads calling collectives on two offloaded
 * communicators could give two processes of a node two orders (docs/mpi.md, Limits). */
static const char *rc_comm_rule(const struct rc_comm *c, MPI_Comm comm) {
    if (!c->handle) return "auto: the communicator spans too few engines";
    if (c->size < 2) return "a single rank";
    if (rc_threaded && comm != MPI_COMM_WORLD) return "MPI_THREAD_MULTIPLE: only MPI_COMM_WORLD is offloaded";
    return NULL;
}

/* ---- the library's path ------------------------------------------------------------------- */

/* The library's own barrier, waited for with this rank's engine progressing: with the engine a
 * thread of this process (thread mode), a root that left MPI_Bcast at once still owes its
 * broadcast's sending, and nobody runs the engine while the rank waits in a barrier — osu_bcast
 * puts one before every broadcast. Measured (np 2, RINGCAST_MPI_NODES=2, mpi-bcast-bench): 8 KiB
 * 217 µs with the plain PMPI_Barrier (the engine thread resumes only after the hand-back delay,
 * docs/performance.md). */
static int rc_pmpi_barrier(MPI_Comm comm) {
    MPI_Request r;
    int rc = PMPI_Ibarrier(comm, &r);
    for (int flag = 0, polls = 0; rc == MPI_SUCCESS && !flag; polls++) {
        rc = PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS && !flag) {
            ringcast_progress();
            rc_poll();
            /* The ranks this does not run an engine for (not the node's first, or beside a
             * daemon) give the CPU away now and then on an oversubscribed node. */
            if (polls >= 64) sched_yield();
        }
    }
    return rc;
}

/* The call, as the program made it, to the library. */
static int rc_pmpi(const struct rc_args *a) {
    const void *s = a->sbuf;
    void *r = a->rbuf;
    switch (a->k->kind) {
    case K_BCAST:
        return a->nb ? PMPI_Ibcast(r, a->rcount, a->rtype, a->root, a->comm, a->request)
                     : PMPI_Bcast(r, a->rcount, a->rtype, a->root, a->comm);
    case K_ALLGATHER:
        return a->nb ? PMPI_Iallgather(s, a->scount, a->stype, r, a->rcount, a->rtype, a->comm, a->request)
                     : PMPI_Allgather(s, a->scount, a->stype, r, a->rcount, a->rtype, a->comm);
    case K_ALLREDUCE:
        return a->nb ? PMPI_Iallreduce(s, r, a->rcount, a->rtype, a->op, a->comm, a->request)
                     : PMPI_Allreduce(s, r, a->rcount, a->rtype, a->op, a->comm);
    case K_REDUCE:
        return a->nb ? PMPI_Ireduce(s, r, a->rcount, a->rtype, a->op, a->root, a->comm, a->request)
                     : PMPI_Reduce(s, r, a->rcount, a->rtype, a->op, a->root, a->comm);
    case K_ALLTOALL:
        return a->nb ? PMPI_Ialltoall(s, a->scount, a->stype, r, a->rcount, a->rtype, a->comm, a->request)
                     : PMPI_Alltoall(s, a->scount, a->stype, r, a->rcount, a->rtype, a->comm);
    default:
        return a->nb ? PMPI_Ibarrier(a->comm, a->request) : rc_pmpi_barrier(a->comm);
    }
}

/* ---- the offloaded path ------------------------------------------------------------------- */

/* This rank's part of an offloaded call: what goes into the stage, where, and what comes out. */
struct rc_plan {
    const void *in;  /* NULL: nothing of this rank's goes in (a broadcast's receiver) */
    int in_count;
    MPI_Datatype in_type;
    size_t in_at, in_bytes;
    int zeroed;      /* an erroneous part posted as zeros (fail says why) */
    int fail;
    struct rc_out out;
    size_t stage;    /* staging buffer bytes */
    size_t send_at;  /* an alltoall's send buffer in the stage */
};

/* The plan of call `a` at rank `me` of `size`, one block being `block` bytes. */
static void rc_plan_of(const struct rc_args *a, int me, int size, size_t block, struct rc_plan *p) {
    size_t whole = block * (size_t)size;
    int ip = rc_in_place(a, me);
    memset(p, 0, sizeof *p);
    p->out.comm = a->comm;
    p->in_type = a->stype;
    p->in_count = a->scount;
    p->in = a->sbuf;
    p->in_bytes = block;
    switch (a->k->kind) {
    case K_BCAST:
        p->stage = block;
        p->in = me == a->root ? a->rbuf : NULL;
        p->in_count = a->rcount;
        p->in_type = a->rtype;
        if (me != a->root) p->out = (struct rc_out){a->rbuf, a->rcount, a->rtype, 0, 0, block, a->comm};
        return;
    case K_ALLGATHER:
        p->stage = whole;
        p->in_at = (size_t)me * block;
        if (ip) {
            MPI_Aint lb, extent;
            PMPI_Type_get_extent(a->rtype, &lb, &extent);
            p->in = (const char *)a->rbuf + (MPI_Aint)me * a->rcount * extent;
            p->in_count = a->rcount;
            p->in_type = a->rtype;
        }
        p->out = (struct rc_out){a->rbuf, size * a->rcount, a->rtype, 0, 0, whole, a->comm};
        break;
    case K_ALLREDUCE:
    case K_REDUCE:
        p->stage = whole;
        p->in_at = (size_t)me * block;
        p->in_count = a->rcount; /* one count and type for both sides */
        p->in_type = a->rtype;
        if (ip > 0) p->in = a->rbuf;
        if (ip < 0) p->zeroed = 1, p->fail = MPI_ERR_ARG, p->in = NULL;
        if (a->k->kind == K_ALLREDUCE || me == a->root) p->out = (struct rc_out){a->rbuf, a->rcount, a->rtype, 0, 0, block, a->comm};
        return;
    case K_ALLTOALL:
        p->send_at = whole * ((size_t)size + 1);
        p->stage = p->send_at + whole;
        p->in_at = p->send_at;
        p->in_bytes = whole;
        if (ip) {
            p->in = a->rbuf;
            p->in_count = size * a->rcount;
            p->in_type = a->rtype;
        } else {
            p->in_count = size * a->scount;
        }
        p->out = (struct rc_out){a->rbuf, size * a->rcount, a->rtype, 0, 0, whole, a->comm};
        break;
    default:
        return;
    }
    /* A send side whose signature differs in bytes from the receive side's (erroneous): posted
     * as zeros, so no rank is left waiting for this one's part, and failed here. */
    if (!ip) {
        int ss = 0;
        PMPI_Type_size(a->stype, &ss);
        if ((long long)a->scount * ss != (long long)block) p->zeroed = 1, p->fail = MPI_ERR_TRUNCATE, p->in = NULL;
    }
}

/* Posts the ringcast operation of call `a` on staged `stage`. */
static int rc_post(const struct rc_args *a, struct rc_comm *c, RingcastBuf *stage, const struct rc_plan *p, size_t block, uint8_t t,
                   uint8_t o, uint64_t *id) {
    switch (a->k->kind) {
    case K_BCAST:
        return ringcast_ibcast(c->handle, (uint32_t)a->root, stage, 0, block, id);
    case K_ALLGATHER:
        return ringcast_iallgather(c->handle, NULL, 0, stage, 0, block, id);
    case K_ALLREDUCE:
        return ringcast_iallreduce(c->handle, NULL, 0, stage, 0, block, t, o, id);
    case K_REDUCE:
        return ringcast_ireduce(c->handle, (uint32_t)a->root, NULL, 0, stage, 0, block, t, o, id);
    case K_ALLTOALL:
        return ringcast_ialltoall(c->handle, stage, p->send_at, stage, 0, block, id);
    default:
        return ringcast_ibarrier(c->handle, id);
    }
}

/* Every intercepted collective: the rules, then the library's path or ours. */
static int rc_call(const struct rc_args *a) {
    const struct rc_coll *k = a->k;
    const char *name = a->nb ? k->iname : k->name;
    char why[160] = "";
    rc_poll();
    struct rc_comm *c = rc_of(a->comm);
    int me = -1, size = 0;
    long long block = -1;
    const char *pmpi = NULL;
    uint8_t t = 0, o = 0;
    if (!c) {
        pmpi = rc_up ? "communicator not followed (inter-communicator, or made by a call not intercepted)" : rc_off;
    } else {
        PMPI_Comm_rank(a->comm, &me);
        size = c->size;
        const char *invalid = rc_invalid(a, me, size);
        if (invalid) {
            if (rc_verbose) snprintf(why, sizeof why, "invalid arguments (%s): the library reports them", invalid);
            pmpi = why;
        } else if (!(pmpi = rc_comm_rule(c, a->comm))) {
            block = rc_block(a);
            long long total = k->kind == K_ALLTOALL || k->per_rank ? block * size : block;
            if (k->reduces && !rc_reduction(a->rtype, a->op, &t, &o))
                pmpi = "datatype or operation not offloaded";
            else if (k->kind != K_BARRIER && (block < rc_min_bytes || total > rc_max_bytes))
                pmpi = "outside the byte bounds (an empty message is the library's)";
        }
    }
    if (pmpi) {
        rc_count_path(RC_PATH_PMPI);
        if (rc_verbose) say(name, block, k->rooted ? a->root : -1, "pmpi (%s)", pmpi);
        return rc_pmpi(a);
    }

    struct rc_plan p;
    rc_plan_of(a, me, size, (size_t)block, &p);
    struct rc_op *op = calloc(1, sizeof *op);
    if (!op) {
        say(name, block, a->root, "failed (out of memory)");
        return rc_error(a->comm, MPI_ERR_NO_MEM);
    }
    /* Copied where a side is a run of bytes, packed where not. */
    int in_run = p.in ? rc_type_run(p.in_type) : 1;
    p.out.run = p.out.buf ? rc_type_run(p.out.type) : 1;
    /* In place where the engine reaches this process's memory by DMA: a blocking broadcast of
     * one run, the user's buffer registered (cached) instead of a staging copy. */
    RingcastBuf *stage = NULL;
    RC_LOCK();
    if (k->kind == K_BCAST && !a->nb && in_run && p.out.run && a->rbuf != MPI_BOTTOM) {
        stage = rc_wrap_get(a->rbuf, (size_t)block);
        op->wrapped = stage != NULL;
    }
    if (!stage && p.stage) stage = rc_buf_get(p.stage, &op->stage_len);
    RC_UNLOCK();
    if (!stage && p.stage) {
        free(op);
        say(name, block, a->root, "failed (no staging buffer)");
        return rc_error(a->comm, MPI_ERR_NO_MEM);
    }
    int packed = !in_run || !p.out.run;
    rc_count_path(packed ? RC_PATH_PACKED : RC_PATH_OFFLOADED);
    if (stage && !op->wrapped) {
        uint8_t *at = (uint8_t *)ringcast_buf_ptr(stage) + p.in_at;
        if (p.in && rc_pack(p.in, p.in_count, p.in_type, in_run, at, p.in_bytes, a->comm) != MPI_SUCCESS)
            p.zeroed = 1, p.fail = MPI_ERR_TRUNCATE;
        if (p.zeroed) memset(at, 0, p.in_bytes); /* never stale bytes */
    }
    if (p.fail || op->wrapped) p.out.buf = NULL;
    /* A non-blocking call's derived type may be freed by the program before completion. */
    if (a->nb && p.out.buf && !p.out.run && PMPI_Type_dup(p.out.type, &p.out.type) == MPI_SUCCESS) p.out.dup = 1;
    op->greq = MPI_REQUEST_NULL; /* until rc_op_request makes one (not 0 in Open MPI) */
    op->stage = stage;
    op->c = c;
    op->comm = a->comm;
    op->out = p.out;
    op->bytes = k->kind == K_BCAST ? (size_t)block : p.out.bytes;
    op->fail = p.fail;
    op->blocking = !a->nb;
    op->handing = a->nb && !p.fail; /* a request follows: rc_op_request completes it */
    const char *how = op->wrapped ? "in place" : packed ? "packed" : "staged";
    int rc = rc_post(a, c, stage, &p, (size_t)block, t, o, &op->id);
    if (rc != RINGCAST_OK) {
        RC_LOCK();
        if (!op->wrapped) rc_buf_put(stage, op->stage_len);
        RC_UNLOCK();
        if (op->out.dup) PMPI_Type_free(&op->out.type);
        free(op);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: %s failed: %s\n", rc_world_rank, name, ringcast_strerror(rc));
        return rc_error(a->comm, rc_class(rc));
    }
    rc_op_track(op); /* from here another thread may finish `op` (and free a background one) */
    if (!a->nb) {
        int err = rc_op_wait(op);
        rc_op_release(op);
        if (err != MPI_SUCCESS) {
            say(name, block, a->root, "failed (%s)", p.fail == MPI_ERR_ARG ? "MPI_IN_PLACE at a rank other than the root"
                                                     : p.fail ? "send and receive sides differ in bytes" : "the engine");
            return rc_error(a->comm, err);
        }
        say(name, block, k->rooted ? a->root : -1, "offloaded (%s)", how);
        return MPI_SUCCESS;
    }
    if (p.fail) {
        /* Posted (the others get zeros), finished in the background, failed here. */
        say(name, block, a->root, "failed (%s)", p.fail == MPI_ERR_ARG ? "MPI_IN_PLACE at a rank other than the root"
                                                                        : "send and receive sides differ in bytes");
        return rc_error(a->comm, p.fail);
    }
    int made = rc_op_request(op, a->comm, a->request);
    if (made == MPI_SUCCESS) say(name, block, k->rooted ? a->root : -1, "offloaded (%s)", how);
    return made;
}

/* ---- the intercepted calls ---------------------------------------------------------------- */

#define ARGS(kind, nb_) .k = &RC_COLLS[kind], .nb = (nb_)

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    struct rc_args a = {ARGS(K_BCAST, 0), .rbuf = buffer, .rcount = count, .rtype = datatype, .root = root, .comm = comm};
    return rc_call(&a);
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request) {
    struct rc_args a = {ARGS(K_BCAST, 1), .rbuf = buffer, .rcount = count, .rtype = datatype, .root = root, .comm = comm,
                        .request = request};
    return rc_call(&a);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  MPI_Comm comm) {
    struct rc_args a = {ARGS(K_ALLGATHER, 0), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, MPI_OP_NULL, 0, comm, NULL};
    return rc_call(&a);
}

int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                   MPI_Comm comm, MPI_Request *request) {
    struct rc_args a = {ARGS(K_ALLGATHER, 1), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, MPI_OP_NULL, 0, comm, request};
    return rc_call(&a);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 MPI_Comm comm) {
    struct rc_args a = {ARGS(K_ALLTOALL, 0), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, MPI_OP_NULL, 0, comm, NULL};
    return rc_call(&a);
}

int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  MPI_Comm comm, MPI_Request *request) {
    struct rc_args a = {ARGS(K_ALLTOALL, 1), sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, MPI_OP_NULL, 0, comm, request};
    return rc_call(&a);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    struct rc_args a = {ARGS(K_ALLREDUCE, 0), sendbuf, count, datatype, recvbuf, count, datatype, op, 0, comm, NULL};
    return rc_call(&a);
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    struct rc_args a = {ARGS(K_ALLREDUCE, 1), sendbuf, count, datatype, recvbuf, count, datatype, op, 0, comm, request};
    return rc_call(&a);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
    struct rc_args a = {ARGS(K_REDUCE, 0), sendbuf, count, datatype, recvbuf, count, datatype, op, root, comm, NULL};
    return rc_call(&a);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request *request) {
    struct rc_args a = {ARGS(K_REDUCE, 1), sendbuf, count, datatype, recvbuf, count, datatype, op, root, comm, request};
    return rc_call(&a);
}

int MPI_Barrier(MPI_Comm comm) {
    if (!rc_up) return PMPI_Barrier(comm);
    struct rc_args a = {ARGS(K_BARRIER, 0), .comm = comm};
    return rc_call(&a);
}

int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    struct rc_args a = {ARGS(K_BARRIER, 1), .comm = comm, .request = request};
    return rc_call(&a);
}
