/* libringcast_mpi.so: the PMPI interposer. Preloaded into an unmodified MPI program
 * (LD_PRELOAD), it routes MPI_Bcast, MPI_Ibcast, MPI_Allgather, MPI_Iallgather,
 * MPI_Allreduce, MPI_Iallreduce and MPI_Reduce through ringcast when that is correct and worth
 * it, and calls the PMPI functions otherwise.
 *
 * Bootstrap (MPI_Init / MPI_Init_thread): the ranks sharing a host (MPI_Comm_split_type SHARED)
 * form one node each — or RINGCAST_MPI_NODES emulated nodes, to emulate several nodes on one
 * machine — whose local rank 0 starts the node's engine as a polling thread (thread mode) that
 * the node's other ranks attach to; rank 0 names the job and every rank learns its node, local
 * rank and the node count. Ranks on one host use the shared-memory fabric; across hosts, kernel
 * UDP (member addresses exchanged with MPI_Allgather). Every communicator (MPI_COMM_WORLD, and
 * those MPI_Comm_dup / _split / _create make) gets a record cached as an MPI attribute and, when
 * it is to be offloaded, a ringcast communicator: its rank 0 draws the identity, broadcasts it
 * (PMPI) and every member creates it. MPI_Comm_free frees it — at once, or, with broadcasts still
 * in flight on it, when the last of them completes.
 *
 * The decision (RINGCAST_MPI_OFFLOAD=auto|always|never, auto by default; docs/mpi.md): `never`
 * does not start ringcast; `always` offloads every valid call of a contiguous datatype within
 * RINGCAST_MPI_MIN_BYTES..RINGCAST_MPI_MAX_BYTES (default: 1 byte to the engine's largest
 * message); `auto` does the same only on communicators that span at least
 * RINGCAST_MPI_MIN_ENGINES engines (2: ranks on different hosts, or emulated nodes asked for),
 * and when the whole job sits on fewer does not even start ringcast: within one node the MPI
 * library's shared-memory broadcast copies once, the engine's path twice plus a hand-off. The decision uses only values every rank of the
 * communicator shares (its membership, count x type size, root), so all ranks take the same path:
 * the collectives stay matched. RINGCAST_MPI_VERBOSE=1 says, per call, the path and why.
 *
 * Data path: the root copies into a registered staging buffer (with the default `mapped` DMA
 * backend the engine reaches only shared memory), the engines broadcast it, the other ranks copy
 * it out. Staging buffers come from a small pool reused by size; one is never shared by two
 * operations in flight. Where the engine reaches host memory by DMA (RINGCAST_DMA=cma, an engine
 * across the PCIe boundary) a blocking MPI_Bcast registers the user's buffer in place instead —
 * no copy at either end — through a small registration cache (RC_WRAP_MAX buffers, least
 * recently used one deregistered; RINGCAST_MPI_INPLACE=0 turns it off). MPI_Ibcast keeps its
 * staging buffer: a cached registration could be evicted under it. Even a blocking
 * MPI_Bcast posts and then polls the engine with the library's progress in between, never
 * sleeping in the engine: this rank's pending point-to-point requests keep moving.
 *
 * MPI_Ibcast returns a generalized request (MPI_Grequest_start). The MPI library cannot progress
 * it, so the completion calls (MPI_Wait/Test and their -all/-any/-some forms, MPI_Request_free,
 * MPI_Request_get_status) are intercepted: for a set holding one of ours they poll the engine
 * (ringcast_test), copy the data out, MPI_Grequest_complete it, and drive the library's own
 * requests with PMPI_Test* in the same loop — never blocking in the engine while library
 * requests may need progress. A set without ours costs one counter check (and a list scan only
 * while some of ours are live).
 *
 * Invalid arguments (root, count, MPI_IN_PLACE, null datatype) go to PMPI_Bcast / PMPI_Ibcast,
 * which report them with the library's own error class. Engine failures map to MPI error classes
 * (length differing from the root's: MPI_ERR_TRUNCATE; bad root: MPI_ERR_ROOT; else
 * MPI_ERR_OTHER), raised through the communicator's error handler (MPI_Bcast) or returned by
 * the completion call (MPI_Ibcast). MPI_THREAD_MULTIPLE turns the offload off: this layer's
 * state is not thread-safe. */
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
    int gather_parts; /* broadcasts an allgather (or allreduce) takes: one per rank, or — the
                       * engine's leader-based allgather, RINGCAST_ALLGATHER_PARTS=nodes — one per
                       * engine when each engine's ranks are consecutive; counted in `posted` */
    unsigned posted; /* broadcasts posted since creation, to fill the last synchronization epoch */
    int inflight;    /* operations posted and not finished in the engine */
    int freeing;     /* MPI_Comm_free ran: free the ringcast communicator when inflight is 0 */
    int refs;        /* the attribute + each unreclaimed operation */
};

/* One operation in the engine: an MPI_Ibcast (greq set) or an internal epoch-filling broadcast
 * of a communicator being freed (greq MPI_REQUEST_NULL). */
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

static int rc_up;              /* ringcast initialized */
static int rc_mode = RC_AUTO;
static const char *rc_off = "ringcast not started"; /* why every call goes to PMPI when !rc_up */
static int rc_verbose;
static int rc_world_rank;
static int rc_node;            /* this rank's engine (emulated node) */
static long long rc_min_bytes = 1, rc_max_bytes = RC_ENGINE_MAX_DEFAULT, rc_engine_max = RC_ENGINE_MAX_DEFAULT;
static int rc_min_engines = 2; /* auto: engines a communicator must span (RINGCAST_MPI_MIN_ENGINES) */
static char rc_off_buf[160];   /* rc_off when it needs numbers */
static unsigned rc_channels = 16;
static int rc_keyval = MPI_KEYVAL_INVALID;
static RingcastBuf *rc_dummy;  /* the 1-byte epoch fillers' buffer (its content is never read) */
static struct { RingcastBuf *b; size_t len; } rc_pool[RC_POOL_MAX];
static int rc_pool_n;
/* The in-place registration cache: -1 not asked yet, 0 off (mapped backend, or turned off). */
static int rc_inplace = -1;
static struct { void *p; size_t len; RingcastBuf *b; unsigned long used; } rc_wraps[RC_WRAP_MAX];
static int rc_wraps_n;
static unsigned long rc_wrap_tick;
static struct rc_op *rc_ops;   /* every unreclaimed operation */
static int rc_live;            /* user requests whose free_fn has not run: the fast-path check */
static int rc_active;          /* operations not finished in the engine */

/* One verbose line: which call, which path and why (printf-style reason). */
static void say(const char *call, long long bytes, int root, const char *fmt, ...) {
    if (!rc_verbose) return;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ringcast-mpi[%d]: %s: %s (%lld bytes, root %d)\n", rc_world_rank, call, why, bytes, root);
}

