/* libringcast_mpi.so: the PMPI interposer. Preloaded into an unmodified MPI program
 * (LD_PRELOAD), it routes MPI_Bcast through ringcast when that is correct and calls PMPI_Bcast
 * otherwise.
 *
 * MPI_Init / MPI_Init_thread bootstrap ringcast over MPI itself: the ranks sharing a node
 * (MPI_Comm_split_type SHARED) form one emulated node each — or RINGCAST_MPI_NODES of them, to
 * emulate several nodes on one machine — whose local rank 0 starts the node's engine as a
 * polling thread (thread mode) that the node's other ranks attach to; rank 0 names the job
 * and every rank learns its node, local rank and the node count. Ranks on one host use the
 * shared-memory fabric; across hosts, kernel UDP (member addresses exchanged with
 * MPI_Allgather). Every communicator (MPI_COMM_WORLD, and those MPI_Comm_dup / _split /
 * _create make) gets a ringcast communicator: its rank 0 draws the identity, MPI_Bcast-s it
 * (PMPI) and every member creates it; the handle is cached as an MPI attribute.
 * MPI_Comm_free frees it.
 *
 * MPI_Bcast is offloaded when: ringcast is up, the communicator is an intra-communicator with a
 * ringcast communicator, the datatype is predefined or a contiguous run of one (true extent =
 * size), and the message is within RINGCAST_MPI_MIN_BYTES..RINGCAST_MPI_MAX_BYTES (default:
 * every non-empty message). The root copies into a registered staging buffer, the others copy
 * out of it. Anything else goes to PMPI_Bcast. Invalid arguments (root, count, MPI_IN_PLACE)
 * go to PMPI_Bcast too, which reports them with the library's own error class; a length that
 * differs from the root's fails that rank with MPI_ERR_TRUNCATE (as Open MPI's own does),
 * raised through the communicator's error handler. With
 * RINGCAST_MPI_VERBOSE=1 every call says which path it took. RINGCAST_MPI=0 turns it all off.
 * MPI_Ibcast is intercepted and passed to PMPI_Ibcast (not offloaded yet). */
#include <mpi.h>
#include <ringcast.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a ringcast communicator needs at each call. */
struct rc_comm {
    uint64_t handle;
    int size;
    unsigned posted; /* broadcasts since creation, to fill the last synchronization epoch */
};

static int rc_up;              /* ringcast initialized */
static int rc_verbose;
static int rc_world_rank;
static long long rc_min_bytes = 1, rc_max_bytes = 1LL << 30;
static unsigned rc_channels = 16;
static int rc_keyval = MPI_KEYVAL_INVALID;
static RingcastBuf *rc_stage;   /* staging buffer, grown to the largest message */
static size_t rc_stage_len;

static void say(const char *fmt, const char *a, long long n, int root) {
    if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: %s %s (%lld bytes, root %d)\n", rc_world_rank, fmt, a, n, root);
}

static long long env_ll(const char *name, long long dflt) {
    const char *v = getenv(name);
    return v && *v ? atoll(v) : dflt;
}

static void set(const char *k, const char *v) { setenv(k, v, 1); }
static void set_default(const char *k, const char *v) { setenv(k, v, 0); }

static int rc_attr_delete(MPI_Comm comm, int keyval, void *value, void *extra) {
    (void)comm; (void)keyval; (void)extra;
    free(value);
    return MPI_SUCCESS;
}

/* Fills the last synchronization epoch of `c` (every member posts the same count) so the engines
 * can settle the communicator and leave without waiting. */
static void rc_flush(struct rc_comm *c) {
    if (!rc_stage) return;
    while (rc_channels && c->posted % rc_channels) {
        if (ringcast_bcast(c->handle, 0, rc_stage, 0, 1) != RINGCAST_OK) break;
        c->posted++;
    }
}

/* Gives `comm` a ringcast communicator (collective over `comm`). */
static void rc_attach(MPI_Comm comm) {
    int inter = 0, size, rank;
    if (!rc_up || comm == MPI_COMM_NULL) return;
    PMPI_Comm_test_inter(comm, &inter);
    if (inter) return;
    PMPI_Comm_size(comm, &size);
    PMPI_Comm_rank(comm, &rank);
    uint32_t me = (uint32_t)ringcast_rank();
    uint32_t *members = malloc(sizeof(uint32_t) * (size_t)size);
    if (!members) return;
    PMPI_Allgather(&me, 1, MPI_UINT32_T, members, 1, MPI_UINT32_T, comm);
    struct { uint8_t group[14]; uint8_t pad[2]; uint64_t handle, seed; } id;
    memset(&id, 0, sizeof id);
    if (rank == 0) ringcast_new_identity(id.group, &id.handle, &id.seed);
    PMPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
    int rc = ringcast_comm_create(id.handle, id.group, id.seed, (uint32_t)rank, members, (uint32_t)size);
    free(members);
    int ok = rc == RINGCAST_OK, all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
    if (!all) {
        if (ok) ringcast_comm_free(id.handle);
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: communicator not offloaded: %s\n", rc_world_rank, ringcast_strerror(rc));
        return;
    }
    struct rc_comm *c = malloc(sizeof *c);
    if (!c) return;
    c->handle = id.handle;
    c->size = size;
    c->posted = 0;
    PMPI_Comm_set_attr(comm, rc_keyval, c);
}

