/* Operations in flight and the completion calls of libringcast_mpi.so (rc_internal.h).
 *
 * Every offloaded call is one operation: posted in the engine, then polled (rc_poll: ringcast_test
 * on each, never waiting in the engine) until the engine is done with it, its result unpacked
 * into the user's memory (struct rc_out) and its staging buffer given back. A non-blocking call's
 * operation is handed to the user as a generalized request (MPI_Grequest_start) completed here
 * (MPI_Grequest_complete); a blocking call's is waited for by its caller (rc_op_wait: polled with
 * the library's progress in between); an erroneous call's or an orphaned request's finishes in
 * the background.
 *
 * The MPI library cannot progress a generalized request, so the completion calls (MPI_Wait/Test
 * and their -all/-any/-some forms, MPI_Request_free, MPI_Request_get_status) are intercepted: a
 * set without one of ours goes straight to PMPI (a counter check); with ours, they poll the
 * engine and let the library progress the rest (PMPI_Test*) until ours are done — never blocking
 * in the engine, so the library's own requests keep moving. Errors of ours are reported as the
 * library reports its own non-blocking collectives' (the status's MPI_ERROR, MPI_ERR_IN_STATUS,
 * the communicator's error handler); the library itself is always told success (rc_query_fn).
 *
 * Threads (MPI_THREAD_MULTIPLE): the list and the operations' fields change under RC_LOCK; an
 * operation is finished by whichever thread's rc_poll finds it done (`finishing` claims it),
 * outside the lock (MPI_Unpack, MPI_Grequest_complete); it is freed once both MPI freed the
 * request (free_fn) and MPI_Grequest_complete returned (`completed`), whichever comes last. */
#include "rc_internal.h"

RC_HIDDEN int rc_live;   /* user requests whose free_fn has not run: the fast-path check */
RC_HIDDEN int rc_active; /* operations not finished in the engine */
static struct rc_op *rc_ops; /* every unreclaimed operation */

static int rc_query_fn(void *extra, MPI_Status *status);
static int rc_free_fn(void *extra);
static int rc_cancel_fn(void *extra, int complete);

/* `op`, posted in the engine, joins the operations in flight on its communicator. */
RC_HIDDEN void rc_op_track(struct rc_op *op) {
    RC_LOCK();
    op->c->refs++;
    op->c->inflight++;
    op->prev = NULL;
    op->next = rc_ops;
    if (rc_ops) rc_ops->prev = op;
    rc_ops = op;
    RC_ADD(rc_active, 1);
    RC_UNLOCK();
}

/* Takes `op` off the list, drops its communicator reference and frees it (under the lock). */
static void rc_op_free_locked(struct rc_op *op) {
    if (op->prev) op->prev->next = op->next;
    else rc_ops = op->next;
    if (op->next) op->next->prev = op->prev;
    rc_comm_release(op->c);
    free(op);
}

/* A blocking call's operation, waited for: its caller is done with it. */
RC_HIDDEN void rc_op_release(struct rc_op *op) {
    RC_LOCK();
    rc_op_free_locked(op);
    RC_UNLOCK();
}

/* Hands tracked `op` to the user as a generalized request in `*request`: MPI_SUCCESS, or —
 * no request could be made — MPI_ERR_INTERN through `comm`'s handler, the engine finishing `op`
 * in the background. */
RC_HIDDEN int rc_op_request(struct rc_op *op, MPI_Comm comm, MPI_Request *request) {
    MPI_Request r;
    /* `op` is `handing` (rc_collectives.c sets it before tracking): another thread's rc_poll may
     * finish it meanwhile, but leaves it to us — neither freed nor completed. */
    if (PMPI_Grequest_start(rc_query_fn, rc_free_fn, rc_cancel_fn, op, &r) != MPI_SUCCESS) {
        RC_LOCK();
        op->handing = 0;
        op->out.buf = NULL;
        if (op->done) rc_op_free_locked(op); /* else finished in the background */
        RC_UNLOCK();
        return rc_error(comm, MPI_ERR_INTERN);
    }
    RC_LOCK();
    op->greq = r;
    op->handing = 0;
    int done = op->done;
    RC_ADD(rc_live, 1);
    RC_UNLOCK();
    *request = r;
    if (done) {
        /* Finished before its request existed: completed here instead. */
        PMPI_Grequest_complete(r);
        RC_LOCK();
        op->completed = 1;
        if (op->mpi_freed) rc_op_free_locked(op);
        RC_UNLOCK();
    }
    return MPI_SUCCESS;
}