/* An integer tunable, or `dflt` when unset (environment variables configure a preloaded layer:
 * the program itself knows nothing of it). */
static long long env_ll(const char *name, long long dflt) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : dflt;
}

/* Engine configuration goes through the environment ringcast_init reads. */
static void set(const char *k, const char *v) { setenv(k, v, 1); }
/* As `set`, but a value the user chose wins. */
static void set_default(const char *k, const char *v) { setenv(k, v, 0); }

/* The MPI error class of a ringcast code (C ABI: negated engine statuses, -100.. library). */
static int rc_class(int rc) {
    return rc == RINGCAST_OK ? MPI_SUCCESS : rc == -12 ? MPI_ERR_TRUNCATE : rc == -11 ? MPI_ERR_ROOT : MPI_ERR_OTHER;
}

static int rc_error(MPI_Comm comm, int err);

/* ---- staging buffers ---------------------------------------------------------------------- */

/* A registered buffer of at least `bytes` (its length in *len), from the pool if one fits —
 * registration costs an engine round trip, so buffers are reused — else a new one rounded up to
 * a power of two so later messages of similar size reuse it. NULL if none can be made. */
static RingcastBuf *rc_buf_get(size_t bytes, size_t *len) {
    int best = -1;
    for (int i = 0; i < rc_pool_n; i++)
        if (rc_pool[i].len >= bytes && (best < 0 || rc_pool[i].len < rc_pool[best].len)) best = i;
    if (best >= 0) {
        RingcastBuf *b = rc_pool[best].b;
        *len = rc_pool[best].len;
        rc_pool[best] = rc_pool[--rc_pool_n];
        return b;
    }
    size_t n = RC_STAGE_MIN;
    while (n < bytes && n <= SIZE_MAX / 2) n *= 2;
    if (n < bytes) n = bytes;
    RingcastBuf *b = ringcast_buf_new(n);
    if (!b && n > bytes) b = ringcast_buf_new(n = bytes); /* the rounding may be what failed */
    *len = b ? n : 0;
    return b;
}

/* Gives buffer `b` back: kept for reuse, or — the pool being full — its smallest member (or `b`)
 * is returned to the engine, so the pool keeps the sizes most expensive to remake. */
static void rc_buf_put(RingcastBuf *b, size_t len) {
    if (!b) return;
    if (rc_pool_n < RC_POOL_MAX) {
        rc_pool[rc_pool_n].b = b;
        rc_pool[rc_pool_n++].len = len;
        return;
    }
    int small = 0;
    for (int i = 1; i < rc_pool_n; i++)
        if (rc_pool[i].len < rc_pool[small].len) small = i;
    if (rc_pool[small].len < len) {
        RingcastBuf *old = rc_pool[small].b;
        rc_pool[small].b = b;
        rc_pool[small].len = len;
        b = old;
    }
    ringcast_buf_free(b);
}

/* ---- in-place registration ---------------------------------------------------------------- */

/* The user's `bytes` at `p` registered in place (cma), from the cache or registered now, the
 * cache's least recently used entry making room; NULL where in-place registration is off or
 * refused (the caller stages instead). Only blocking calls use it, so no operation is in flight
 * on an entry it evicts. */
static RingcastBuf *rc_wrap_get(void *p, size_t bytes) {
    if (rc_inplace < 0) rc_inplace = ringcast_registers_in_place() == 1;
    if (!rc_inplace) return NULL;
    for (int i = 0; i < rc_wraps_n; i++)
        if (rc_wraps[i].p == p && rc_wraps[i].len >= bytes) {
            rc_wraps[i].used = ++rc_wrap_tick;
            return rc_wraps[i].b;
        }
    /* The least recently used entry makes room when the cache is full, and once more when the
     * engine refuses a registration (its per-host limits count the cached ones). */
    int lru = -1;
    for (int i = 0; i < rc_wraps_n; i++)
        if (lru < 0 || rc_wraps[i].used < rc_wraps[lru].used) lru = i;
    if (rc_wraps_n == RC_WRAP_MAX) {
        ringcast_buf_free(rc_wraps[lru].b);
        rc_wraps[lru] = rc_wraps[--rc_wraps_n];
        lru = -1;
    }
    RingcastBuf *b = ringcast_buf_wrap(p, bytes);
    if (!b && lru >= 0) {
        ringcast_buf_free(rc_wraps[lru].b);
        rc_wraps[lru] = rc_wraps[--rc_wraps_n];
        b = ringcast_buf_wrap(p, bytes);
    }
    if (!b) return NULL; /* this buffer (say, read-only memory): staged instead */
    rc_wraps[rc_wraps_n].p = p;
    rc_wraps[rc_wraps_n].len = bytes;
    rc_wraps[rc_wraps_n].b = b;
    rc_wraps[rc_wraps_n++].used = ++rc_wrap_tick;
    return b;
}

/* Forgets the cached registration of `b` (an operation on it failed: the memory may be gone). */
static void rc_wrap_drop(RingcastBuf *b) {
    for (int i = 0; i < rc_wraps_n; i++)
        if (rc_wraps[i].b == b) {
            ringcast_buf_free(b);
            rc_wraps[i] = rc_wraps[--rc_wraps_n];
            return;
        }
}

/* ---- communicator records ----------------------------------------------------------------- */

/* Drops one reference to `c`; the last one frees it. */
static void rc_comm_release(struct rc_comm *c) {
    if (--c->refs == 0) free(c);
}

/* The attribute's delete callback (MPI_Comm_free, or MPI_Comm_delete_attr): the communicator no
 * longer holds the record; operations still posted on it keep it alive. */
static int rc_attr_delete(MPI_Comm comm, int keyval, void *value, void *extra) {
    (void)comm; (void)keyval; (void)extra;
    rc_comm_release(value);
    return MPI_SUCCESS;
}

/* Frees the ringcast communicator of `c` once MPI_Comm_free ran and nothing is in flight on it:
 * the engine refuses to free a communicator under a broadcast, and the freed MPI communicator's
 * pending MPI_Ibcast must still complete. */
static void rc_comm_settle(struct rc_comm *c) {
    if (c->freeing && c->inflight == 0 && c->handle) {
        int rc = ringcast_comm_free(c->handle);
        if (rc != RINGCAST_OK && rc_verbose)
            fprintf(stderr, "ringcast-mpi[%d]: freeing a communicator: %s\n", rc_world_rank, ringcast_strerror(rc));
        c->handle = 0;
    }
}

