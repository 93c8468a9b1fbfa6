/* Calls that disagree (issue 38, item 1): rank 0 calls ringcast_iallreduce on 2,048 bytes of
 * doubles, every other rank on 4,096. On three engines sharing this machine's CPUs the cost model
 * multicasts the first between the engines and has the others swap over the pair communicators:
 * the exchanges never meet. Before, every rank waited until the launcher's timeout; now each call
 * must end with an error (not RINGCAST_OK) within the peer timeout (RINGCAST_PEER_TIMEOUT_MS,
 * default 2,000 ms) and a quarter, measured from its post on CLOCK_MONOTONIC: the ranks that meet
 * the disagreement end at once (DigestMismatch), but a rank that posts after the others' calls
 * ended and their engines let go of the communicator hears nobody, and ends PeerUnreachable one
 * silent peer timeout after its post, plus the check's interval (a 64th of it) and the engine's
 * wake-up (seen in CI under load: 2,002 ms). Run it on every rank of
 * `ringcast run -n 3 -p 1 -- ./disagree` (shm or udp, daemon or thread mode); exits non-zero if
 * this rank's call succeeded, failed late, or could not be made. */
#include <ringcast.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    int rc = ringcast_init();
    if (rc != RINGCAST_OK) {
        fprintf(stderr, "ringcast_init: %s (%d)\n", ringcast_strerror(rc), rc);
        return 1;
    }
    int me = ringcast_rank(), n = ringcast_size();
    const char *env = getenv("RINGCAST_PEER_TIMEOUT_MS");
    double peer_timeout = (env ? strtod(env, NULL) : 2000.0) / 1000.0;
    size_t len = me == 0 ? 2048 : 4096;
    RingcastBuf *work = ringcast_buf_new(4096 * (size_t)n);
    if (work == NULL) {
        fprintf(stderr, "rank %d: ringcast_buf_new failed\n", me);
        return 1;
    }
    double *mine = (double *)((unsigned char *)ringcast_buf_ptr(work) + (size_t)me * len);
    for (size_t i = 0; i < len / sizeof(double); i++) mine[i] = (double)(me + 1) * (double)i;

    double t0 = seconds();
    uint64_t request = 0;
    rc = ringcast_iallreduce(0, NULL, 0, work, 0, len, RINGCAST_TYPE_DOUBLE, RINGCAST_OP_SUM, &request);
    if (rc == RINGCAST_OK) rc = ringcast_wait(request);
    double took = seconds() - t0;
    printf("rank %d: allreduce of %zu B ended %s (%d) after %.0f ms\n", me, len, ringcast_strerror(rc), rc,
           took * 1000.0);
    fflush(stdout);
    if (rc == RINGCAST_OK) {
        fprintf(stderr, "rank %d: the allreduce succeeded although rank 0 called another\n", me);
        return 1;
    }
    if (took > 1.25 * peer_timeout) {
        fprintf(stderr, "rank %d: the allreduce ended after %.0f ms, past 1.25 x the %.0f ms peer timeout\n", me,
                took * 1000.0, peer_timeout * 1000.0);
        return 1;
    }
    ringcast_buf_free(work);
    ringcast_finalize();
    return 0;
}