/* The engine finished `op` (claimed by this thread) with code `rc`: the data out, the staging
 * buffer back, a communicator being freed settled, the generalized request completed. */
static void rc_op_finish(struct rc_op *op, int rc) {
    int err = op->fail ? op->fail : rc_class(rc);
    if (rc == RINGCAST_OK && !op->fail && op->out.buf && rc_unpack(&op->out, ringcast_buf_ptr(op->stage)) != MPI_SUCCESS)
        err = MPI_ERR_TRUNCATE;
    if (op->out.dup) PMPI_Type_free(&op->out.type);
    if (rc != RINGCAST_OK && rc_verbose)
        fprintf(stderr, "ringcast-mpi[%d]: a collective failed: %s\n", rc_world_rank, ringcast_strerror(rc));
    RC_LOCK();
    if (op->wrapped) {
        if (rc != RINGCAST_OK) rc_wrap_drop(op->stage);
    } else {
        rc_buf_put(op->stage, op->stage_len);
    }
    op->stage = NULL;
    op->err = err;
    op->c->inflight--;
    rc_comm_settle(op->c);
    MPI_Request greq = op->greq;
    int background = greq == MPI_REQUEST_NULL && !op->blocking && !op->handing;
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
    RC_ADD(rc_active, -1);
    if (background) rc_op_free_locked(op);
    RC_UNLOCK();
    if (greq == MPI_REQUEST_NULL) return;
    /* MPI may run free_fn inside (a request the user already freed): it takes the lock. */
    PMPI_Grequest_complete(greq);
    RC_LOCK();
    op->completed = 1;
    if (op->mpi_freed) rc_op_free_locked(op);
    RC_UNLOCK();
}

/* Progresses every unfinished operation (the user's, and those finished in the background): the
 * engine asked about each without waiting; those it finished are finished here, outside the lock.
 * A library error (engine gone, unknown request) finishes one too: no wait outlives the engine. */
RC_HIDDEN void rc_poll(void) {
    if (RC_LOAD(rc_active) == 0) return;
    struct rc_op *done[RC_POLL_BATCH];
    int codes[RC_POLL_BATCH], n = 0;
    RC_LOCK();
    for (struct rc_op *op = rc_ops; op && n < RC_POLL_BATCH; op = op->next) {
        if (op->done || op->finishing) continue;
        int fin = 0, rc = ringcast_test(op->id, &fin);
        if (fin || rc != RINGCAST_OK) {
            op->finishing = 1;
            done[n] = op;
            codes[n++] = rc;
        }
    }
    RC_UNLOCK();
    for (int i = 0; i < n; i++) rc_op_finish(done[i], codes[i]);
}

/* Lets the MPI library progress its own requests while we wait for ours — its progress engine
 * runs inside any test call: PMPI_Test on `probe`, one of our unfinished requests (a copy of the
 * handle: unfinished, it completes nothing), or an MPI_Iprobe without one — and gives the core
 * away: engine threads and other ranks may share it. At MPI_THREAD_MULTIPLE always MPI_Iprobe:
 * another thread may complete `probe` meanwhile, and PMPI_Test on the copy would then free the
 * request the caller still holds (MPICH asserts on the second free; seen by the matrix). */
RC_HIDDEN void rc_breathe(const struct rc_op *probe) {
    int flag = 0;
    MPI_Request r = probe && !rc_threaded ? probe->greq : MPI_REQUEST_NULL;
    if (r != MPI_REQUEST_NULL) PMPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    else PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    sched_yield();
}

/* Waits for a blocking call's `op` (polled, the library's progress in between: a blocking
 * collective must not stop this rank's pending point-to-point requests — MPI's progress rule);
 * its MPI error code. The caller releases `op`. */
RC_HIDDEN int rc_op_wait(struct rc_op *op) {
    for (;;) {
        rc_poll();
        if (RC_LOAD(op->done)) break;
        rc_breathe(NULL);
    }
    return op->err;
}

/* Every operation finished in the engine (MPI_Finalize: the other ranks are finalizing too, so
 * each has posted its part). */
RC_HIDDEN void rc_drain(void) {
    while (RC_LOAD(rc_active) > 0) {
        rc_poll();
        if (RC_LOAD(rc_active) > 0) rc_breathe(NULL);
    }
}

/* The live operation whose generalized request is `r`, or NULL. */
static struct rc_op *rc_find(MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return NULL;
    RC_LOCK();
    struct rc_op *op = rc_ops;
    for (; op; op = op->next)
        if (op->greq == r && !op->orphan && !op->mpi_freed) break;
    RC_UNLOCK();
    return op;
}