/* Gives `comm` its record and, when it is to be offloaded, a ringcast communicator (collective
 * over `comm`). Under `auto`, a communicator on one engine gets a record without a ringcast
 * communicator: its calls go to PMPI, and the record says why. */
static void rc_attach(MPI_Comm comm) {
    int inter = 0, size, rank;
    if (!rc_up || comm == MPI_COMM_NULL) return;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) return;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    /* Each member's ringcast world rank and engine. */
    uint32_t me[2] = {(uint32_t)ringcast_rank(), (uint32_t)rc_node};
    uint32_t *pairs = malloc(sizeof(uint32_t) * 2 * (size_t)size), *members = malloc(sizeof(uint32_t) * (size_t)size);
    int have = pairs != NULL && members != NULL, all_have = 0;
    PMPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, comm);
    if (!all_have) {
        free(pairs);
        free(members);
        return;
    }
    PMPI_Allgather(me, 2, MPI_UINT32_T, pairs, 2, MPI_UINT32_T, comm);
    /* Engines spanned: the same number at every member (computed from the same gathered list);
     * whether each engine's ranks are consecutive (the engine's rule for its leader-based
     * allgather, which then takes one broadcast per engine). */
    int engines = 0, consecutive = 1;
    for (int i = 0; i < size; i++) {
        int seen = 0;
        members[i] = pairs[2 * i];
        for (int j = 0; j < i && !seen; j++) seen = pairs[2 * j + 1] == pairs[2 * i + 1];
        engines += !seen;
        if (seen && pairs[2 * (i - 1) + 1] != pairs[2 * i + 1]) consecutive = 0;
    }
    free(pairs);
    const char *parts = getenv("RINGCAST_ALLGATHER_PARTS");
    int leader_based = consecutive && parts && strcmp(parts, "nodes") == 0;
    struct rc_comm *c = calloc(1, sizeof *c);
    int ok = c != NULL, rc = RINGCAST_OK;
    if (ok && (rc_mode == RC_ALWAYS || engines >= rc_min_engines)) {
        /* The identity includes the communicator's secret key: it travels to the members over
         * MPI (the job's own channel), never on the engines' fabric. */
        RingcastIdentity id;
        memset(&id, 0, sizeof id);
        if (rank == 0) ringcast_new_identity(&id);
        PMPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
        rc = ringcast_comm_create(&id, (uint32_t)rank, members, (uint32_t)size);
        if (rc == RINGCAST_OK) c->handle = id.handle;
        else ok = 0;
    } /* else declined by `auto`: a record without a ringcast communicator */
    free(members);
    int all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all) {
        if (c && c->handle) ringcast_comm_free(c->handle);
        free(c);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: communicator not offloaded: %s\n", rc_world_rank, ringcast_strerror(rc));
        return;
    }
    c->size = size;
    c->engines = engines;
    c->gather_parts = leader_based ? engines : size;
    c->refs = 1;
    PMPI_Comm_set_attr(comm, rc_keyval, c);
}

/* The record of `comm`, or NULL (ringcast not up, null or inter-communicator, not followed). */
static struct rc_comm *rc_of(MPI_Comm comm) {
    struct rc_comm *c = NULL;
    int flag = 0;
    if (!rc_up || comm == MPI_COMM_NULL) return NULL;
    PMPI_Comm_get_attr(comm, rc_keyval, &c, &flag);
    return flag ? c : NULL;
}

/* ---- operations in flight ----------------------------------------------------------------- */

/* Puts `op` on the list of unreclaimed operations. */
static void rc_op_link(struct rc_op *op) {
    op->prev = NULL;
    op->next = rc_ops;
    if (rc_ops) rc_ops->prev = op;
    rc_ops = op;
}

/* `op`, posted in the engine, joins the operations in flight on its communicator. */
static void rc_op_track(struct rc_op *op) {
    op->c->refs++;
    op->c->inflight++;
    rc_active++;
    rc_op_link(op);
}

static int rc_query_fn(void *extra, MPI_Status *status);
static int rc_free_fn(void *extra);
static int rc_cancel_fn(void *extra, int complete);

/* Hands tracked `op` to the user as a generalized request in `*request`: MPI_SUCCESS, or —
 * no request could be made — MPI_ERR_INTERN through `comm`'s handler, the engine finishing `op`
 * in the background as an internal operation. */
static int rc_op_request(struct rc_op *op, MPI_Comm comm, MPI_Request *request) {
    if (PMPI_Grequest_start(rc_query_fn, rc_free_fn, rc_cancel_fn, op, &op->greq) != MPI_SUCCESS) {
        op->greq = MPI_REQUEST_NULL;
        op->user = NULL;
        return rc_error(comm, MPI_ERR_INTERN);
    }
    rc_live++;
    *request = op->greq;
    return MPI_SUCCESS;
}

/* Takes `op` off the list, drops its communicator reference and frees it. */
static void rc_op_free(struct rc_op *op) {
    if (op->prev) op->prev->next = op->next;
    else rc_ops = op->next;
    if (op->next) op->next->prev = op->prev;
    rc_buf_put(op->stage, op->stage_len);
    rc_comm_release(op->c);
    free(op);
}

/* The engine finished `op` with code `rc`: deliver the data, give the staging buffer back,
 * settle a communicator being freed, and complete the generalized request. MPI may run free_fn
 * inside MPI_Grequest_complete (a request the user already freed), so `op` is not touched
 * after it. */
static void rc_op_finish(struct rc_op *op, int rc) {
    op->done = 1;
    op->err = rc_class(rc);
    rc_active--;
    if (rc == RINGCAST_OK && op->user && !op->root_here) memcpy(op->user, ringcast_buf_ptr(op->stage), op->bytes);
    if (rc != RINGCAST_OK && rc_verbose)
        fprintf(stderr, "ringcast-mpi[%d]: a nonblocking collective failed: %s\n", rc_world_rank, ringcast_strerror(rc));
    rc_buf_put(op->stage, op->stage_len);
    op->stage = NULL;
    op->c->inflight--;
    rc_comm_settle(op->c);
    if (op->greq == MPI_REQUEST_NULL) {
        rc_op_free(op);
        return;
    }
    int freed = op->mpi_freed; /* free_fn already ran (it will not run again) */
    PMPI_Grequest_complete(op->greq);
    if (freed) rc_op_free(op);
}

/* Asks the engine about `op` without waiting; finishes it when done. A library error (engine
 * gone, unknown request) finishes it too, with that error: no wait loop outlives the engine. */
static void rc_op_poll(struct rc_op *op) {
    int fin = 0;
    if (op->done) return;
    int rc = ringcast_test(op->id, &fin);
    if (fin || rc != RINGCAST_OK) rc_op_finish(op, rc);
}

