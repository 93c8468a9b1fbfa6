/* Non-blocking broadcasts on two communicators, started in different orders at different
 * ranks and finished in any order — what MPI allows (collectives on one communicator are called
 * in the same order at every rank; those on different communicators in any relative order, and
 * non-blocking ones completed in any order). Three parts, every byte checked:
 *
 * 1. the loop: one thread per process advances a broadcast on each of two communicators
 *    independently (one in flight on each, roots k % n, lengths of one to several fragments),
 *    choosing which to post or test next by a random draw of its own — so the ranks (and the
 *    processes of one node) post the two communicators' calls in different orders;
 * 2. opposite orders: even ranks post c1 then c2 and wait in that order, odd ranks c2 then c1;
 * 3. the A/B program (the completion of a later call needed before an earlier call's other half
 *    is posted): rank 0 posts c1 and c2, waits for c2 only, then broadcasts on the world (its
 *    "send"); rank 1 posts c2, waits for it, takes part in the world broadcast (its "receive")
 *    and only then posts c1. A host whose completions are published in posting order never sees
 *    rank 0's c2 complete: its c1 waits for rank 1's, which waits for rank 0's "send".
 *
 * Before the fix each part hung (an engine took a host's descriptors only while nothing of that
 * host was in flight, and published its completions in posting order). Here no wait is longer
 * than RINGCAST_TWO_COMMS_WAIT_S (default 30 s): a part that stops making progress fails with
 * what this rank posted and saw instead of hanging. Run it on every rank of
 * `ringcast run -n N -p P -- ./two_comms` (N * P >= 2); exits non-zero on any failure. */
#include <ringcast.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 150  /* broadcasts per communicator in the loop */
#define MAXLEN 5000 /* bytes per broadcast: up to several fragments */

static int me, n;
static int crank[2]; /* this process's rank in each communicator */
static double limit_s = 30;

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned char pattern(int c, int k, size_t i) { return (unsigned char)(c * 101 + k * 31 + i * 13 + (i >> 8)); }
static size_t len_of(int c, int k) { return 1 + (size_t)(k * 397 + c * 1009) % MAXLEN; }

static int fail(const char *what, int rc) {
    fprintf(stderr, "rank %d: %s: %s (%d)\n", me, what, ringcast_strerror(rc), rc);
    return 1;
}

/* Fills communicator c's buffer for its broadcast k: the pattern at the root, poison elsewhere. */
static void fill(RingcastBuf *b, int c, int k, int root) {
    unsigned char *p = ringcast_buf_ptr(b);
    for (size_t i = 0; i < len_of(c, k); i++) p[i] = crank[c] == root ? pattern(c, k, i) : 0xEE;
}

static int check(RingcastBuf *b, int c, int k) {
    unsigned char *p = ringcast_buf_ptr(b);
    for (size_t i = 0; i < len_of(c, k); i++)
        if (p[i] != pattern(c, k, i)) return 0;
    return 1;
}

/* Waits for `rq` by ringcast_test for at most the limit: 0 when it completed OK. */
static int finish(uint64_t rq, const char *what) {
    double end = seconds() + limit_s;
    for (;;) {
        int done = 0, rc = ringcast_test(rq, &done);
        if (rc != RINGCAST_OK) return fail(what, rc);
        if (done) return 0;
        if (seconds() > end) {
            fprintf(stderr, "rank %d: %s: no completion within %.0f s (a hang)\n", me, what, limit_s);
            return 1;
        }
    }
}

