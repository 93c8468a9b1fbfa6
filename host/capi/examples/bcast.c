/* A C program on a ringcast cluster: broadcasts of every size from every root on the job's
 * world communicator through libringcast (blocking and non-blocking), two allgathers (in place
 * and from a send buffer), a blocking allreduce, reduce and alltoall, two barriers (rank 0
 * arriving last), every byte checked, and the typed errors of bad calls. Run it on every rank of `ringcast run -n N -p P -- ./bcast`;
 * exits non-zero on any wrong byte or status. */
#include <ringcast.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned char pattern(unsigned k, size_t i) { return (unsigned char)(k * 131u + i * 7u + (i >> 9)); }

static int fail(int me, const char *what, int rc) {
    fprintf(stderr, "rank %d: %s: %s (%d)\n", me, what, ringcast_strerror(rc), rc);
    return 1;
}

int main(void) {
    int rc = ringcast_init();
    if (rc != RINGCAST_OK) return fail(-1, "ringcast_init", rc);
    int me = ringcast_rank(), n = ringcast_size();
    const size_t sizes[] = {1, 100, 4096, 65536, 1 << 20};
    RingcastBuf *b = ringcast_buf_new(1 << 20);
    if (b == NULL) return fail(me, "ringcast_buf_new", RINGCAST_ERR_IO);
    unsigned char *p = ringcast_buf_ptr(b);
    unsigned k = 0;
    for (int root = 0; root < n; root++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++, k++) {
            size_t len = sizes[s];
            for (size_t i = 0; i < len; i++) p[i] = me == root ? pattern(k, i) : 0xEE;
            if (k % 2 == 0) {
                rc = ringcast_bcast(0, (uint32_t)root, b, 0, len);
            } else {
                uint64_t req;
                int done = 0;
                rc = ringcast_ibcast(0, (uint32_t)root, b, 0, len, &req);
                while (rc == RINGCAST_OK && !done) rc = ringcast_test(req, &done);
            }
            if (rc != RINGCAST_OK) return fail(me, "broadcast", rc);
            for (size_t i = 0; i < len; i++) {
                if (p[i] != pattern(k, i)) {
                    fprintf(stderr, "rank %d: broadcast %u (%zu B from %d): wrong byte at %zu\n", me, k, len, root, i);
                    return 1;
                }
            }
        }
    }
    /* Allgathers: 1000 bytes from every rank, in place and from a send buffer. */
    const size_t blk = 1000;
    RingcastBuf *send = ringcast_buf_new(blk);
    if (send == NULL || (size_t)n * blk > (1 << 20)) return fail(me, "allgather buffers", RINGCAST_ERR_IO);
    unsigned char *sp = ringcast_buf_ptr(send);
    for (int g = 0; g < 2; g++, k++) {
        memset(p, 0xEE, (size_t)n * blk);
        unsigned char *mine = g == 0 ? p + (size_t)me * blk : sp;
        for (size_t i = 0; i < blk; i++) mine[i] = pattern(k + (unsigned)me * 977u, i);
        rc = ringcast_allgather(0, g == 0 ? NULL : send, 0, b, 0, blk);
        if (rc != RINGCAST_OK) return fail(me, "allgather", rc);
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < blk; i++)
                if (p[(size_t)r * blk + i] != pattern(k + (unsigned)r * 977u, i)) {
                    fprintf(stderr, "rank %d: allgather %d: block of rank %d wrong at %zu\n", me, g, r, i);
                    return 1;
                }
    }
    if ((rc = ringcast_allgather(0, NULL, 0, b, 0, 0)) != RINGCAST_ERR_INVALID) return fail(me, "allgather of 0 bytes", rc);
    ringcast_buf_free(send);
    /* The blocking reductions and alltoall: 100 int32 per rank summed everywhere, their maximum
     * at the last rank, 100 bytes from every rank to every rank. */
    int32_t *w = (int32_t *)p;
    for (int op = 0; op < 2; op++) {
        for (int i = 0; i < 100; i++) w[me * 100 + i] = me * 3 + i;
        rc = op == 0 ? ringcast_allreduce(0, NULL, 0, b, 0, 400, RINGCAST_TYPE_INT32, RINGCAST_OP_SUM)
                     : ringcast_reduce(0, (uint32_t)n - 1, NULL, 0, b, 0, 400, RINGCAST_TYPE_INT32, RINGCAST_OP_MAX);
        if (rc != RINGCAST_OK) return fail(me, op == 0 ? "allreduce" : "reduce", rc);
        for (int i = 0; i < 100 && (op == 0 || me == n - 1); i++) {
            int32_t want = op == 0 ? 3 * n * (n - 1) / 2 + n * i : 3 * (n - 1) + i;
            if (w[i] != want) {
                fprintf(stderr, "rank %d: %s element %d is %d, not %d\n", me, op == 0 ? "allreduce" : "reduce", i, w[i], want);
                return 1;
            }
        }
    }
    size_t whole = 100 * (size_t)n, send_at = whole * ((size_t)n + 1);
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < 100; i++) p[send_at + (size_t)q * 100 + i] = (unsigned char)(me * 7 + q * 11 + i);
    if ((rc = ringcast_alltoall(0, b, send_at, b, 0, 100)) != RINGCAST_OK) return fail(me, "alltoall", rc);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < 100; i++)
            if (p[(size_t)r * 100 + i] != (unsigned char)(r * 7 + me * 11 + i)) {
                fprintf(stderr, "rank %d: alltoall: block of rank %d wrong at %zu\n", me, r, i);
                return 1;
            }
    /* Checked before anything is posted, like every other collective's ranges. */
    uint64_t req;
    if ((rc = ringcast_ialltoall(0, b, (1 << 20) + 5, b, 0, 100, &req)) != RINGCAST_ERR_INVALID) return fail(me, "alltoall past the buffer", rc);
    /* Barriers (blocking, then non-blocking): rank 0 arrives last, after a nap, and says when
     * it arrived (a broadcast right after); no rank may have left before that — a causal check
     * on one machine's clock, no timing bound. */
    for (int i = 0; i < 2; i++) {
        struct timespec t, nap = {0, 50 * 1000 * 1000};
        if (me == 0) nanosleep(&nap, NULL);
        clock_gettime(CLOCK_REALTIME, &t);
        double arrived = (double)t.tv_sec + (double)t.tv_nsec * 1e-9, left;
        if (i == 0) {
            rc = ringcast_barrier(0);
        } else {
            uint64_t req;
            rc = ringcast_ibarrier(0, &req);
            if (rc == RINGCAST_OK) rc = ringcast_wait(req);
        }
        if (rc != RINGCAST_OK) return fail(me, "barrier", rc);
        clock_gettime(CLOCK_REALTIME, &t);
        left = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
        memcpy(p, &arrived, sizeof arrived);
        if ((rc = ringcast_bcast(0, 0, b, 0, sizeof arrived)) != RINGCAST_OK) return fail(me, "barrier's arrival time", rc);
        memcpy(&arrived, p, sizeof arrived);
        if (left < arrived) {
            fprintf(stderr, "rank %d: barrier %d: left at %.6f, before rank 0 arrived at %.6f\n", me, i, left, arrived);
            return 1;
        }
    }
    if ((rc = ringcast_barrier(0xdead)) != RINGCAST_ERR_UNKNOWN_COMMUNICATOR) return fail(me, "barrier on an unknown communicator", rc);
    /* Bad calls get typed errors, and the rank goes on. */
    if ((rc = ringcast_bcast(0, 0, b, (1 << 20) - 8, 16)) != RINGCAST_ERR_INVALID) return fail(me, "range past the buffer", rc);
    if ((rc = ringcast_bcast(0xdead, 0, b, 0, 8)) != RINGCAST_ERR_UNKNOWN_COMMUNICATOR) return fail(me, "unknown communicator", rc);
    if ((rc = ringcast_bcast(0, (uint32_t)n + 5, b, 0, 8)) != RINGCAST_ERR_BAD_ROOT) return fail(me, "root outside", rc);
    if ((rc = ringcast_wait(424242)) != RINGCAST_ERR_NO_REQUEST) return fail(me, "wait on nothing", rc);
    if (strcmp(ringcast_strerror(RINGCAST_ERR_COMMUNICATOR_BROKEN), ringcast_strerror(-999)) == 0)
        return fail(me, "strerror", RINGCAST_ERR_COMMUNICATOR_BROKEN);
    /* No padding of the last synchronization epoch: ringcast_finalize settles it with the other
     * engines, whatever the number of broadcasts. */
    ringcast_buf_free(b);
    if ((rc = ringcast_finalize()) != RINGCAST_OK) return fail(me, "ringcast_finalize", rc);
    printf("rank %d of %d: %u broadcasts, 2 allgathers, an allreduce, a reduce, an alltoall and 2 barriers verified\n", me, n, k - 2);
    return 0;
}