/* Progresses every unfinished operation (the user's, orphans, epoch fillers). */
static void rc_poll(void) {
    if (rc_active == 0) return;
    for (struct rc_op *op = rc_ops, *next; op; op = next) {
        next = op->next; /* finishing may free `op` (never another one) */
        rc_op_poll(op);
    }
}

/* The unfinished-or-held operation whose generalized request is `r`, or NULL. */
static struct rc_op *rc_find(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    for (struct rc_op *op = rc_ops; op; op = op->next)
        if (op->greq == r && !op->orphan && !op->mpi_freed) return op;
    return NULL;
}

/* Whether any of `n` requests is ours (1), and whether one of them is not finished yet (2). */
static int rc_scan(int n, const MPI_Request *reqs) {
    int any = 0;
    if (rc_live == 0 || n <= 0 || !reqs) return 0;
    for (int i = 0; i < n; i++) {
        struct rc_op *op = rc_find(reqs[i]);
        if (op && !op->done) return 2;
        if (op) any = 1;
    }
    return any;
}

/* Generalized request: the status of a finished MPI_Ibcast (MPI calls it from Wait/Test/
 * Request_get_status). The count is in bytes; source and tag as for any collective. The library
 * is always told success: Open MPI raises a generalized request's error on MPI_COMM_WORLD, not on
 * the broadcast's communicator, so a program with MPI_ERRORS_RETURN on its communicator would
 * abort. The completion calls below report an error themselves (rc_report), as the library does
 * for its own nonblocking collectives: MPI_ERROR in the status, the communicator's handler. */
static int rc_query_fn(void *extra, MPI_Status *status) {
    struct rc_op *op = extra;
    if (status != MPI_STATUS_IGNORE) {
        PMPI_Status_set_elements_x(status, MPI_BYTE, (MPI_Count)op->bytes);
        PMPI_Status_set_cancelled(status, 0);
        status->MPI_SOURCE = MPI_ANY_SOURCE;
        status->MPI_TAG = MPI_ANY_TAG;
        status->MPI_ERROR = MPI_SUCCESS;
    }
    return MPI_SUCCESS;
}

/* Generalized request: MPI freed the request (after completion, standard's rule). */
static int rc_free_fn(void *extra) {
    struct rc_op *op = extra;
    op->mpi_freed = 1;
    rc_live--;
    if (op->done) rc_op_free(op); /* else rc_op_finish frees it */
    return MPI_SUCCESS;
}

/* Generalized request: a started broadcast cannot be cancelled (the other ranks are in it). */
static int rc_cancel_fn(void *extra, int complete) {
    (void)extra; (void)complete;
    return MPI_SUCCESS;
}

/* Lets the MPI library progress its own requests while we wait for ours — its progress engine
 * runs inside any test call: PMPI_Test on `probe`, one of our unfinished requests (a copy of the
 * handle: unfinished, it completes nothing), or an MPI_Iprobe without one — and gives the core
 * away: engine threads and other ranks may share it. */
static void rc_breathe(const struct rc_op *probe) {
    int flag = 0;
    if (probe) {
        MPI_Request r = probe->greq;
        PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    } else {
        PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }
    sched_yield();
}

/* One of ours in the set that is not finished, or NULL. */
static const struct rc_op *rc_unfinished(int n, const MPI_Request *reqs) {
    for (int i = 0; i < n; i++) {
        const struct rc_op *op = rc_find(reqs[i]);
        if (op && !op->done) return op;
    }
    return NULL;
}

/* ---- bootstrap and teardown --------------------------------------------------------------- */

/* The bootstrap: the mode, who is where, the engine environment, ringcast_init, the world's
 * communicator. Every early return leaves every call on PMPI, decided identically at every
 * rank (each condition is agreed by an allreduce or depends only on shared values). */
