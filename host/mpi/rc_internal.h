/* The interposer's shared parts: what ringcast_mpi.c (bootstrap, communicator records,
 * staging and registration, operations in flight, completion calls) and rc_collectives.c (the
 * intercepted collectives) both use. Nothing here is exported from libringcast_mpi.so
 * (RC_HIDDEN): the library's only public symbols are the MPI functions it intercepts. */
#ifndef RC_INTERNAL_H
#define RC_INTERNAL_H

#include <mpi.h>
#include <ringcast.h>

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

/* One operation in the engine: an MPI_Ibcast (greq set) or an internal one finished in the
 * background (greq MPI_REQUEST_NULL). */
struct rc_op {
    struct rc_op *prev, *next;
    uint64_t id;         /* ringcast request id */
    struct rc_comm *c;   /* holds a reference */
    MPI_Comm comm;       /* the user's communicator, for its error handler (while not freed) */
    MPI_Request greq;    /* the generalized request the user holds */
    RingcastBuf *stage;  /* staging buffer, back to the pool once the data is out */
    size_t stage_len;
    void *user;          /* where receivers copy to (NULL: nothing to deliver) */
    size_t bytes;
    int root_here;       /* this rank is the root: nothing to copy out */
    int err;             /* MPI error code once done */
    int done;            /* the engine finished and MPI_Grequest_complete ran */
    int orphan;          /* MPI_Request_free ran while active: no longer the user's handle */
    int mpi_freed;       /* free_fn ran */
};

/* Shared between the two files, invisible outside the library. */
#define RC_HIDDEN __attribute__((visibility("hidden")))

/* State (ringcast_mpi.c). */
extern RC_HIDDEN int rc_up;            /* ringcast initialized */
extern RC_HIDDEN int rc_mode;          /* enum rc_mode */
extern RC_HIDDEN const char *rc_off;   /* why every call goes to PMPI when !rc_up */
extern RC_HIDDEN int rc_verbose;
extern RC_HIDDEN int rc_world_rank;
extern RC_HIDDEN long long rc_min_bytes, rc_max_bytes, rc_engine_max;
extern RC_HIDDEN int rc_min_engines;

/* Helpers (ringcast_mpi.c). */
RC_HIDDEN int rc_await(int rc, uint64_t id);
RC_HIDDEN RingcastBuf *rc_buf_get(size_t bytes, size_t *len);
RC_HIDDEN void rc_buf_put(RingcastBuf *b, size_t len);
RC_HIDDEN long long rc_bytes(int count, MPI_Datatype type);
RC_HIDDEN int rc_class(int rc);
RC_HIDDEN int rc_error(MPI_Comm comm, int err);
RC_HIDDEN struct rc_comm *rc_of(MPI_Comm comm);
RC_HIDDEN int rc_op_request(struct rc_op *op, MPI_Comm comm, MPI_Request *request);
RC_HIDDEN void rc_op_track(struct rc_op *op);
RC_HIDDEN void rc_poll(void);
RC_HIDDEN void rc_wrap_drop(RingcastBuf *b);
RC_HIDDEN RingcastBuf *rc_wrap_get(void *p, size_t bytes);
RC_HIDDEN void say(const char *call, long long bytes, int root, const char *fmt, ...);

#endif
