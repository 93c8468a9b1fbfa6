/* Communicators recycled (issue 13, defect 4): RINGCAST_CYCLES (default 10,000) communicators of
 * every rank created, used for one broadcast and freed back to back through libringcast — far more
 * than an engine's RINGCAST_MAX_COMMS (default 64) — every cycle succeeding, because a freed
 * communicator's slot comes back once its broadcasts are settled with the other engines (a few
 * repair timeouts later where the engine synchronized others; at once if nothing was broadcast).
 * Then a genuinely full table: RINGCAST_MAX_COMMS - 1 communicators alive (the world holds one
 * slot), one more is refused with RINGCAST_ERR_TOO_MANY_COMMUNICATORS at every rank, and freeing
 * one makes room at once. Run it on every rank of `ringcast run -n N -p P -- ./comm_cycles`
 * (N >= 2: each communicator spans engines); exits non-zero on any failed call or wrong byte. */
#include <ringcast.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned char pattern(unsigned long k, size_t i) { return (unsigned char)(k * 131u + i * 7u); }

static int fail(int me, const char *what, unsigned long k, int rc) {
    fprintf(stderr, "rank %d: %s (cycle %lu): %s (%d)\n", me, what, k, ringcast_strerror(rc), rc);
    return 1;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static unsigned env_or(const char *name, unsigned dflt) {
    const char *v = getenv(name);
    return v ? (unsigned)strtoul(v, NULL, 10) : dflt;
}

int main(void) {
    int rc = ringcast_init();
    if (rc != RINGCAST_OK) return fail(-1, "ringcast_init", 0, rc);
    int me = ringcast_rank(), n = ringcast_size();
    unsigned cycles = env_or("RINGCAST_CYCLES", 10000);
    unsigned max_comms = env_or("RINGCAST_MAX_COMMS", 64);
    uint32_t *members = malloc(sizeof(uint32_t) * (size_t)n);
    RingcastIdentity *ids = calloc(max_comms, sizeof *ids);
    RingcastBuf *b = ringcast_buf_new(8192 + max_comms * sizeof *ids);
    if (members == NULL || ids == NULL || b == NULL) return fail(me, "allocation", 0, RINGCAST_ERR_IO);
    for (int r = 0; r < n; r++) members[r] = (uint32_t)r;
    unsigned char *p = ringcast_buf_ptr(b);
    unsigned long world = 0; /* broadcasts posted on the world */
    const size_t data = 4096;  /* offset of the cycle's message in the buffer */

    double start = seconds();
    for (unsigned long k = 0; k < cycles; k++) {
        uint32_t root = (uint32_t)(k % (unsigned long)n);
        /* One member draws the identity; the world broadcast hands it to the others. */
        RingcastIdentity id;
        memset(&id, 0, sizeof id);
        if ((uint32_t)me == root && (rc = ringcast_new_identity(&id)) != RINGCAST_OK)
            return fail(me, "ringcast_new_identity", k, rc);
        memcpy(p, &id, sizeof id);
        if ((rc = ringcast_bcast(0, root, b, 0, sizeof id)) != RINGCAST_OK) return fail(me, "identity broadcast", k, rc);
        world++;
        memcpy(&id, p, sizeof id);
        if ((rc = ringcast_comm_create(&id, (uint32_t)me, members, (uint32_t)n)) != RINGCAST_OK)
            return fail(me, "ringcast_comm_create", k, rc);
        size_t len = 1 + k % 2000;
        for (size_t i = 0; i < len; i++) p[data + i] = (uint32_t)me == root ? pattern(k, i) : 0xEE;
        if ((rc = ringcast_bcast(id.handle, root, b, data, len)) != RINGCAST_OK) return fail(me, "broadcast", k, rc);
        for (size_t i = 0; i < len; i++) {
            if (p[data + i] != pattern(k, i)) {
                fprintf(stderr, "rank %d: cycle %lu: wrong byte at %zu\n", me, k, i);
                return 1;
            }
        }
        if ((rc = ringcast_comm_free(id.handle)) != RINGCAST_OK) return fail(me, "ringcast_comm_free", k, rc);
    }
    double elapsed = seconds() - start;

    /* A full table. Rank 0 draws every identity; one world broadcast hands them out (every rank
     * has freed its last cycle's communicator by the time it posts it). */
    if (me == 0) {
        for (unsigned i = 0; i < max_comms; i++)
            if ((rc = ringcast_new_identity(&ids[i])) != RINGCAST_OK)
                return fail(me, "ringcast_new_identity", i, rc);
        memcpy(p, ids, max_comms * sizeof *ids);
    }
    if ((rc = ringcast_bcast(0, 0, b, 0, max_comms * sizeof *ids)) != RINGCAST_OK) return fail(me, "identities", 0, rc);
    world++;
    memcpy(ids, p, max_comms * sizeof *ids);
    /* The last cycles' communicators settle within a round trip between the engines: a refusal
     * is retried for at most a second (well inside the 2 s peer timeout they used to linger). */
    unsigned retries = 0;
    for (unsigned i = 0; i + 1 < max_comms; i++) {
        double t0 = seconds();
        while ((rc = ringcast_comm_create(&ids[i], (uint32_t)me, members, (uint32_t)n)) ==
                   RINGCAST_ERR_TOO_MANY_COMMUNICATORS &&
               seconds() - t0 < 1.0) {
            retries++;
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
        }
        if (rc != RINGCAST_OK) return fail(me, "filling the table", i, rc);
    }
    RingcastIdentity *extra = &ids[max_comms - 1];
    rc = ringcast_comm_create(extra, (uint32_t)me, members, (uint32_t)n);
    if (rc != RINGCAST_ERR_TOO_MANY_COMMUNICATORS) return fail(me, "a create past a full table", max_comms, rc);
    if (strlen(ringcast_strerror(RINGCAST_ERR_TOO_MANY_COMMUNICATORS)) == 0) return fail(me, "strerror", 0, rc);
    /* The refused one does not exist; a freed one (nothing broadcast on it) makes room at once —
     * once every local member of the engine freed it: a world broadcast completes at a rank only
     * after every process of its node posted it, hence after they handed in what they posted
     * before it (an engine takes each process's descriptors in order). */
    if ((rc = ringcast_bcast(extra->handle, 0, b, data, 8)) != RINGCAST_ERR_UNKNOWN_COMMUNICATOR)
        return fail(me, "a broadcast on the refused communicator", 0, rc);
    if ((rc = ringcast_bcast(0, 0, b, 0, 1)) != RINGCAST_OK) return fail(me, "world broadcast", world, rc);
    world++;
    if ((rc = ringcast_comm_free(ids[0].handle)) != RINGCAST_OK) return fail(me, "free", 0, rc);
    if ((rc = ringcast_bcast(0, 0, b, 0, 1)) != RINGCAST_OK) return fail(me, "world broadcast", world, rc);
    world++;
    rc = ringcast_comm_create(extra, (uint32_t)me, members, (uint32_t)n);
    if (rc != RINGCAST_OK) return fail(me, "a create after a free", 0, rc);
    for (unsigned i = 1; i < max_comms; i++)
        if ((rc = ringcast_comm_free(ids[i].handle)) != RINGCAST_OK) return fail(me, "free", i, rc);

    /* No padding of the world's last synchronization epoch: ringcast_finalize settles it. */
    ringcast_buf_free(b);
    free(ids);
    free(members);
    if ((rc = ringcast_finalize()) != RINGCAST_OK) return fail(me, "ringcast_finalize", 0, rc);
    printf("rank %d of %d: %u communicators created, used and freed in %.2f s (%.0f cycles/s); "
           "a full table of %u refused the next one (%u retries while the last settled)\n",
           me, n, cycles, elapsed, cycles / elapsed, max_comms, retries);
    return 0;
}
