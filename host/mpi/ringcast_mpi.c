/* libringcast_mpi.so: the PMPI interposer. Preloaded into an unmodified MPI program
 * (LD_PRELOAD), it routes MPI_Bcast, MPI_Allgather, MPI_Allreduce, MPI_Reduce, MPI_Alltoall,
 * MPI_Barrier and their non-blocking forms through ringcast when that is correct and worth it,
 * and calls the PMPI functions otherwise (the rule: docs/mpi.md; its code: rc_rules.c and
 * rc_collectives.c). This file: the bootstrap, the communicator records, staging and in-place
 * registration, MPI_Init / MPI_Finalize and the communicator calls; the operations in flight and
 * the completion calls are in rc_ops.c; rc_internal.h says what the files share.
 *
 * Bootstrap (MPI_Init / MPI_Init_thread): the ranks sharing a host (MPI_Comm_split_type SHARED)
 * form one node each — or RINGCAST_MPI_NODES emulated nodes, to emulate several nodes on one
 * machine — whose local rank 0 starts the node's engine as a polling thread (thread mode) that
 * the node's other ranks attach to; rank 0 names the job and every rank learns its node, local
 * rank and the node count. Ranks on one host use the shared-memory fabric; across hosts, kernel
 * UDP (member addresses exchanged with MPI_Allgather). Every communicator (MPI_COMM_WORLD, and
 * those MPI_Comm_dup / _split / _create make) gets a record cached as an MPI attribute and, when
 * it is to be offloaded, a ringcast communicator: its rank 0 draws the identity, broadcasts it
 * (PMPI) and every member creates it. MPI_Comm_free frees it — at once, or, with operations still
 * in flight on it, when the last of them completes. At MPI_THREAD_MULTIPLE the shared state is
 * behind one mutex (rc_internal.h); at every other level no lock is taken.
 *
 * Staging: the data of an offloaded call goes through a registered staging buffer (with the
 * default `mapped` DMA backend the engine reaches only shared memory), packed there when the
 * user's layout is not one run of bytes. Staging buffers come from a small pool reused by size;
 * one is never shared by two operations in flight. Where the engine reaches host memory by DMA
 * (RINGCAST_DMA=cma, an engine across the PCIe boundary) a blocking MPI_Bcast of one run of bytes
 * registers the user's buffer in place instead — no copy at either end — through a small
 * registration cache (RC_WRAP_MAX buffers, least recently used one deregistered;
 * RINGCAST_MPI_INPLACE=0 turns it off; off at MPI_THREAD_MULTIPLE, where another thread's
 * blocking call could be using the entry an eviction frees). */
#include "rc_internal.h"

RC_HIDDEN int rc_up;              /* ringcast initialized */
RC_HIDDEN int rc_mode = RC_AUTO;
RC_HIDDEN int rc_threaded;        /* MPI_THREAD_MULTIPLE granted: RC_LOCK locks */
RC_HIDDEN pthread_mutex_t rc_mutex = PTHREAD_MUTEX_INITIALIZER;
RC_HIDDEN const char *rc_off = "ringcast not started"; /* why every call goes to PMPI when !rc_up */
RC_HIDDEN int rc_verbose;
RC_HIDDEN int rc_world_rank;
static int rc_node;            /* this rank's engine (emulated node) */
RC_HIDDEN long long rc_min_bytes = 1, rc_max_bytes = RC_ENGINE_MAX_DEFAULT, rc_engine_max = RC_ENGINE_MAX_DEFAULT;
RC_HIDDEN int rc_min_engines = 2; /* auto: engines a communicator must span (RINGCAST_MPI_MIN_ENGINES) */
static char rc_off_buf[160];   /* rc_off when it needs numbers */
static int rc_keyval = MPI_KEYVAL_INVALID;
static struct { RingcastBuf *b; size_t len; } rc_pool[RC_POOL_MAX];
static int rc_pool_n;
/* The in-place registration cache: -1 not asked yet, 0 off (mapped backend, or turned off). */
static int rc_inplace = -1;
static struct { void *p; size_t len; RingcastBuf *b; unsigned long used; } rc_wraps[RC_WRAP_MAX];
static int rc_wraps_n;
static unsigned long rc_wrap_tick;