static void rc_start(int provided) {
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    rc_world_rank = rank;
    rc_verbose = (int)env_ll("RINGCAST_MPI_VERBOSE", 0);
    rc_engine_max = env_ll("RINGCAST_MAX_MESSAGE_BYTES", RC_ENGINE_MAX_DEFAULT);
    rc_min_bytes = env_ll("RINGCAST_MPI_MIN_BYTES", 1);
    if (env_ll("RINGCAST_MPI_INPLACE", 1) == 0) rc_inplace = 0;
    rc_max_bytes = env_ll("RINGCAST_MPI_MAX_BYTES", rc_engine_max);
    if (rc_min_bytes < 1) rc_min_bytes = 1;                   /* the engine moves no empty message */
    if (rc_max_bytes > rc_engine_max) rc_max_bytes = rc_engine_max; /* nor one above its limit */
    rc_channels = (unsigned)env_ll("RINGCAST_CHANNELS", 16);
    rc_min_engines = (int)env_ll("RINGCAST_MPI_MIN_ENGINES", 2);
    if (rc_min_engines < 1) rc_min_engines = 1;
    const char *mode = getenv("RINGCAST_MPI_OFFLOAD");
    rc_mode = !mode || !*mode || strcmp(mode, "auto") == 0 ? RC_AUTO : strcmp(mode, "always") == 0 ? RC_ALWAYS : RC_NEVER;
    if (mode && *mode && rc_mode == RC_NEVER && strcmp(mode, "never") != 0 && rank == 0)
        fprintf(stderr, "ringcast-mpi: RINGCAST_MPI_OFFLOAD=%s is not auto, always or never: never\n", mode);
    if (env_ll("RINGCAST_MPI", 1) == 0) rc_mode = RC_NEVER;
    if (rc_mode == RC_NEVER) {
        rc_off = "RINGCAST_MPI_OFFLOAD=never";
        return;
    }
    if (provided == MPI_THREAD_MULTIPLE) {
        rc_off = "MPI_THREAD_MULTIPLE: this layer is not thread-safe";
        return;
    }

    /* Ranks of one host, and which host this is. */
    MPI_Comm local, leaders;
    int lrank, lsize;
    PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    PMPI_Comm_rank(local, &lrank);
    PMPI_Comm_size(local, &lsize);
    PMPI_Comm_split(MPI_COMM_WORLD, lrank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders);
    int host_index = 0, hosts = 1;
    if (leaders != MPI_COMM_NULL) {
        PMPI_Comm_rank(leaders, &host_index);
        PMPI_Comm_size(leaders, &hosts);
        PMPI_Comm_free(&leaders);
    }
    PMPI_Bcast(&host_index, 1, MPI_INT, 0, local);
    PMPI_Bcast(&hosts, 1, MPI_INT, 0, local);
    PMPI_Comm_free(&local);
    /* Each host's ranks split into `emu` emulated nodes (the same number on every host), as
     * evenly as they go: the first `lsize % emu` nodes of a host hold one rank more. Hosts may
     * hold different numbers of ranks and nodes need not be equal (the engines' uneven world,
     * RINGCAST_NODE_RANKS): 3 ranks on 2 nodes is 2+1. */
    int emu = (int)env_ll("RINGCAST_MPI_NODES", 1), emu_all = 0;
    if (emu < 1) emu = 1;
    if (emu > lsize) emu = lsize;
    PMPI_Allreduce(&emu, &emu_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    emu = emu_all;
    int nodes = hosts * emu, base = lsize / emu, extra = lsize % emu, k, local_rank;
    if (lrank < extra * (base + 1)) {
        k = lrank / (base + 1);
        local_rank = lrank % (base + 1);
    } else {
        k = extra + (lrank - extra * (base + 1)) / base;
        local_rank = (lrank - extra * (base + 1)) % base;
    }
    int node = host_index * emu + k;
    /* Ranks on every node, from every rank's node: the engines number world ranks node by node. */
    int *node_of = malloc(sizeof(int) * (size_t)size), *counts = calloc((size_t)nodes, sizeof(int));
    int have_counts = node_of && counts, all_counts = 0;
    PMPI_Allreduce(&have_counts, &all_counts, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_counts) {
        free(node_of); free(counts);
        rc_off = "out of memory at start";
        return;
    }
    PMPI_Allgather(&node, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) counts[node_of[r]]++;
    int ppn = counts[0], uniform = 1;
    for (int n = 1; n < nodes; n++) uniform &= counts[n] == ppn;
    free(node_of);
    if (rc_mode == RC_AUTO && nodes < rc_min_engines) {
        /* No communicator can span enough engines: nothing would be offloaded, so no engine. */
        free(counts);
        snprintf(rc_off_buf, sizeof rc_off_buf, "auto: the job spans %d engine(s), fewer than %d", nodes, rc_min_engines);
        rc_off = rc_off_buf;
        if (rc_verbose && rank == 0) fprintf(stderr, "ringcast-mpi: %s; every call goes to PMPI\n", rc_off);
        return;
    }

    /* The job: named by rank 0, the same everywhere; its secret (keys the world communicator's
     * frames) drawn by rank 0 from the CSPRNG and handed over MPI, never over the engines' fabric. */
    char job[64] = {0};
    RingcastIdentity secret;
    memset(&secret, 0, sizeof secret);
    if (rank == 0) {
        snprintf(job, sizeof job, "mpi-%ld-%d", (long)getpid(), (int)(MPI_Wtime() * 1000) % 100000);
        ringcast_new_identity(&secret);
    }
    PMPI_Bcast(job, (int)sizeof job, MPI_CHAR, 0, MPI_COMM_WORLD);
    PMPI_Bcast(secret.key, (int)sizeof secret.key, MPI_BYTE, 0, MPI_COMM_WORLD);
    char secret_hex[2 * sizeof secret.key + 1];
    for (size_t i = 0; i < sizeof secret.key; i++) snprintf(secret_hex + 2 * i, 3, "%02x", secret.key[i]);
    set("RINGCAST_JOB_SECRET", secret_hex);
    char buf[96];
    const char *fabric = getenv("RINGCAST_MPI_FABRIC");
    if (!fabric || !*fabric) fabric = hosts > 1 ? "udp" : "shm";
    set("RINGCAST_FABRIC", fabric);
    set("RINGCAST_JOB", job);
    snprintf(buf, sizeof buf, "%d", nodes); set("RINGCAST_NODES", buf);
    snprintf(buf, sizeof buf, "%d", node); set("RINGCAST_NODE", buf);
    if (uniform) {
        snprintf(buf, sizeof buf, "%d", ppn); set("RINGCAST_PPN", buf);
        set("RINGCAST_NODE_RANKS", "");
    } else {
        /* An uneven world: one count per node. */
        size_t cap = (size_t)nodes * 12 + 1, at = 0;
        char *list = malloc(cap);
        if (!list) {
            free(counts);
            rc_off = "out of memory at start";
            return;
        }
        for (int n = 0; n < nodes; n++) at += (size_t)snprintf(list + at, cap - at, n ? ",%d" : "%d", counts[n]);
        set("RINGCAST_PPN", "1");
        set("RINGCAST_NODE_RANKS", list);
        free(list);
    }
    free(counts);
    rc_node = node;
    snprintf(buf, sizeof buf, "%d", local_rank); set("RINGCAST_LOCAL_RANK", buf);
    snprintf(buf, sizeof buf, "%s-%d", job, node); set("RINGCAST_ENGINE", buf);
    set("RINGCAST_RUN_MODE", "thread");
    set_default("RINGCAST_LOG_LEVEL", "0");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && size > cpus) {
        /* More pollers than cores: sleep on doorbells early. */
        set_default("RINGCAST_POLL_MODE", "spin-yield");
        set_default("RINGCAST_IDLE_SPINS", "50");
        set_default("RINGCAST_IDLE_YIELDS", "10");
    }
    int addr_ok = 1;
    if (strcmp(fabric, "udp") == 0) {
        /* Each node's engine listens on its host's address; one port per node. */
        char me_addr[RC_ADDR] = {0}, *all = malloc((size_t)size * RC_ADDR);
        char hostname[256] = "127.0.0.1";
        if (hosts > 1) gethostname(hostname, sizeof hostname);
        snprintf(me_addr, sizeof me_addr, "%s:%d", hosts > 1 ? hostname : "127.0.0.1", 20000 + (int)(getpid() % 20000));
        int me_nl[2] = {node, local_rank}, *nl = malloc(sizeof(int) * 2 * (size_t)size);
        char *members = calloc((size_t)nodes, RC_ADDR + 1);
        int have = all && nl && members, all_have = 0;
        PMPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (all_have) {
            PMPI_Allgather(me_addr, RC_ADDR, MPI_CHAR, all, RC_ADDR, MPI_CHAR, MPI_COMM_WORLD);
            PMPI_Allgather(me_nl, 2, MPI_INT, nl, 2, MPI_INT, MPI_COMM_WORLD);
            /* Member `n` is the address local rank 0 of node `n` gathered, found by (node, local). */
            for (int n = 0; n < nodes; n++)
                for (int r = 0; r < size; r++)
                    if (nl[2 * r] == n && nl[2 * r + 1] == 0) {
                        if (n) strcat(members, ",");
                        strncat(members, all + (size_t)r * RC_ADDR, RC_ADDR - 1);
                    }
            set("RINGCAST_UDP_MEMBERS", members);
        }
        addr_ok = all_have;
        free(all); free(nl); free(members);
    }
    int rc = addr_ok ? ringcast_init() : RINGCAST_ERR_IO;
    int ok = rc == RINGCAST_OK, all_ok = 0;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (ok) ringcast_finalize();
        rc_off = "ringcast did not start";
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: ringcast not started (%s); every call goes to PMPI\n", rank, ringcast_strerror(rc));
        return;
    }
    rc_up = 1;
    rc_off = "communicator not followed (inter-communicator, or made by a call not intercepted)";
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, rc_attr_delete, &rc_keyval, NULL);
    rc_attach(MPI_COMM_WORLD);
    if (rc_verbose && rank == 0) {
        char shape[48];
        if (uniform) snprintf(shape, sizeof shape, "x %d", ppn);
        else snprintf(shape, sizeof shape, "holding %.38s", getenv("RINGCAST_NODE_RANKS"));
        fprintf(stderr, "ringcast-mpi: %d ranks on %d node(s) %s, %s fabric, job %s, offload %s, %lld..%lld bytes\n", size, nodes, shape,
                fabric, job, rc_mode == RC_ALWAYS ? "always" : "auto", rc_min_bytes, rc_max_bytes);
    }
}

