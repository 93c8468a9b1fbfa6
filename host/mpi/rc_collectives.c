/* The intercepted collectives of libringcast_mpi.so: each decides its path (a rule using only
 * values every rank of the communicator shares, so all take the same one), stages or registers
 * the user's buffers, posts the ringcast operation and polls it with the library's progress in
 * between — or calls the PMPI function. MPI_Bcast/MPI_Ibcast, MPI_Barrier/MPI_Ibarrier,
 * MPI_Allgather/MPI_Iallgather, MPI_Alltoall/MPI_Ialltoall, MPI_Allreduce/MPI_Iallreduce,
 * MPI_Reduce/MPI_Ireduce; docs/mpi.md. The machinery they share (records, staging, operations in
 * flight, completion calls) is in ringcast_mpi.c. */
#include "rc_internal.h"

/* The path of a broadcast: its record when offloaded (NULL for PMPI), with the reason for the
 * verbose line in `why`. Depends only on values every rank of `comm` shares in a correct
 * program, so every rank decides the same. `invalid` is set for arguments the library must
 * judge. */
static struct rc_comm *rc_decide(void *buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, long long *bytes, char *why,
                                 size_t whylen) {
    /* `why` is only for RINGCAST_MPI_VERBOSE: formatting it on every call would cost the
     * pass-through a few hundred nanoseconds. */
#define WHY(...)                                             \
    do {                                                     \
        if (rc_verbose) snprintf(why, whylen, __VA_ARGS__); \
    } while (0)
    struct rc_comm *c = rc_of(comm);
    *bytes = -1;
    if (!c) {
        WHY("pmpi (%s)", rc_up ? "communicator not followed (inter-communicator, or made by a call not intercepted)" : rc_off);
        return NULL;
    }
    /* Bad arguments go to the library itself: it checks them before communicating and answers
     * with its own error class (Open MPI: MPI_ERR_ROOT, MPI_ERR_COUNT, MPI_ERR_ARG for
     * MPI_IN_PLACE), raised through the communicator's error handler. */
    if (root < 0 || root >= c->size || count < 0 || buffer == MPI_IN_PLACE || type == MPI_DATATYPE_NULL) {
        WHY("pmpi (invalid arguments: the library reports them)");
        return NULL;
    }
    if (!c->handle) {
        WHY("pmpi (auto: the communicator spans %d engine(s), fewer than %d)", c->engines, rc_min_engines);
        return NULL;
    }
    *bytes = rc_bytes(count, type);
    if (*bytes < 0) {
        WHY("pmpi (datatype not contiguous)");
        return NULL;
    }
    if (*bytes < rc_min_bytes || *bytes > rc_max_bytes || c->size < 2) {
        WHY("pmpi (outside %lld..%lld bytes, or a single rank)", rc_min_bytes, rc_max_bytes);
        return NULL;
    }
    WHY("offloaded (%s: %d engine(s), %lld..%lld bytes)", rc_mode == RC_ALWAYS ? "always" : "auto", c->engines, rc_min_bytes,
             rc_max_bytes);
    return c;
#undef WHY
}

