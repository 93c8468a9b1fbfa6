/* libringcast from two threads of each process (what an MPI_THREAD_MULTIPLE program does through
 * the interposer): one thread posts broadcasts on the world communicator (every root in turn,
 * blocking and non-blocking) and hands each non-blocking request to the other thread, which
 * finishes it — by ringcast_wait or by ringcast_test — and checks every byte; meanwhile both
 * register and free buffers and the waiting thread calls ringcast_progress and ringcast_rank.
 * A blocking call holding the library's lock while it waits would stall the other thread's calls
 * for the whole wait (the test would still pass, slower); a library without a lock would corrupt
 * the attachment's rings or its stash of completions (wrong bytes, lost requests, crashes).
 *
 * Collectives on two communicators from two threads at once are not in this test: the engines
 * today hang when two communicators' collectives interleave in different orders at different
 * processes or engines — a single-threaded program posting non-blocking collectives on two
 * communicators that way hangs as well (docs/mpi.md, Limits).
 * Run on every rank of `ringcast run -n N -p P -- ./threads`; exits non-zero on any wrong byte
 * or status. */
#include <pthread.h>
#include <ringcast.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 120
#define MAXLEN 5000 /* bytes per broadcast: up to several fragments */

static int me, n;
static RingcastBuf *bufs[2]; /* alternate: one in flight at the finisher while the next is posted */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
/* The hand-off: request, its round (-1: none; -2: the poster is done) */
static uint64_t handed;
static int handed_round = -1;
static char failure[200];

static unsigned char pattern(int k, size_t i) { return (unsigned char)(k * 31 + i * 13 + (i >> 8)); }
static size_t len_of(int k) { return 1 + (size_t)(k * 397) % MAXLEN; }

static void fail(const char *what, int k, int rc) {
    pthread_mutex_lock(&mu);
    if (!failure[0]) snprintf(failure, sizeof failure, "%s (round %d): %s", what, k, ringcast_strerror(rc));
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int check(int k) {
    unsigned char *p = ringcast_buf_ptr(bufs[k % 2]);
    for (size_t i = 0; i < len_of(k); i++)
        if (p[i] != pattern(k, i)) return 0;
    return 1;
}

/* Posts every round: blocking ones checked here, non-blocking ones handed over. */
static void *poster(void *arg) {
    (void)arg;
    for (int k = 0; k < ROUNDS && !failure[0]; k++) {
        int root = k % n, rc;
        /* The other thread may still be checking the buffer of round k - 2. */
        pthread_mutex_lock(&mu);
        while (handed_round >= 0 && !failure[0]) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        RingcastBuf *extra = ringcast_buf_new(4096 + (size_t)k);
        if (!extra) return fail("ringcast_buf_new", k, RINGCAST_ERR_IO), NULL;
        unsigned char *p = ringcast_buf_ptr(bufs[k % 2]);
        for (size_t i = 0; i < len_of(k); i++) p[i] = me == root ? pattern(k, i) : 0xEE;
        if (k % 3 == 0) {
            rc = ringcast_bcast(0, (uint32_t)root, bufs[k % 2], 0, len_of(k));
            if (rc != RINGCAST_OK) return fail("ringcast_bcast", k, rc), NULL;
            if (!check(k)) return fail("a wrong byte (blocking)", k, RINGCAST_OK), NULL;
        } else {
            uint64_t rq;
            rc = ringcast_ibcast(0, (uint32_t)root, bufs[k % 2], 0, len_of(k), &rq);
            if (rc != RINGCAST_OK) return fail("ringcast_ibcast", k, rc), NULL;
            pthread_mutex_lock(&mu);
            handed = rq;
            handed_round = k;
            pthread_cond_broadcast(&cv);
            pthread_mutex_unlock(&mu);
        }
        if ((rc = ringcast_buf_free(extra)) != RINGCAST_OK) return fail("ringcast_buf_free", k, rc), NULL;
    }
    pthread_mutex_lock(&mu);
    while (handed_round >= 0 && !failure[0]) pthread_cond_wait(&cv, &mu);
    handed_round = -2;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* Finishes what the poster hands over, by wait or by test, and checks it. */
static int finished;
static void *finisher(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (handed_round == -1 && !failure[0]) pthread_cond_wait(&cv, &mu);
        int k = handed_round;
        uint64_t rq = handed;
        pthread_mutex_unlock(&mu);
        if (k == -2 || failure[0]) return NULL;
        int rc, done = 0;
        if (k % 2) {
            rc = ringcast_wait(rq);
        } else {
            rc = RINGCAST_OK;
            while (rc == RINGCAST_OK && !done) {
                rc = ringcast_test(rq, &done);
                if (ringcast_progress() != RINGCAST_OK || ringcast_rank() != me) rc = RINGCAST_ERR_INTERNAL;
            }
        }
        if (rc != RINGCAST_OK) return fail("finishing a request of the other thread", k, rc), NULL;
        if (!check(k)) return fail("a wrong byte (finished by the other thread)", k, RINGCAST_OK), NULL;
        finished++;
        pthread_mutex_lock(&mu);
        handed_round = -1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

int main(void) {
    int rc = ringcast_init();
    if (rc != RINGCAST_OK) {
        fprintf(stderr, "ringcast_init: %s\n", ringcast_strerror(rc));
        return 1;
    }
    me = ringcast_rank();
    n = ringcast_size();
    for (int i = 0; i < 2; i++)
        if (!(bufs[i] = ringcast_buf_new(MAXLEN))) return 1;
    pthread_t a, b;
    pthread_create(&a, NULL, poster, NULL);
    pthread_create(&b, NULL, finisher, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (failure[0]) {
        fprintf(stderr, "rank %d: %s\n", me, failure);
        return 1;
    }
    for (int i = 0; i < 2; i++) ringcast_buf_free(bufs[i]);
    printf("rank %d: %d broadcasts posted by one thread, %d of them finished by another, all correct\n", me, ROUNDS, finished);
    return ringcast_finalize() == RINGCAST_OK ? 0 : 1;
}