/* The program's MPI_Init: the library first, then the bootstrap (a collective over the world). */
int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv), provided = MPI_THREAD_SINGLE;
    if (rc == MPI_SUCCESS) {
        PMPI_Query_thread(&provided);
        rc_start(provided);
    }
    return rc;
}

/* As MPI_Init; the thread level granted decides whether the offload may run. */
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) rc_start(*provided);
    return rc;
}

/* Fills the last synchronization epoch of `c` with 1-byte broadcasts (every member posts the same
 * count, since every member posted the same broadcasts) so the engines can settle the
 * communicator and leave without waiting. They are posted as internal operations, finished by
 * progress like any other. */
static void rc_flush(struct rc_comm *c) {
    if (!rc_dummy) rc_dummy = ringcast_buf_new(64);
    while (rc_dummy && rc_channels && c->posted % rc_channels) {
        struct rc_op *op = calloc(1, sizeof *op);
        if (!op) break;
        if (ringcast_ibcast(c->handle, 0, rc_dummy, 0, 1, &op->id) != RINGCAST_OK) {
            free(op);
            break;
        }
        op->c = c;
        op->greq = MPI_REQUEST_NULL;
        c->refs++;
        c->inflight++;
        rc_active++;
        rc_op_link(op);
        c->posted++;
    }
}

/* MPI_Comm_free's part: fill the epoch and free the ringcast communicator, then drop the
 * attribute. With nothing of the user's in flight on it, the fillers are waited for here (polled,
 * with the library's progress: MPI_Comm_free is collective, every member is posting them) and
 * the communicator is freed at once; with an MPI_Ibcast pending, it is freed when the last
 * operation on it finishes (rc_op_finish -> rc_comm_settle). */
static void rc_detach(MPI_Comm comm) {
    struct rc_comm *c = rc_of(comm);
    if (!c) return;
    if (c->handle) {
        int pending = c->inflight > 0;
        rc_flush(c);
        c->freeing = 1;
        while (!pending && c->inflight > 0) {
            rc_poll();
            if (c->inflight > 0) rc_breathe(NULL);
        }
        rc_comm_settle(c);
    }
    PMPI_Comm_delete_attr(comm, rc_keyval);
}

/* Completes what is in flight, frees the world's communicator, detaches, unlinks the job's
 * shared memory (one rank, after a barrier), then the library's finalize. */
int MPI_Finalize(void) {
    if (rc_up) {
        /* Every broadcast posted must end before the engines go (the other ranks are finalizing
         * too, so each has posted its part). */
        while (rc_active > 0) {
            rc_poll();
            if (rc_active > 0) rc_breathe(NULL);
        }
        rc_detach(MPI_COMM_WORLD);
        for (int i = 0; i < rc_pool_n; i++) ringcast_buf_free(rc_pool[i].b);
        for (int i = 0; i < rc_wraps_n; i++) ringcast_buf_free(rc_wraps[i].b);
        rc_wraps_n = 0;
        rc_pool_n = 0;
        if (rc_dummy) ringcast_buf_free(rc_dummy);
        rc_dummy = NULL;
        ringcast_finalize();
        /* Every rank's engine is done with the job's shared memory: one rank unlinks it. */
        PMPI_Barrier(MPI_COMM_WORLD);
        if (rc_world_rank == 0) ringcast_unlink_job();
        rc_up = 0;
    }
    return PMPI_Finalize();
}