/* The blocking broadcast: the rule (rc_decide) picks the path; offloaded, it stages, posts,
 * polls and copies out. */
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    char why[192];
    why[0] = '\0';
    long long bytes;
    rc_poll();
    struct rc_comm *c = rc_decide(buffer, count, datatype, root, comm, &bytes, why, sizeof why);
    if (!c) {
        say("MPI_Bcast", bytes, root, "%s", why);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    size_t len = 0;
    /* In place where the engine reaches this process's memory by DMA; else staged. Either way
     * the same ringcast broadcast: the ranks need not agree on it. */
    RingcastBuf *wrapped = rc_wrap_get(buffer, (size_t)bytes);
    RingcastBuf *stage = wrapped ? wrapped : rc_buf_get((size_t)bytes, &len);
    if (!stage) {
        /* Every rank must take the same path: a rank without memory cannot fall back alone. */
        say("MPI_Bcast", bytes, root, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    int me;
    PMPI_Comm_rank(comm, &me);
    uint8_t *p = ringcast_buf_ptr(stage);
    if (me == root && !wrapped) memcpy(p, buffer, (size_t)bytes);
    /* Posted, then polled with the MPI library's progress in between rather than waited for in
     * the engine: a blocking collective must not stop this rank's pending point-to-point
     * requests from progressing (MPI's progress rule), other MPI_Ibcasts of ours progress too,
     * and on an oversubscribed node polling with sched_yield answers sooner than sleeping on the
     * engine's doorbell (docs/performance.md). */
    uint64_t id = 0;
    int rc = ringcast_ibcast(c->handle, (uint32_t)root, stage, 0, (size_t)bytes, &id);
    rc = rc_await(rc, id);
    if (wrapped) {
        if (rc != RINGCAST_OK) rc_wrap_drop(wrapped);
    } else {
        if (rc == RINGCAST_OK && me != root) memcpy(buffer, p, (size_t)bytes);
        rc_buf_put(stage, len);
    }
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Bcast failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    say("MPI_Bcast", bytes, root, "%s%s", why, wrapped ? ", in place" : ", staged");
    return MPI_SUCCESS;
}

/* The barrier's path: its record when offloaded (NULL for PMPI, the reason in `why`): every
 * barrier on a communicator ringcast runs (the same at every rank of it). */
static struct rc_comm *rc_decide_barrier(MPI_Comm comm, char *why, size_t whylen) {
    struct rc_comm *c = rc_of(comm);
    if (!c) {
        if (rc_verbose)
            snprintf(why, whylen, "pmpi (%s)", rc_up ? "communicator not followed (inter-communicator, or made by a call not intercepted)" : rc_off);
        return NULL;
    }
    if (!c->handle || c->size < 2) {
        if (rc_verbose) snprintf(why, whylen, "pmpi (auto: the communicator spans %d engine(s), fewer than %d, or one rank)", c->engines, rc_min_engines);
        return NULL;
    }
    if (rc_verbose) snprintf(why, whylen, "offloaded (%s: %d engine(s))", rc_mode == RC_ALWAYS ? "always" : "auto", c->engines);
    return c;
}

/* The library's own barrier, waited for with this rank's engine progressing: with the engine
 * a thread of this process (thread mode), a root that left MPI_Bcast at once still owes its
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

/* The barrier: offloaded on a communicator ringcast runs (the engines' synchronization tree,
 * each engine joining once its node's ranks all arrived), else the library's, progressing. */
int MPI_Barrier(MPI_Comm comm) {
    if (!rc_up) return PMPI_Barrier(comm);
    char why[192];
    why[0] = '\0';
    rc_poll();
    struct rc_comm *c = rc_decide_barrier(comm, why, sizeof why);
    if (!c) {
        say("MPI_Barrier", 0, -1, "%s", why);
        return rc_pmpi_barrier(comm);
    }
    uint64_t id = 0;
    int rc = ringcast_ibarrier(c->handle, &id);
    rc = rc_await(rc, id);
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Barrier failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    say("MPI_Barrier", 0, -1, "%s", why);
    return MPI_SUCCESS;
}

/* The non-blocking barrier: the same path, a generalized request. */
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    rc_poll();
    struct rc_comm *c = request ? rc_decide_barrier(comm, why, sizeof why) : NULL;
    if (!c) {
        say("MPI_Ibarrier", 0, -1, "%s", request ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Ibarrier(comm, request);
    }
    struct rc_op *op = calloc(1, sizeof *op);
    if (!op) {
        say("MPI_Ibarrier", 0, -1, "failed (out of memory)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    op->c = c;
    op->comm = comm;
    op->root_here = 1; /* nothing to copy out */
    int rc = ringcast_ibarrier(c->handle, &op->id);
    if (rc != RINGCAST_OK) {
        free(op);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Ibarrier failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(op);
    int made = rc_op_request(op, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Ibarrier", 0, -1, "%s", why);
    return made;
}

/* The allgather's path: its record when offloaded (NULL for PMPI, the reason in `why`), under
 * the broadcast's rule applied to the receive side (count x type of one block, the same at every
 * rank of a correct program): only values every rank shares decide, so all take one path. */
static struct rc_comm *rc_decide_gather(void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, long long *block,
                                        char *why, size_t whylen) {
    struct rc_comm *c = rc_of(comm);
    const char *pmpi = NULL;
    *block = -1;
    if (!c) {
        pmpi = rc_up ? "pmpi (communicator not followed)" : rc_off;
    } else if (recvcount < 0 || recvtype == MPI_DATATYPE_NULL || recvbuf == MPI_IN_PLACE) {
        pmpi = "pmpi (invalid arguments: the library reports them)";
    } else if (!c->handle) {
        pmpi = "pmpi (auto: the communicator spans too few engines)";
    } else if ((*block = rc_bytes(recvcount, recvtype)) < 0) {
        pmpi = "pmpi (datatype not contiguous)";
    } else if (*block < rc_min_bytes || *block * c->size > rc_max_bytes || c->size < 2) {
        pmpi = "pmpi (outside the byte bounds, or a single rank)";
    }
    if (rc_verbose) snprintf(why, whylen, "%s", pmpi ? pmpi : "offloaded (staged)");
    return pmpi ? NULL : c;
}

/* A staging buffer of size x block bytes with this rank's block at its place: from `sendbuf`,
 * or from `recvbuf` with MPI_IN_PLACE; a send side whose bytes differ from the receive side's
 * (an erroneous program) leaves a zeroed block and sets *mismatch. NULL without memory. */
static RingcastBuf *rc_gather_stage(struct rc_comm *c, MPI_Comm comm, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                    const void *recvbuf, long long block, size_t *len, int *mismatch) {
    int me;
    PMPI_Comm_rank(comm, &me);
    RingcastBuf *stage = rc_buf_get((size_t)block * (size_t)c->size, len);
    if (!stage) return NULL;
    uint8_t *mine = (uint8_t *)ringcast_buf_ptr(stage) + (size_t)me * (size_t)block;
    *mismatch = 0;
    if (sendbuf == MPI_IN_PLACE) {
        memcpy(mine, (const uint8_t *)recvbuf + (size_t)me * (size_t)block, (size_t)block);
    } else if (rc_bytes(sendcount, sendtype) != block) {
        *mismatch = 1;
        memset(mine, 0, (size_t)block); /* never stale bytes */
    } else {
        memcpy(mine, sendbuf, (size_t)block);
    }
    return stage;
}

/* The allgather: one ringcast ALLGATHER on a staging buffer of size x block bytes (this rank's
 * block copied in at its place, every block copied out), posted and polled with the library's
 * progress in between, as MPI_Bcast. Invalid or non-contiguous arguments go to PMPI_Allgather;
 * a send side that does not match the receive side still posts (so no rank is left waiting for
 * its block) and fails with MPI_ERR_TRUNCATE here. */
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
    char why[192];
    why[0] = '\0';
    long long block;
    rc_poll();
    struct rc_comm *c = rc_decide_gather(recvbuf, recvcount, recvtype, comm, &block, why, sizeof why);
    if (!c) {
        say("MPI_Allgather", block, -1, "%s", why);
        return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    size_t len = 0, total = (size_t)block * (size_t)c->size;
    int mismatch;
    RingcastBuf *stage = rc_gather_stage(c, comm, sendbuf, sendcount, sendtype, recvbuf, block, &len, &mismatch);
    if (!stage) {
        say("MPI_Allgather", block, -1, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    uint64_t id = 0;
    int rc = ringcast_iallgather(c->handle, NULL, 0, stage, 0, (size_t)block, &id);
    rc = rc_await(rc, id);
    if (rc == RINGCAST_OK && !mismatch) memcpy(recvbuf, ringcast_buf_ptr(stage), total);
    rc_buf_put(stage, len);
    if (mismatch) {
        say("MPI_Allgather", block, -1, "failed (send and receive sides differ in bytes)");
        return rc_error(comm, MPI_ERR_TRUNCATE);
    }
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Allgather failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    say("MPI_Allgather", block, -1, "%s", why);
    return MPI_SUCCESS;
}

/* The nonblocking allgather: the same rule and staging; a generalized request the completion
 * calls finish like an MPI_Ibcast's (the whole receive buffer copied out). A mismatched send
 * side fails the call itself (MPI_ERR_TRUNCATE) after posting its zeroed block. */
int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                   MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    long long block = -1;
    rc_poll();
    struct rc_comm *c = request ? rc_decide_gather(recvbuf, recvcount, recvtype, comm, &block, why, sizeof why) : NULL;
    if (!c) {
        say("MPI_Iallgather", block, -1, "%s", request ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
    }
    struct rc_op *op = calloc(1, sizeof *op);
    int mismatch = 0;
    RingcastBuf *stage =
        op ? rc_gather_stage(c, comm, sendbuf, sendcount, sendtype, recvbuf, block, &op->stage_len, &mismatch) : NULL;
    if (!stage) {
        free(op);
        say("MPI_Iallgather", block, -1, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    op->stage = stage;
    op->c = c;
    op->comm = comm;
    op->user = mismatch ? NULL : recvbuf;
    op->bytes = (size_t)block * (size_t)c->size;
    op->root_here = 0; /* every rank receives: the whole buffer is copied out */
    int rc = ringcast_iallgather(c->handle, NULL, 0, stage, 0, (size_t)block, &op->id);
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, op->stage_len);
        free(op);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Iallgather failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(op);
    if (mismatch) {
        /* Posted (the others get a zeroed block), finished in the background, failed here. */
        op->greq = MPI_REQUEST_NULL;
        say("MPI_Iallgather", block, -1, "failed (send and receive sides differ in bytes)");
        return rc_error(comm, MPI_ERR_TRUNCATE);
    }
    int made = rc_op_request(op, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Iallgather", block, -1, "%s", why);
    return made;
}

/* The alltoall's path: its record when offloaded (NULL for PMPI, the reason in `why`): a
 * followed communicator, contiguous types of the same bytes on both sides, no MPI_IN_PLACE, and
 * a whole send buffer (what each rank multicasts: the engine's multicast alltoall) within the
 * byte bounds — short blocks; longer ones are the library's pairwise exchange. Only values every
 * rank shares decide. */
static struct rc_comm *rc_decide_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                                          MPI_Datatype recvtype, MPI_Comm comm, long long *block, char *why, size_t whylen) {
    struct rc_comm *c = rc_of(comm);
    long long sb = rc_bytes(sendcount, sendtype);
    *block = rc_bytes(recvcount, recvtype);
    const char *pmpi = NULL;
    if (!c) {
        pmpi = rc_up ? "pmpi (communicator not followed)" : rc_off;
    } else if (sendbuf == MPI_IN_PLACE || sendcount < 0 || recvcount < 0) {
        pmpi = "pmpi (MPI_IN_PLACE or invalid arguments: the library's)";
    } else if (!c->handle || c->size < 2) {
        pmpi = "pmpi (auto: the communicator spans too few engines, or one rank)";
    } else if (*block < 0 || sb != *block) {
        pmpi = "pmpi (datatype not contiguous, or the sides differ)";
    } else if (*block < rc_min_bytes || *block * c->size > rc_max_bytes) {
        pmpi = "pmpi (a whole send buffer outside the byte bounds: the library's pairwise exchange)";
    }
    if (rc_verbose) snprintf(why, whylen, "%s", pmpi ? pmpi : "offloaded (multicast alltoall, staged)");
    return pmpi ? NULL : c;
}

/* Stages an alltoall in one buffer: the work buffer ((size + 1) x size x block bytes: the
 * result at its start, then the engine's scratch), then the send buffer copied in. Its pool
 * length in *len; NULL without memory. */
static RingcastBuf *rc_alltoall_stage(struct rc_comm *c, const void *sendbuf, long long block, size_t *len) {
    size_t whole = (size_t)block * (size_t)c->size, work = whole * ((size_t)c->size + 1);
    RingcastBuf *stage = rc_buf_get(work + whole, len);
    if (stage) memcpy((uint8_t *)ringcast_buf_ptr(stage) + work, sendbuf, whole);
    return stage;
}

/* Where the staged send buffer starts. */
static size_t rc_alltoall_send_at(struct rc_comm *c, long long block) {
    return (size_t)block * (size_t)c->size * ((size_t)c->size + 1);
}

/* The blocking alltoall: ringcast's ALLTOALL on a staged buffer, the result copied out. */
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 MPI_Comm comm) {
    char why[192];
    why[0] = '\0';
    long long block = -1;
    rc_poll();
    struct rc_comm *c = rc_decide_alltoall(sendbuf, sendcount, sendtype, recvcount, recvtype, comm, &block, why, sizeof why);
    if (!c) {
        say("MPI_Alltoall", block, -1, "%s", why);
        return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    }
    size_t len = 0;
    RingcastBuf *stage = rc_alltoall_stage(c, sendbuf, block, &len);
    if (!stage) {
        say("MPI_Alltoall", block, -1, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    uint64_t id = 0;
    int rc = ringcast_ialltoall(c->handle, stage, rc_alltoall_send_at(c, block), stage, 0, (size_t)block, &id);
    rc = rc_await(rc, id);
    if (rc == RINGCAST_OK) memcpy(recvbuf, ringcast_buf_ptr(stage), (size_t)block * (size_t)c->size);
    rc_buf_put(stage, len);
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Alltoall failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    say("MPI_Alltoall", block, -1, "%s", why);
    return MPI_SUCCESS;
}

/* The nonblocking alltoall: the same path, a generalized request; the result copied out at
 * completion, as an MPI_Ibcast's data. */
int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  MPI_Comm comm, MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    long long block = -1;
    rc_poll();
    struct rc_comm *c =
        request ? rc_decide_alltoall(sendbuf, sendcount, sendtype, recvcount, recvtype, comm, &block, why, sizeof why) : NULL;
    if (!c) {
        say("MPI_Ialltoall", block, -1, "%s", request ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
    }
    struct rc_op *op = calloc(1, sizeof *op);
    RingcastBuf *stage = op ? rc_alltoall_stage(c, sendbuf, block, &op->stage_len) : NULL;
    if (!stage) {
        free(op);
        say("MPI_Ialltoall", block, -1, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    op->stage = stage;
    op->c = c;
    op->comm = comm;
    op->user = recvbuf;
    op->bytes = (size_t)block * (size_t)c->size;
    op->root_here = 0; /* the result is copied out of the stage's start */
    int rc = ringcast_ialltoall(c->handle, stage, rc_alltoall_send_at(c, block), stage, 0, (size_t)block, &op->id);
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, op->stage_len);
        free(op);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Ialltoall failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(op);
    int made = rc_op_request(op, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Ialltoall", block, -1, "%s", why);
    return made;
}

/* The ringcast element type of a predefined MPI datatype, 0 for any other (the library's path). */
static uint8_t rc_type_of(MPI_Datatype t) {
    if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return RINGCAST_TYPE_INT8;
    if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR) return RINGCAST_TYPE_UINT8;
    if (t == MPI_INT16_T || t == MPI_SHORT) return RINGCAST_TYPE_INT16;
    if (t == MPI_UINT16_T || t == MPI_UNSIGNED_SHORT) return RINGCAST_TYPE_UINT16;
    if (t == MPI_INT32_T || t == MPI_INT) return RINGCAST_TYPE_INT32;
    if (t == MPI_UINT32_T || t == MPI_UNSIGNED) return RINGCAST_TYPE_UINT32;
    if (t == MPI_INT64_T || t == MPI_LONG_LONG || (t == MPI_LONG && sizeof(long) == 8)) return RINGCAST_TYPE_INT64;
    if (t == MPI_UINT64_T || t == MPI_UNSIGNED_LONG_LONG || (t == MPI_UNSIGNED_LONG && sizeof(long) == 8))
        return RINGCAST_TYPE_UINT64;
    if (t == MPI_FLOAT) return RINGCAST_TYPE_FLOAT;
    if (t == MPI_DOUBLE) return RINGCAST_TYPE_DOUBLE;
    return 0;
}

/* The ringcast operation of a predefined MPI operation, 0 for any other (user operations,
 * MPI_MINLOC/MAXLOC, MPI_REPLACE...: the library's path). */
static uint8_t rc_op_of(MPI_Op op) {
    if (op == MPI_SUM) return RINGCAST_OP_SUM;
    if (op == MPI_PROD) return RINGCAST_OP_PROD;
    if (op == MPI_MIN) return RINGCAST_OP_MIN;
    if (op == MPI_MAX) return RINGCAST_OP_MAX;
    if (op == MPI_BAND) return RINGCAST_OP_BAND;
    if (op == MPI_BOR) return RINGCAST_OP_BOR;
    if (op == MPI_BXOR) return RINGCAST_OP_BXOR;
    if (op == MPI_LAND) return RINGCAST_OP_LAND;
    if (op == MPI_LOR) return RINGCAST_OP_LOR;
    return 0;
}

/* The allreduce: predefined operations on basic types under the broadcast's rule (count x type,
 * the same at every rank of a correct program), as one ringcast ALLREDUCE on a staging work
 * buffer of size x bytes (this rank's contribution copied in at its place): the engine gathers
 * every contribution, reduces them in a fixed order (rank order, or node by node then across
 * nodes when it composes leader-based — by recursive doubling between the nodes where the
 * cost model's exchange for the call is not multicast: docs/protocol.md) — the same order at every rank, so every
 * rank's result is bit-identical, floats included (it may differ from the library's own float
 * result within rounding: another order) — and the result is copied out. Bitwise and logical
 * operations on floats, user operations, other datatypes: PMPI_Allreduce. */
/* MPI_Allreduce (root -1) and MPI_Reduce (the result copied out at `root` only; the others'
 * recvbuf is not significant): one ringcast ALLREDUCE either way, under the rule above. */
/* The path of a reduction (root -1: an allreduce): its record when offloaded (NULL for PMPI,
 * the reason in `why`), with the ringcast type and operation and the bytes per contribution. */
static struct rc_comm *rc_decide_reduce(void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                                        uint8_t *t, uint8_t *o, long long *bytes, char *why, size_t whylen) {
    struct rc_comm *c = rc_of(comm);
    *t = rc_type_of(datatype);
    *o = rc_op_of(op);
    int tsize = 0;
    *bytes = -1;
    const char *pmpi = NULL;
    if (!c) {
        pmpi = rc_up ? "pmpi (communicator not followed)" : rc_off;
    } else if (count < 0 || (root < 0 && recvbuf == MPI_IN_PLACE) || root >= c->size || root < -1) {
        pmpi = "pmpi (invalid arguments: the library reports them)";
    } else if (!c->handle) {
        pmpi = "pmpi (auto: the communicator spans too few engines)";
    } else if (!*t || !*o || (*t >= RINGCAST_TYPE_FLOAT && *o >= RINGCAST_OP_BAND)) {
        pmpi = "pmpi (datatype or operation not offloaded)";
    } else if (PMPI_Type_size(datatype, &tsize) != MPI_SUCCESS ||
               (*bytes = (long long)count * tsize) < rc_min_bytes || *bytes * c->size > rc_max_bytes || c->size < 2) {
        pmpi = "pmpi (outside the byte bounds, or a single rank)";
    }
    if (rc_verbose) snprintf(why, whylen, "%s", pmpi ? pmpi : "offloaded (staged)");
    return pmpi ? NULL : c;
}

static int rc_reduce(const char *call, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                     MPI_Comm comm) {
    char why[192];
    why[0] = '\0';
    rc_poll();
    uint8_t t, o;
    long long bytes;
    struct rc_comm *c = rc_decide_reduce(recvbuf, count, datatype, op, root, comm, &t, &o, &bytes, why, sizeof why);
    if (!c) {
        say(call, bytes, root, "%s", why);
        return root < 0 ? PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm)
                        : PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    }
    int me;
    PMPI_Comm_rank(comm, &me);
    size_t len = 0;
    RingcastBuf *stage = rc_buf_get((size_t)bytes * (size_t)c->size, &len);
    if (!stage) {
        say(call, bytes, root, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    uint8_t *p = ringcast_buf_ptr(stage);
    /* MPI_IN_PLACE is the root's alone in MPI_Reduce: another rank using it (an erroneous
     * program) still posts — a zeroed contribution, so no rank waits for it — and fails. */
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    int bad = mine == NULL || (sendbuf == MPI_IN_PLACE && root >= 0 && me != root);
    if (bad) memset(p + (size_t)me * (size_t)bytes, 0, (size_t)bytes);
    else memcpy(p + (size_t)me * (size_t)bytes, mine, (size_t)bytes);
    uint64_t id = 0;
    /* MPI_Reduce is ringcast's REDUCE: only the root reduces. */
    int rc = root < 0 ? ringcast_iallreduce(c->handle, NULL, 0, stage, 0, (size_t)bytes, t, o, &id)
                      : ringcast_ireduce(c->handle, (uint32_t)root, NULL, 0, stage, 0, (size_t)bytes, t, o, &id);
    rc = rc_await(rc, id);
    if (rc == RINGCAST_OK && !bad && (root < 0 || me == root)) memcpy(recvbuf, p, (size_t)bytes);
    rc_buf_put(stage, len);
    if (bad) {
        say(call, bytes, root, "failed (MPI_IN_PLACE at a rank other than the root, or no buffer)");
        return rc_error(comm, MPI_ERR_ARG);
    }
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: %s failed: %s\n", rc_world_rank, call, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    say(call, bytes, root, "%s", why);
    return MPI_SUCCESS;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    return rc_reduce("MPI_Allreduce", sendbuf, recvbuf, count, datatype, op, -1, comm);
}

/* MPI_Reduce as an allreduce whose result only the root keeps: every rank reduces anyway (the
 * multicast allreduce gathers every contribution everywhere), so the root's result costs
 * nothing more. MPI_IN_PLACE is the root's (its contribution in recvbuf). */
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
    if (root < 0) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    return rc_reduce("MPI_Reduce", sendbuf, recvbuf, count, datatype, op, root, comm);
}

/* The nonblocking allreduce and reduce (`reduce`: to `root`): the blocking ones' path with a
 * generalized request, the result copied out at completion (at every rank, or the root's alone)
 * as an MPI_Ibcast's data. MPI_IN_PLACE is a reduce's root's alone: at another rank (an
 * erroneous program) this rank still posts — a zeroed contribution, so no rank waits for it,
 * finished in the background — and fails with MPI_ERR_ARG, as MPI_Reduce does. */
static int rc_ireduce(const char *call, int reduce, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                      int root, MPI_Comm comm, MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    rc_poll();
    uint8_t t = 0, o = 0;
    long long bytes = -1;
    int me = -1;
    if (comm != MPI_COMM_NULL) PMPI_Comm_rank(comm, &me);
    /* (A reduce's negative root is invalid: the library reports it.) */
    int valid = request && (!reduce || root >= 0);
    struct rc_comm *c = valid ? rc_decide_reduce(recvbuf, count, datatype, op, reduce ? root : -1, comm, &t, &o, &bytes, why, sizeof why)
                              : NULL;
    const void *mine = sendbuf == MPI_IN_PLACE ? (!reduce || me == root ? recvbuf : NULL) : sendbuf;
    if (!c || (!reduce && mine == NULL)) {
        say(call, bytes, root, "%s", c || !valid ? "pmpi (invalid arguments: the library reports them)" : why);
        return reduce ? PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request)
                      : PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
    }
    struct rc_op *rop = calloc(1, sizeof *rop);
    RingcastBuf *stage = rop ? rc_buf_get((size_t)bytes * (size_t)c->size, &rop->stage_len) : NULL;
    if (!stage) {
        free(rop);
        say(call, bytes, root, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    uint8_t *at = (uint8_t *)ringcast_buf_ptr(stage) + (size_t)me * (size_t)bytes;
    if (mine) memcpy(at, mine, (size_t)bytes);
    else memset(at, 0, (size_t)bytes);
    rop->stage = stage;
    rop->c = c;
    rop->comm = comm;
    /* The result is copied out of the work buffer's start: at every rank, or the root's alone. */
    rop->user = (!reduce || me == root) && mine ? recvbuf : NULL;
    rop->bytes = (size_t)bytes;
    rop->root_here = 0;
    int rc = reduce ? ringcast_ireduce(c->handle, (uint32_t)root, NULL, 0, stage, 0, (size_t)bytes, t, o, &rop->id)
                    : ringcast_iallreduce(c->handle, NULL, 0, stage, 0, (size_t)bytes, t, o, &rop->id);
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, rop->stage_len);
        free(rop);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: %s failed: %s\n", rc_world_rank, call, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(rop);
    if (!mine) {
        rop->greq = MPI_REQUEST_NULL; /* finished in the background as an internal operation */
        say(call, bytes, root, "failed (MPI_IN_PLACE at a rank other than the root, or no buffer)");
        return rc_error(comm, MPI_ERR_ARG);
    }
    int made = rc_op_request(rop, comm, request);
    if (made == MPI_SUCCESS) say(call, bytes, root, "%s", why);
    return made;
}

int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    return rc_ireduce("MPI_Iallreduce", 0, sendbuf, recvbuf, count, datatype, op, -1, comm, request);
}

int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request *request) {
    return rc_ireduce("MPI_Ireduce", 1, sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

/* The nonblocking broadcast: the same rule; offloaded, a staging buffer of its own, the post,
 * and a generalized request the completion calls below finish. */
int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    long long bytes;
    rc_poll();
    struct rc_comm *c = request ? rc_decide(buffer, count, datatype, root, comm, &bytes, why, sizeof why) : NULL;
    if (!c) {
        say("MPI_Ibcast", request ? bytes : -1, root, "%s", request ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
    }
    struct rc_op *op = calloc(1, sizeof *op);
    RingcastBuf *stage = op ? rc_buf_get((size_t)bytes, &op->stage_len) : NULL;
    if (!stage) {
        free(op);
        say("MPI_Ibcast", bytes, root, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    int me;
    PMPI_Comm_rank(comm, &me);
    op->stage = stage;
    op->c = c;
    op->comm = comm;
    op->user = buffer;
    op->bytes = (size_t)bytes;
    op->root_here = me == root;
    /* The root's data is taken now: the user may not modify it before completion anyway. */
    if (op->root_here) memcpy(ringcast_buf_ptr(stage), buffer, (size_t)bytes);
    int rc = ringcast_ibcast(c->handle, (uint32_t)root, stage, 0, (size_t)bytes, &op->id);
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, op->stage_len);
        free(op);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Ibcast failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(op);
    int made = rc_op_request(op, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Ibcast", bytes, root, "%s", why);
    return made;
}

