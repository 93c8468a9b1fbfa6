/* The interposer's shared parts. Nothing here is exported from libringcast_mpi.so (RC_HIDDEN):
 * its public symbols are the MPI functions it intercepts and ringcast_mpi_paths (the path
 * counters a test reads).
 *
 *   ringcast_mpi.c    bootstrap, communicator records, staging buffers and in-place
 *                     registration, MPI_Init / MPI_Finalize / MPI_Comm_*;
 *   rc_ops.c          operations in flight, generalized requests, the completion calls;
 *   rc_rules.c        the standard's argument rules (docs/mpi.md, "The rules, call by call"),
 *                     datatypes by their typemap, packing, the reductions the engine runs;
 *   rc_collectives.c  one table per collective and the one path every call takes.
 *
 * Threads: at MPI_THREAD_MULTIPLE (rc_threaded) the shared state — the operations list, the
 * staging pool, the registration cache, the records' counts — is behind one mutex, RC_LOCK;
 * at every other level RC_LOCK is a test of rc_threaded and nothing more. No PMPI call is made
 * with the lock held (the library may hold its own lock while calling our generalized-request
 * callbacks, which take ours): libringcast's calls are (it never calls back). */
#ifndef RC_INTERNAL_H
#define RC_INTERNAL_H

#include <mpi.h>
#include <ringcast.h>

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The engine's default largest broadcast (RINGCAST_MAX_MESSAGE_BYTES, docs/tunables.md): one
 * ringcast broadcast cannot be larger, so neither can an offloaded MPI call. */
#define RC_ENGINE_MAX_DEFAULT (4LL << 20)
/* Free staging buffers kept for reuse; more are returned to the engine. */
#define RC_POOL_MAX 8
/* Smallest staging buffer made: small messages share one size class. */
#define RC_STAGE_MIN 4096
/* User buffers kept registered in place (cma), least recently used evicted. */
#define RC_WRAP_MAX 16
/* One engine's UDP address as gathered: a host name (at most 255 bytes), ':', a port, NUL. */
#define RC_ADDR 272
/* Operations rc_poll finishes per pass (the rest at the next). */
#define RC_POLL_BATCH 32

enum rc_mode { RC_AUTO, RC_ALWAYS, RC_NEVER };

/* What a communicator needs at each call. Referenced by its attribute and by every operation
 * posted on it that is not reclaimed yet, so a communicator freed under an MPI_Ibcast keeps its
 * record until that operation is done with it. */
struct rc_comm {
    uint64_t handle; /* ringcast communicator; 0: none (auto declined it, or freed) */
    int size;        /* MPI ranks */
    int engines;     /* distinct engines its ranks sit on */
    int inflight;    /* operations posted and not finished in the engine */
    int freeing;     /* MPI_Comm_free ran: free the ringcast communicator when inflight is 0 */
    int refs;        /* the attribute + each unreclaimed operation */
};

/* Where an operation's result goes at completion: `bytes` of the stage's start unpacked into
 * `count` elements of `type` at `buf` (a plain copy when `run`). `type` is the caller's, or —
 * a derived type behind a non-blocking call — our duplicate (`dup`), freed after. */
struct rc_out {
    void *buf; /* NULL: nothing to deliver here */
    int count;
    MPI_Datatype type;
    int run, dup;
    size_t bytes;
    MPI_Comm comm; /* for MPI_Unpack */
};

/* One operation in the engine: a non-blocking call's (greq set), a blocking call's (waited for
 * by its caller, `blocking`), or an internal one finished in the background (neither). */
struct rc_op {
    struct rc_op *prev, *next;
    uint64_t id;         /* ringcast request id */
    struct rc_comm *c;   /* holds a reference */
    MPI_Comm comm;       /* the user's communicator, for its error handler (while not freed) */
    MPI_Request greq;    /* the generalized request the user holds */
    RingcastBuf *stage;  /* staging buffer (or the registered user buffer: `wrapped`) */
    size_t stage_len;
    int wrapped;         /* `stage` is the user's buffer registered in place: not pooled */
    struct rc_out out;
    size_t bytes;        /* what the status reports (bytes of the call's data) */
    int fail;            /* an error decided at the call, reported once the engine is done */
    int blocking;
    int handing;         /* a non-blocking call's, tracked before its request exists: finished
                          * meanwhile, it waits for rc_op_request to complete the request */
    int err;             /* MPI error code once done */
    int finishing;       /* taken by one rc_poll to finish */
    int done;            /* the engine finished and the data is out */
    int completed;       /* MPI_Grequest_complete returned */
    int orphan;          /* MPI_Request_free ran while active: no longer the user's handle */
    int mpi_freed;       /* free_fn ran */
};