/* Communicator creation: the library's, then ours over the new communicator (collective). */
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_dup(comm, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

/* As MPI_Comm_dup (ranks given MPI_UNDEFINED get MPI_COMM_NULL and nothing of ours). */
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_split(comm, color, key, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

/* As MPI_Comm_dup. */
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_create(comm, group, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

/* Legal with an MPI_Ibcast still pending on the communicator: that operation completes normally
 * (its record holds the communicator's) and the ringcast communicator is freed after it. */
int MPI_Comm_free(MPI_Comm *comm) {
    rc_poll();
    /* Freeing a predefined communicator is erroneous: the library reports it, ours stays. */
    if (comm && *comm != MPI_COMM_NULL && *comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF) rc_detach(*comm);
    return PMPI_Comm_free(comm);
}

/* ---- broadcasts --------------------------------------------------------------------------- */

/* Raises `err` through `comm`'s error handler, as the MPI library does for its own errors. */
static int rc_error(MPI_Comm comm, int err) {
    PMPI_Comm_call_errhandler(comm, err);
    return err;
}

/* Contiguous bytes of `count` elements of `type`, or -1 if not offloadable. */
static long long rc_bytes(int count, MPI_Datatype type) {
    int n, a, d, combiner, size;
    MPI_Aint lb, extent;
    if (PMPI_Type_get_envelope(type, &n, &a, &d, &combiner) != MPI_SUCCESS) return -1;
    if (combiner != MPI_COMBINER_NAMED && combiner != MPI_COMBINER_CONTIGUOUS) return -1;
    if (PMPI_Type_size(type, &size) != MPI_SUCCESS) return -1;
    if (PMPI_Type_get_true_extent(type, &lb, &extent) != MPI_SUCCESS || lb != 0 || extent != size) return -1;
    return (long long)count * size;
}

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

/* Waits for request `id`, posted with result `rc`: polled, with the library's progress and this
 * layer's other operations in between (a blocking collective must not stop this rank's pending
 * point-to-point requests: MPI's progress rule), never sleeping in the engine. The final code. */
static int rc_await(int rc, uint64_t id) {
    for (int fin = 0; rc == RINGCAST_OK;) {
        rc = ringcast_test(id, &fin);
        if (fin || rc != RINGCAST_OK) break;
        rc_poll();
        rc_breathe(NULL);
    }
    return rc;
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
    c->posted++;
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

/* The barrier: offloaded on a communicator ringcast runs (one one-byte broadcast per engine,
 * each leaving its node once the node's ranks all arrived), else the library's, progressing. */
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
    c->posted += (unsigned)c->engines; /* one broadcast per engine */
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
    c->posted += (unsigned)c->engines;
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
    c->posted += (unsigned)c->gather_parts;
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
    c->posted += (unsigned)c->gather_parts;
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
    c->posted += (unsigned)c->size; /* one broadcast per rank */
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
    c->posted += (unsigned)c->size;
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
 * every contribution, reduces them in rank order — the same order at every rank, so every
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
    c->posted += (unsigned)c->gather_parts;
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

/* The nonblocking allreduce: the same rule and staging, a generalized request the completion
 * calls finish like an MPI_Ibcast's (the result copied out of the work buffer's start). */
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                   MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    rc_poll();
    uint8_t t = 0, o = 0;
    long long bytes = -1;
    struct rc_comm *c =
        request ? rc_decide_reduce(recvbuf, count, datatype, op, -1, comm, &t, &o, &bytes, why, sizeof why) : NULL;
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    if (!c || mine == NULL) {
        say("MPI_Iallreduce", bytes, -1, "%s", request && mine ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
    }
    int me;
    PMPI_Comm_rank(comm, &me);
    struct rc_op *rop = calloc(1, sizeof *rop);
    RingcastBuf *stage = rop ? rc_buf_get((size_t)bytes * (size_t)c->size, &rop->stage_len) : NULL;
    if (!stage) {
        free(rop);
        say("MPI_Iallreduce", bytes, -1, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    memcpy((uint8_t *)ringcast_buf_ptr(stage) + (size_t)me * (size_t)bytes, mine, (size_t)bytes);
    rop->stage = stage;
    rop->c = c;
    rop->comm = comm;
    rop->user = recvbuf;
    rop->bytes = (size_t)bytes;
    rop->root_here = 0; /* every rank gets the result: copied out of the work buffer's start */
    int rc = ringcast_iallreduce(c->handle, NULL, 0, stage, 0, (size_t)bytes, t, o, &rop->id);
    c->posted += (unsigned)c->gather_parts;
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, rop->stage_len);
        free(rop);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Iallreduce failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(rop);
    int made = rc_op_request(rop, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Iallreduce", bytes, -1, "%s", why);
    return made;
}

/* The nonblocking reduce: MPI_Iallreduce's path with ringcast's REDUCE — only the root reduces,
 * and only the root copies the result out at completion. MPI_IN_PLACE is the root's alone: at
 * another rank (an erroneous program) this rank still posts — a zeroed contribution, so no rank
 * waits for it, finished in the background — and fails with MPI_ERR_ARG, as MPI_Reduce does. */
int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request *request) {
    char why[192];
    why[0] = '\0';
    rc_poll();
    uint8_t t = 0, o = 0;
    long long bytes = -1;
    int me = -1;
    if (comm != MPI_COMM_NULL) PMPI_Comm_rank(comm, &me);
    struct rc_comm *c =
        request && root >= 0 ? rc_decide_reduce(recvbuf, count, datatype, op, root, comm, &t, &o, &bytes, why, sizeof why) : NULL;
    if (!c) {
        say("MPI_Ireduce", bytes, root, "%s", request && root >= 0 ? why : "pmpi (invalid arguments: the library reports them)");
        return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
    }
    const void *mine = sendbuf == MPI_IN_PLACE ? (me == root ? recvbuf : NULL) : sendbuf;
    struct rc_op *rop = calloc(1, sizeof *rop);
    RingcastBuf *stage = rop ? rc_buf_get((size_t)bytes * (size_t)c->size, &rop->stage_len) : NULL;
    if (!stage) {
        free(rop);
        say("MPI_Ireduce", bytes, root, "failed (no staging buffer)");
        return rc_error(comm, MPI_ERR_NO_MEM);
    }
    uint8_t *at = (uint8_t *)ringcast_buf_ptr(stage) + (size_t)me * (size_t)bytes;
    if (mine) memcpy(at, mine, (size_t)bytes);
    else memset(at, 0, (size_t)bytes);
    rop->stage = stage;
    rop->c = c;
    rop->comm = comm;
    rop->user = me == root && mine ? recvbuf : NULL; /* the result is the root's alone */
    rop->bytes = (size_t)bytes;
    rop->root_here = 0;
    int rc = ringcast_ireduce(c->handle, (uint32_t)root, NULL, 0, stage, 0, (size_t)bytes, t, o, &rop->id);
    c->posted += (unsigned)c->gather_parts;
    if (rc != RINGCAST_OK) {
        rc_buf_put(stage, rop->stage_len);
        free(rop);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Ireduce failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        return rc_error(comm, rc_class(rc));
    }
    rc_op_track(rop);
    if (!mine) {
        rop->greq = MPI_REQUEST_NULL; /* finished in the background as an internal operation */
        say("MPI_Ireduce", bytes, root, "failed (MPI_IN_PLACE at a rank other than the root, or no buffer)");
        return rc_error(comm, MPI_ERR_ARG);
    }
    int made = rc_op_request(rop, comm, request);
    if (made == MPI_SUCCESS) say("MPI_Ireduce", bytes, root, "%s", why);
    return made;
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
    c->posted++;
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

/* ---- errors of finished MPI_Ibcasts --------------------------------------------------------- */

/* What to report for request i of a set after the PMPI call completed (and freed) it. */
struct rc_err {
    int err;       /* MPI_SUCCESS: nothing of ours to report */
    MPI_Comm comm; /* whose error handler */
};

/* The error and communicator of one of ours, taken before a PMPI call frees it (a communicator
 * already freed by the user reports on MPI_COMM_WORLD, as errors without one do in MPI-3). */
static struct rc_err rc_err_of(const struct rc_op *op) {
    struct rc_err e = {MPI_SUCCESS, MPI_COMM_WORLD};
    if (op && op->done && op->err != MPI_SUCCESS) {
        e.err = op->err;
        e.comm = op->c->freeing ? MPI_COMM_WORLD : op->comm;
    }
    return e;
}

/* The errors of ours finished in a set, by index, or NULL when none failed (the usual case: no
 * allocation). Taken before the PMPI call that completes them. */
static struct rc_err *rc_errs(int n, const MPI_Request *reqs) {
    int any = 0;
    if (rc_live == 0 || n <= 0 || !reqs) return NULL;
    for (int i = 0; i < n && !any; i++) any = rc_err_of(rc_find(reqs[i])).err != MPI_SUCCESS;
    if (!any) return NULL;
    struct rc_err *e = malloc(sizeof *e * (size_t)n);
    if (e)
        for (int i = 0; i < n; i++) e[i] = rc_err_of(rc_find(reqs[i]));
    return e;
}

/* After a PMPI call completed the `k` requests `idx` (NULL: 0..k-1) of a set: if one of ours
 * among them failed, fill every completed status's MPI_ERROR and raise MPI_ERR_IN_STATUS (as
 * the library does for its own failed requests in -all/-some calls). Frees `e`. */
static int rc_report_set(int rc, struct rc_err *e, int k, const int *idx, MPI_Status *statuses) {
    if (!e) return rc;
    int first = -1;
    for (int j = 0; j < k; j++)
        if (e[idx ? idx[j] : j].err != MPI_SUCCESS && first < 0) first = idx ? idx[j] : j;
    if (first >= 0 && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS)) {
        if (statuses != MPI_STATUSES_IGNORE)
            for (int j = 0; j < k; j++) {
                int i = idx ? idx[j] : j;
                if (e[i].err != MPI_SUCCESS) statuses[j].MPI_ERROR = e[i].err;
                else if (rc == MPI_SUCCESS) statuses[j].MPI_ERROR = MPI_SUCCESS;
            }
        rc = rc_error(e[first].comm, MPI_ERR_IN_STATUS);
    }
    free(e);
    return rc;
}

/* After a PMPI call completed one request whose snapshot is `e`: report its failure, if any. */
static int rc_report_one(int rc, struct rc_err e, MPI_Status *status) {
    if (rc != MPI_SUCCESS || e.err == MPI_SUCCESS) return rc;
    if (status != MPI_STATUS_IGNORE) status->MPI_ERROR = e.err;
    return rc_error(e.comm, e.err);
}

/* ---- completion calls --------------------------------------------------------------------- */
/* Each passes straight to PMPI unless the set holds one of ours (rc_live is 0 when none exist).
 * With ours unfinished: poll the engine, then let the library progress, yield, repeat. */

/* One request: ours is polled to its end (with the library's progress), then PMPI_Wait frees it. */
int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    if (rc_live == 0 || !request) return PMPI_Wait(request, status);
    struct rc_op *op = rc_find(*request);
    if (!op) return PMPI_Wait(request, status);
    for (;;) {
        rc_poll();
        if (op->done) break;
        rc_breathe(op);
    }
    struct rc_err e = rc_err_of(op); /* PMPI_Wait runs free_fn: `op` goes */
    return rc_report_one(PMPI_Wait(request, status), e, status);
}

/* One request, without waiting: ours is polled once first. */
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    struct rc_op *op = rc_live && request ? rc_find(*request) : NULL;
    if (!op) return PMPI_Test(request, flag, status);
    rc_poll();
    struct rc_err e = rc_err_of(op);
    int rc = PMPI_Test(request, flag, status);
    return *flag ? rc_report_one(rc, e, status) : rc;
}

/* Until every one of ours in the set is finished, poll and let the library progress the rest;
 * then PMPI_Waitall (which blocks only on the library's own). */
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
    if (rc_scan(count, requests) == 0) return PMPI_Waitall(count, requests, statuses);
    for (;;) {
        rc_poll();
        const struct rc_op *op = rc_unfinished(count, requests);
        if (!op) break;
        rc_breathe(op); /* library requests of the set progress meanwhile */
    }
    struct rc_err *e = rc_errs(count, requests);
    return rc_report_set(PMPI_Waitall(count, requests, statuses), e, count, NULL, statuses);
}

/* Polls ours once, then PMPI_Testall (all or nothing, as MPI says). */
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]) {
    if (rc_scan(count, requests) == 0) return PMPI_Testall(count, requests, flag, statuses);
    rc_poll();
    struct rc_err *e = rc_errs(count, requests);
    int rc = PMPI_Testall(count, requests, flag, statuses);
    if (*flag) return rc_report_set(rc, e, count, NULL, statuses);
    free(e);
    return rc;
}