/* Part 1. */
static int loop(uint64_t comms[2], RingcastBuf *bufs[2]) {
    int k[2] = {0, 0}, posted[2] = {0, 0};
    uint64_t rq[2] = {0, 0};
    unsigned seed = 0x9e3779b9u * (unsigned)(me + 1);
    double last = seconds();
    char order[64] = "";
    size_t o = 0;
    while (k[0] < ROUNDS || k[1] < ROUNDS) {
        seed = seed * 1103515245u + 12345u;
        int c = (int)((seed >> 16) & 1);
        if (k[c] >= ROUNDS) c = 1 - c;
        if (!posted[c]) {
            int root = k[c] % n;
            fill(bufs[c], c, k[c], root);
            int rc = ringcast_ibcast(comms[c], (uint32_t)root, bufs[c], 0, len_of(c, k[c]), &rq[c]);
            if (rc != RINGCAST_OK) return fail("ringcast_ibcast (loop)", rc);
            posted[c] = 1;
            if (o + 1 < sizeof order) order[o++] = (char)('1' + c);
        } else {
            int done = 0, rc = ringcast_test(rq[c], &done);
            if (rc != RINGCAST_OK) return fail("ringcast_test (loop)", rc);
            if (done) {
                if (!check(bufs[c], c, k[c])) {
                    fprintf(stderr, "rank %d: loop: communicator %d broadcast %d: a wrong byte\n", me, c + 1, k[c]);
                    return 1;
                }
                posted[c] = 0;
                k[c]++;
                last = seconds();
            } else if (seconds() - last > limit_s) {
                fprintf(stderr,
                        "rank %d: loop: no completion for %.0f s (a hang): c1 at %d (%s), c2 at %d (%s)\n",
                        me, limit_s, k[0], posted[0] ? "posted" : "idle", k[1], posted[1] ? "posted" : "idle");
                return 1;
            }
        }
    }
    order[o] = 0;
    printf("rank %d: loop: %d broadcasts on each of two communicators, posted in the order %s...\n", me, ROUNDS,
           order);
    return 0;
}

/* Part 2. */
static int opposite(uint64_t comms[2], RingcastBuf *bufs[2]) {
    for (int k = ROUNDS; k < ROUNDS + 40; k++) {
        int first = me % 2, root = (k / 2) % n;
        uint64_t rq[2];
        for (int j = 0; j < 2; j++) {
            int c = j == 0 ? first : 1 - first;
            fill(bufs[c], c, k, root);
            int rc = ringcast_ibcast(comms[c], (uint32_t)root, bufs[c], 0, len_of(c, k), &rq[c]);
            if (rc != RINGCAST_OK) return fail("ringcast_ibcast (opposite orders)", rc);
        }
        for (int j = 0; j < 2; j++) {
            int c = j == 0 ? first : 1 - first;
            if (finish(rq[c], c ? "opposite orders, c2" : "opposite orders, c1")) return 1;
            if (!check(bufs[c], c, k)) return fail("opposite orders: a wrong byte", RINGCAST_OK);
        }
    }
    printf("rank %d: opposite orders: 40 pairs, posted %s\n", me, me % 2 ? "c2 then c1" : "c1 then c2");
    return 0;
}

/* Part 3. `msg` carries rank 0's "send" on the world. */
static int ab(uint64_t comms[2], RingcastBuf *bufs[2], RingcastBuf *msg) {
    for (int k = ROUNDS + 40; k < ROUNDS + 60; k++) {
        int root = k % n;
        uint64_t rq[2];
        unsigned char *m = ringcast_buf_ptr(msg);
        m[0] = me == 0 ? (unsigned char)k : 0;
        if (me == 1) {
            fill(bufs[1], 1, k, root);
            int rc = ringcast_ibcast(comms[1], (uint32_t)root, bufs[1], 0, len_of(1, k), &rq[1]);
            if (rc != RINGCAST_OK) return fail("ringcast_ibcast (A/B, c2 at B)", rc);
            if (finish(rq[1], "A/B: B waits for c2")) return 1;
            if ((rc = ringcast_bcast(0, 0, msg, 0, 1)) != RINGCAST_OK) return fail("A/B: B's receive", rc);
            if (m[0] != (unsigned char)k) return fail("A/B: B received a wrong byte", RINGCAST_OK);
            fill(bufs[0], 0, k, root);
            rc = ringcast_ibcast(comms[0], (uint32_t)root, bufs[0], 0, len_of(0, k), &rq[0]);
            if (rc != RINGCAST_OK) return fail("ringcast_ibcast (A/B, c1 at B)", rc);
            if (finish(rq[0], "A/B: B waits for c1")) return 1;
        } else {
            /* Rank 0 (A), and any other rank posting both before the world broadcast. */
            for (int c = 0; c < 2; c++) {
                fill(bufs[c], c, k, root);
                int rc = ringcast_ibcast(comms[c], (uint32_t)root, bufs[c], 0, len_of(c, k), &rq[c]);
                if (rc != RINGCAST_OK) return fail("ringcast_ibcast (A/B, A)", rc);
            }
            if (finish(rq[1], "A/B: A waits for c2 (its c1 still owed)")) return 1;
            int rc = ringcast_bcast(0, 0, msg, 0, 1);
            if (rc != RINGCAST_OK) return fail("A/B: A's send", rc);
            if (finish(rq[0], "A/B: A waits for c1")) return 1;
        }
        for (int c = 0; c < 2; c++)
            if (!check(bufs[c], c, k)) return fail("A/B: a wrong byte", RINGCAST_OK);
    }
    printf("rank %d: A/B program: 20 rounds\n", me);
    return 0;
}