/* Shared between the files, invisible outside the library. */
#define RC_HIDDEN __attribute__((visibility("hidden")))

/* State (ringcast_mpi.c). */
extern RC_HIDDEN int rc_up;            /* ringcast initialized */
extern RC_HIDDEN int rc_mode;          /* enum rc_mode */
extern RC_HIDDEN int rc_threaded;      /* MPI_THREAD_MULTIPLE: RC_LOCK locks */
extern RC_HIDDEN const char *rc_off;   /* why every call goes to PMPI when !rc_up */
extern RC_HIDDEN int rc_verbose;
extern RC_HIDDEN int rc_world_rank;
extern RC_HIDDEN long long rc_min_bytes, rc_max_bytes, rc_engine_max;
extern RC_HIDDEN int rc_min_engines;
extern RC_HIDDEN pthread_mutex_t rc_mutex;

#define RC_LOCK()                                  \
    do {                                           \
        if (rc_threaded) pthread_mutex_lock(&rc_mutex); \
    } while (0)
#define RC_UNLOCK()                                  \
    do {                                             \
        if (rc_threaded) pthread_mutex_unlock(&rc_mutex); \
    } while (0)
/* Counters read without the lock on the fast paths. */
#define RC_LOAD(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define RC_ADD(x, n) __atomic_add_fetch(&(x), (n), __ATOMIC_ACQ_REL)

/* ringcast_mpi.c */
RC_HIDDEN RingcastBuf *rc_buf_get(size_t bytes, size_t *len);
RC_HIDDEN void rc_buf_put(RingcastBuf *b, size_t len);
RC_HIDDEN int rc_class(int rc);
RC_HIDDEN int rc_error(MPI_Comm comm, int err);
RC_HIDDEN struct rc_comm *rc_of(MPI_Comm comm);
RC_HIDDEN void rc_comm_release(struct rc_comm *c);
RC_HIDDEN void rc_comm_settle(struct rc_comm *c);
RC_HIDDEN void rc_wrap_drop(RingcastBuf *b);
RC_HIDDEN RingcastBuf *rc_wrap_get(void *p, size_t bytes);
RC_HIDDEN void say(const char *call, long long bytes, int root, const char *fmt, ...);

/* rc_ops.c */
RC_HIDDEN extern int rc_live;   /* user requests whose free_fn has not run: the fast-path check */
RC_HIDDEN extern int rc_active; /* operations not finished in the engine */
RC_HIDDEN void rc_op_track(struct rc_op *op);
RC_HIDDEN int rc_op_request(struct rc_op *op, MPI_Comm comm, MPI_Request *request);
RC_HIDDEN void rc_op_release(struct rc_op *op);
RC_HIDDEN int rc_op_wait(struct rc_op *op);
RC_HIDDEN void rc_poll(void);
RC_HIDDEN void rc_breathe(const struct rc_op *probe);
RC_HIDDEN void rc_drain(void);

/* rc_rules.c */
RC_HIDDEN int rc_type_run(MPI_Datatype type);
RC_HIDDEN int rc_pack(const void *buf, int count, MPI_Datatype type, int run, void *to, size_t bytes, MPI_Comm comm);
RC_HIDDEN int rc_unpack(const struct rc_out *out, const void *from);
RC_HIDDEN int rc_reduction(MPI_Datatype type, MPI_Op op, uint8_t *t, uint8_t *o);
RC_HIDDEN void rc_count_path(int path);
enum rc_path { RC_PATH_OFFLOADED, RC_PATH_PACKED, RC_PATH_PMPI };

#endif