static struct rc_comm *rc_of(MPI_Comm comm) {
    struct rc_comm *c = NULL;
    int flag = 0;
    if (!rc_up || comm == MPI_COMM_NULL) return NULL;
    PMPI_Comm_get_attr(comm, rc_keyval, &c, &flag);
    return flag ? c : NULL;
}

/* The bootstrap: who is where, the engine environment, ringcast_init, MPI_COMM_WORLD. */
static void rc_start(void) {
    int rank, size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    rc_world_rank = rank;
    rc_verbose = (int)env_ll("RINGCAST_MPI_VERBOSE", 0);
    rc_min_bytes = env_ll("RINGCAST_MPI_MIN_BYTES", 1);
    rc_max_bytes = env_ll("RINGCAST_MPI_MAX_BYTES", 1LL << 30);
    rc_channels = (unsigned)env_ll("RINGCAST_CHANNELS", 16);
    if (env_ll("RINGCAST_MPI", 1) == 0) return;

    /* Ranks of one host; each host split into `emu` emulated nodes of equal size. */
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
    int emu = (int)env_ll("RINGCAST_MPI_NODES", 1);
    if (emu < 1 || emu > lsize) emu = 1;
    int ppn = lsize / emu, uniform = (lsize % emu == 0), agree = 0;
    int minmax[2] = {ppn, -ppn}, got[2];
    PMPI_Allreduce(minmax, got, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    PMPI_Allreduce(&uniform, &agree, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!agree || got[0] != -got[1]) {
        /* The engines' world needs the same number of ranks on every node. */
        if (rc_verbose && rank == 0) fprintf(stderr, "ringcast-mpi: ranks per node differ; every call goes to PMPI\n");
        return;
    }
    int node = host_index * emu + lrank / ppn, local_rank = lrank % ppn, nodes = hosts * emu;

    /* The job: named by rank 0, the same everywhere. */
    char job[64] = {0};
    if (rank == 0) snprintf(job, sizeof job, "mpi-%ld-%d", (long)getpid(), (int)(MPI_Wtime() * 1000) % 100000);
    PMPI_Bcast(job, (int)sizeof job, MPI_CHAR, 0, MPI_COMM_WORLD);
    char buf[64];
    const char *fabric = getenv("RINGCAST_MPI_FABRIC");
    if (!fabric || !*fabric) fabric = hosts > 1 ? "udp" : "shm";
    set("RINGCAST_FABRIC", fabric);
    set("RINGCAST_JOB", job);
    snprintf(buf, sizeof buf, "%d", nodes); set("RINGCAST_NODES", buf);
    snprintf(buf, sizeof buf, "%d", node); set("RINGCAST_NODE", buf);
    snprintf(buf, sizeof buf, "%d", ppn); set("RINGCAST_PPN", buf);
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
    if (strcmp(fabric, "udp") == 0) {
        /* Each node's engine listens on its host's address; one port per node. */
        char mine[64] = {0}, *all = malloc((size_t)size * 64);
        char hostname[256] = "127.0.0.1";
        if (hosts > 1) gethostname(hostname, sizeof hostname);
        snprintf(mine, sizeof mine, "%s:%d", hosts > 1 ? hostname : "127.0.0.1", 20000 + (int)(getpid() % 20000));
        if (!all) return;
        PMPI_Allgather(mine, 64, MPI_CHAR, all, 64, MPI_CHAR, MPI_COMM_WORLD);
        /* Member `n` is the address local rank 0 of node `n` gathered: world rank n*ppn + 0 in
         * node order only if ranks are placed by node; find them by (node, local) instead. */
        int me_nl[2] = {node, local_rank}, *nl = malloc(sizeof(int) * 2 * (size_t)size);
        char *members = calloc((size_t)nodes, 66);
        if (!nl || !members) return;
        PMPI_Allgather(me_nl, 2, MPI_INT, nl, 2, MPI_INT, MPI_COMM_WORLD);
        for (int n = 0; n < nodes; n++)
            for (int r = 0; r < size; r++)
                if (nl[2 * r] == n && nl[2 * r + 1] == 0) {
                    if (n) strcat(members, ",");
                    strncat(members, all + (size_t)r * 64, 63);
                }
        set("RINGCAST_UDP_MEMBERS", members);
        free(all); free(nl); free(members);
    }
    int rc = ringcast_init();
    int ok = rc == RINGCAST_OK, all_ok = 0;
    PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (ok) ringcast_finalize();
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: ringcast not started (%s); every call goes to PMPI\n", rank, ringcast_strerror(rc));
        return;
    }
    rc_up = 1;
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, rc_attr_delete, &rc_keyval, NULL);
    rc_attach(MPI_COMM_WORLD);
    if (rc_verbose && rank == 0)
        fprintf(stderr, "ringcast-mpi: %d ranks on %d node(s) x %d, %s fabric, job %s\n", size, nodes, ppn, fabric, job);
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) rc_start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) rc_start();
    return rc;
}