int main(void) {
    int rc = ringcast_init();
    if (rc != RINGCAST_OK) return fail("ringcast_init", rc);
    me = ringcast_rank();
    n = ringcast_size();
    const char *w = getenv("RINGCAST_TWO_COMMS_WAIT_S");
    if (w) limit_s = atof(w);
    if (n < 2) {
        printf("SKIP: one rank\n");
        return ringcast_finalize() == RINGCAST_OK ? 0 : 1;
    }
    /* Two communicators of every rank: the second in reversed rank order. Rank 0 draws both
     * identities; one world broadcast hands them out. */
    RingcastIdentity ids[2];
    RingcastBuf *msg = ringcast_buf_new(sizeof ids);
    if (!msg) return fail("ringcast_buf_new", RINGCAST_ERR_IO);
    if (me == 0)
        for (int c = 0; c < 2; c++)
            if ((rc = ringcast_new_identity(&ids[c])) != RINGCAST_OK) return fail("ringcast_new_identity", rc);
    memcpy(ringcast_buf_ptr(msg), ids, sizeof ids);
    if ((rc = ringcast_bcast(0, 0, msg, 0, sizeof ids)) != RINGCAST_OK) return fail("handing out identities", rc);
    memcpy(ids, ringcast_buf_ptr(msg), sizeof ids);
    uint32_t *members = malloc(sizeof(uint32_t) * (size_t)n * 2);
    if (!members) return 1;
    for (int r = 0; r < n; r++) {
        members[r] = (uint32_t)r;
        members[n + r] = (uint32_t)(n - 1 - r);
    }
    uint64_t comms[2];
    for (int c = 0; c < 2; c++) {
        crank[c] = c == 0 ? me : n - 1 - me;
        if ((rc = ringcast_comm_create(&ids[c], (uint32_t)crank[c], members + c * n, (uint32_t)n)) != RINGCAST_OK)
            return fail("ringcast_comm_create", rc);
        comms[c] = ids[c].handle;
    }
    /* Roots below are communicator ranks (the second's rank r is world rank n - 1 - r). */
    RingcastBuf *bufs[2] = {ringcast_buf_new(MAXLEN), ringcast_buf_new(MAXLEN)};
    if (!bufs[0] || !bufs[1]) return fail("ringcast_buf_new", RINGCAST_ERR_IO);
    if (loop(comms, bufs) || opposite(comms, bufs) || ab(comms, bufs, msg)) return 1;
    for (int c = 0; c < 2; c++)
        if ((rc = ringcast_comm_free(comms[c])) != RINGCAST_OK) return fail("ringcast_comm_free", rc);
    for (int c = 0; c < 2; c++) ringcast_buf_free(bufs[c]);
    ringcast_buf_free(msg);
    free(members);
    if ((rc = ringcast_finalize()) != RINGCAST_OK) return fail("ringcast_finalize", rc);
    return 0;
}