/* Testany with our error reporting: the body of MPI_Testany and of MPI_Waitany's loop. */
static int rc_testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    rc_poll();
    struct rc_err *e = rc_errs(count, requests);
    int rc = PMPI_Testany(count, requests, index, flag, status);
    if (e && *flag && *index != MPI_UNDEFINED) rc = rc_report_one(rc, e[*index], status);
    free(e);
    return rc;
}

/* Polls ours and tests the whole set until one completes: never blocks on either kind. */
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status) {
    if (rc_scan(count, requests) == 0) return PMPI_Waitany(count, requests, index, status);
    for (;;) {
        int flag = 0, rc = rc_testany(count, requests, index, &flag, status);
        if (rc != MPI_SUCCESS || flag) return rc;
        sched_yield();
    }
}

/* Polls ours once, then PMPI_Testany. */
int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status) {
    if (rc_scan(count, requests) == 0) return PMPI_Testany(count, requests, index, flag, status);
    return rc_testany(count, requests, index, flag, status);
}

/* Testsome with our error reporting: the body of MPI_Testsome and of MPI_Waitsome's loop. */
static int rc_testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    rc_poll();
    struct rc_err *e = rc_errs(incount, requests);
    int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    if (*outcount > 0) return rc_report_set(rc, e, *outcount, indices, statuses);
    free(e);
    return rc;
}

/* Polls ours and tests the whole set until some complete (or none is active). */
int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    if (rc_scan(incount, requests) == 0) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
    for (;;) {
        int rc = rc_testsome(incount, requests, outcount, indices, statuses);
        if (rc != MPI_SUCCESS || *outcount != 0) return rc; /* MPI_UNDEFINED: nothing active */
        sched_yield();
    }
}

/* Polls ours once, then PMPI_Testsome. */
int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[], MPI_Status statuses[]) {
    if (rc_scan(incount, requests) == 0) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
    return rc_testsome(incount, requests, outcount, indices, statuses);
}

/* Freeing an active MPI_Ibcast request (erroneous for collectives in MPI-3, allowed here): the
 * broadcast still runs to its end — the other ranks are in it — and delivers, and the next
 * progress of ours reclaims its staging buffer; MPI calls free_fn after our completion. */
int MPI_Request_free(MPI_Request *request) {
    if (rc_live && request) {
        struct rc_op *op = rc_find(*request);
        if (op && !op->done) op->orphan = 1;
    }
    return PMPI_Request_free(request);
}

/* Does not free the request: a failure is reported each time it is asked. */
int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    struct rc_op *op = rc_live ? rc_find(request) : NULL;
    if (!op) return PMPI_Request_get_status(request, flag, status);
    rc_poll();
    int rc = PMPI_Request_get_status(request, flag, status);
    return *flag ? rc_report_one(rc, rc_err_of(op), status) : rc;
}