/* Whether any of `n` requests is ours (1), and whether one of them is not finished yet (2). */
static int rc_scan(int n, const MPI_Request *reqs) {
    int any = 0;
    if (RC_LOAD(rc_live) == 0 || n <= 0 || !reqs) return 0;
    for (int i = 0; i < n; i++) {
        struct rc_op *op = rc_find(reqs[i]);
        if (op && !RC_LOAD(op->done)) return 2;
        if (op) any = 1;
    }
    return any;
}

/* One of ours in the set that is not finished, or NULL. */
static const struct rc_op *rc_unfinished(int n, const MPI_Request *reqs) {
    for (int i = 0; i < n; i++) {
        const struct rc_op *op = rc_find(reqs[i]);
        if (op && !RC_LOAD(op->done)) return op;
    }
    return NULL;
}

/* Generalized request: the status of a finished operation (MPI calls it from Wait/Test/
 * Request_get_status). The count is in bytes; source and tag as for any collective. The library
 * is always told success: Open MPI raises a generalized request's error on MPI_COMM_WORLD, not on
 * the call's communicator, so a program with MPI_ERRORS_RETURN on its communicator would abort.
 * The completion calls report an error themselves, as the library does for its own
 * non-blocking collectives. Reads only what never changes after the call: no lock. */
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

/* Generalized request: MPI freed the request (after completion, the standard's rule). */
static int rc_free_fn(void *extra) {
    struct rc_op *op = extra;
    RC_LOCK();
    op->mpi_freed = 1;
    RC_ADD(rc_live, -1);
    if (op->completed) rc_op_free_locked(op); /* else rc_op_finish frees it */
    RC_UNLOCK();
    return MPI_SUCCESS;
}

/* Generalized request: a started collective cannot be cancelled (the other ranks are in it). */
static int rc_cancel_fn(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

/* ---- errors of finished operations ------------------------------------------------------- */

/* What to report for request i of a set after the PMPI call completed (and freed) it. */
struct rc_err {
    int err;       /* MPI_SUCCESS: nothing of ours to report */
    MPI_Comm comm; /* whose error handler */
};

/* The error and communicator of one of ours, taken before a PMPI call frees it (a communicator
 * already freed by the user reports on MPI_COMM_WORLD, as errors without one do in MPI-3). */
static struct rc_err rc_err_of(const struct rc_op *op) {
    struct rc_err e = {MPI_SUCCESS, MPI_COMM_WORLD};
    if (op && RC_LOAD(op->done) && op->err != MPI_SUCCESS) {
        e.err = op->err;
        e.comm = op->c->freeing ? MPI_COMM_WORLD : op->comm;
    }
    return e;
}

/* The errors of ours finished in a set, by index, or NULL when none failed (the usual case: no
 * allocation). Taken before the PMPI call that completes them. */
static struct rc_err *rc_errs(int n, const MPI_Request *reqs) {
    int any = 0;
    if (RC_LOAD(rc_live) == 0 || n <= 0 || !reqs) return NULL;
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
    if (RC_LOAD(rc_live) == 0 || !request) return PMPI_Wait(request, status);
    struct rc_op *op = rc_find(*request);
    if (!op) return PMPI_Wait(request, status);
    for (;;) {
        rc_poll();
        if (RC_LOAD(op->done)) break;
        rc_breathe(op);
    }
    struct rc_err e = rc_err_of(op); /* PMPI_Wait runs free_fn: `op` goes */
    return rc_report_one(PMPI_Wait(request, status), e, status);
}

/* One request, without waiting: ours is polled once first. */
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    struct rc_op *op = RC_LOAD(rc_live) && request ? rc_find(*request) : NULL;
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

/* Freeing an active request of ours (erroneous for collectives in MPI-3, allowed here): the
 * broadcast still runs to its end — the other ranks are in it — and delivers, and the next
 * progress of ours reclaims its staging buffer; MPI calls free_fn after our completion. */
int MPI_Request_free(MPI_Request *request) {
    if (RC_LOAD(rc_live) && request) {
        struct rc_op *op = rc_find(*request);
        RC_LOCK();
        if (op && !op->done) op->orphan = 1;
        RC_UNLOCK();
    }
    return PMPI_Request_free(request);
}

/* Does not free the request: a failure is reported each time it is asked. */
int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status) {
    struct rc_op *op = RC_LOAD(rc_live) ? rc_find(request) : NULL;
    if (!op) return PMPI_Request_get_status(request, flag, status);
    rc_poll();
    int rc = PMPI_Request_get_status(request, flag, status);
    return *flag ? rc_report_one(rc, rc_err_of(op), status) : rc;
}