static void rc_detach(MPI_Comm comm) {
    struct rc_comm *c = rc_of(comm);
    if (!c) return;
    rc_flush(c);
    ringcast_comm_free(c->handle);
    PMPI_Comm_delete_attr(comm, rc_keyval);
}

int MPI_Finalize(void) {
    if (rc_up) {
        rc_detach(MPI_COMM_WORLD);
        if (rc_stage) ringcast_buf_free(rc_stage);
        rc_stage = NULL;
        ringcast_finalize();
        /* Every rank's engine is done with the job's shared memory: one rank unlinks it. */
        PMPI_Barrier(MPI_COMM_WORLD);
        if (rc_world_rank == 0) ringcast_unlink_job();
        rc_up = 0;
    }
    return PMPI_Finalize();
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_dup(comm, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_split(comm, color, key, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_create(comm, group, newcomm);
    if (rc == MPI_SUCCESS) rc_attach(*newcomm);
    return rc;
}

int MPI_Comm_free(MPI_Comm *comm) {
    if (comm && *comm != MPI_COMM_NULL) rc_detach(*comm);
    return PMPI_Comm_free(comm);
}

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

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    struct rc_comm *c = rc_of(comm);
    if (!c) {
        say("MPI_Bcast:", "pmpi (no ringcast communicator)", -1, root);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    /* Bad arguments go to the library itself: it checks them before communicating and
     * answers with its own error class (Open MPI: MPI_ERR_ROOT, MPI_ERR_COUNT, MPI_ERR_ARG for
     * MPI_IN_PLACE), raised through the communicator's error handler. */
    if (root < 0 || root >= c->size || count < 0 || buffer == MPI_IN_PLACE) {
        say("MPI_Bcast:", "pmpi (invalid arguments: the library reports them)", -1, root);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    long long bytes = rc_bytes(count, datatype);
    if (bytes < 0 || bytes < rc_min_bytes || bytes > rc_max_bytes || c->size < 2) {
        say("MPI_Bcast:", bytes < 0 ? "pmpi (datatype not contiguous)" : "pmpi (size or communicator outside the thresholds)", bytes, root);
        return PMPI_Bcast(buffer, count, datatype, root, comm);
    }
    if (rc_stage_len < (size_t)bytes) {
        if (rc_stage) ringcast_buf_free(rc_stage);
        rc_stage = ringcast_buf_new((size_t)bytes);
        rc_stage_len = rc_stage ? (size_t)bytes : 0;
        if (!rc_stage) {
            say("MPI_Bcast:", "pmpi (no staging buffer)", bytes, root);
            return PMPI_Bcast(buffer, count, datatype, root, comm);
        }
    }
    int me;
    PMPI_Comm_rank(comm, &me);
    uint8_t *stage = ringcast_buf_ptr(rc_stage);
    if (me == root) memcpy(stage, buffer, (size_t)bytes);
    int rc = ringcast_bcast(c->handle, (uint32_t)root, rc_stage, 0, (size_t)bytes);
    c->posted++;
    if (rc != RINGCAST_OK) {
        if (rc_verbose) fprintf(stderr, "ringcast-mpi[%d]: MPI_Bcast failed: %s\n", rc_world_rank, ringcast_strerror(rc));
        /* -12: the length differs from the root's. */
        return rc_error(comm, rc == -12 ? MPI_ERR_TRUNCATE : rc == -11 ? MPI_ERR_ROOT : MPI_ERR_OTHER);
    }
    if (me != root) memcpy(buffer, stage, (size_t)bytes);
    say("MPI_Bcast:", "offloaded", bytes, root);
    return MPI_SUCCESS;
}

int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request) {
    say("MPI_Ibcast:", "pmpi (non-blocking broadcasts are not offloaded yet)", -1, root);
    return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
}