/* One verbose line: which call, which path and why (printf-style reason). */
RC_HIDDEN void say(const char *call, long long bytes, int root, const char *fmt, ...) {
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
RC_HIDDEN int rc_class(int rc) {
    return rc == RINGCAST_OK ? MPI_SUCCESS : rc == -12 ? MPI_ERR_TRUNCATE : rc == -11 ? MPI_ERR_ROOT : MPI_ERR_OTHER;
}


/* ---- staging buffers ---------------------------------------------------------------------- */

/* (Staging and registration: called with RC_LOCK held.)
 * A registered buffer of at least `bytes` (its length in *len), from the pool if one fits —
 * registration costs an engine round trip, so buffers are reused — else a new one rounded up to
 * a power of two so later messages of similar size reuse it. NULL if none can be made. */
RC_HIDDEN RingcastBuf *rc_buf_get(size_t bytes, size_t *len) {
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
RC_HIDDEN void rc_buf_put(RingcastBuf *b, size_t len) {
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
RC_HIDDEN RingcastBuf *rc_wrap_get(void *p, size_t bytes) {
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
RC_HIDDEN void rc_wrap_drop(RingcastBuf *b) {
    for (int i = 0; i < rc_wraps_n; i++)
        if (rc_wraps[i].b == b) {
            ringcast_buf_free(b);
            rc_wraps[i] = rc_wraps[--rc_wraps_n];
            return;
        }
}

/* ---- communicator records ----------------------------------------------------------------- */

/* Drops one reference to `c` (under RC_LOCK); the last one frees it. */
RC_HIDDEN void rc_comm_release(struct rc_comm *c) {
    if (--c->refs == 0) free(c);
}

/* The attribute's delete callback (MPI_Comm_free, or MPI_Comm_delete_attr): the communicator no
 * longer holds the record; operations still posted on it keep it alive. */
static int rc_attr_delete(MPI_Comm comm, int keyval, void *value, void *extra) {
    (void)comm; (void)keyval; (void)extra;
    RC_LOCK();
    rc_comm_release(value);
    RC_UNLOCK();
    return MPI_SUCCESS;
}

/* Frees the ringcast communicator of `c` once MPI_Comm_free ran and nothing is in flight on it:
 * the engine refuses to free a communicator under a broadcast, and the freed MPI communicator's
 * pending MPI_Ibcast must still complete. */
RC_HIDDEN void rc_comm_settle(struct rc_comm *c) {
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
    /* Engines spanned: the same number at every member (computed from the same gathered list). */
    int engines = 0;
    for (int i = 0; i < size; i++) {
        int seen = 0;
        members[i] = pairs[2 * i];
        for (int j = 0; j < i && !seen; j++) seen = pairs[2 * j + 1] == pairs[2 * i + 1];
        engines += !seen;
    }
    free(pairs);
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
    c->refs = 1;
    PMPI_Comm_set_attr(comm, rc_keyval, c);
}

/* The record of `comm`, or NULL (ringcast not up, null or inter-communicator, not followed). */
RC_HIDDEN struct rc_comm *rc_of(MPI_Comm comm) {
    struct rc_comm *c = NULL;
    int flag = 0;
    if (!rc_up || comm == MPI_COMM_NULL) return NULL;
    PMPI_Comm_get_attr(comm, rc_keyval, &c, &flag);
    return flag ? c : NULL;
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
    /* MPI_THREAD_MULTIPLE: the shared state behind a lock, no in-place registration cache. */
    rc_threaded = provided == MPI_THREAD_MULTIPLE;
    if (rc_threaded) rc_inplace = 0;

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
    if (hosts == 1) {
        /* Every engine on this machine: the cost model prices the exchanges between them on its
         * CPUs (model.engine_cpus, offload/proto/src/model/exchange.rs), alike at every rank. */
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        if (online > 0) {
            snprintf(buf, sizeof buf, "%ld", online);
            set_default("RINGCAST_MODEL_ENGINE_CPUS", buf);
        }
    }
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

/* MPI_Comm_free's part: free the ringcast communicator — at once with nothing of the user's in
 * flight on it, else when the last operation on it finishes (rc_op_finish -> rc_comm_settle) —
 * then drop the attribute. The engines settle its last, partial synchronization epoch
 * themselves once every member freed it: nothing is padded here. */
static void rc_detach(MPI_Comm comm) {
    struct rc_comm *c = rc_of(comm);
    if (!c) return;
    RC_LOCK();
    if (c->handle) {
        c->freeing = 1;
        rc_comm_settle(c);
    }
    RC_UNLOCK();
    PMPI_Comm_delete_attr(comm, rc_keyval);
}

/* Completes what is in flight, frees the world's communicator, detaches, unlinks the job's
 * shared memory (one rank, after a barrier), then the library's finalize. */
int MPI_Finalize(void) {
    if (rc_up) {
        /* Every operation posted must end before the engines go. */
        rc_drain();
        rc_detach(MPI_COMM_WORLD);
        for (int i = 0; i < rc_pool_n; i++) ringcast_buf_free(rc_pool[i].b);
        for (int i = 0; i < rc_wraps_n; i++) ringcast_buf_free(rc_wraps[i].b);
        rc_wraps_n = 0;
        rc_pool_n = 0;
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

/* Raises `err` through `comm`'s error handler, as the MPI library does for its own errors. */
RC_HIDDEN int rc_error(MPI_Comm comm, int err) {
    PMPI_Comm_call_errhandler(comm, err);
    return err;
}
