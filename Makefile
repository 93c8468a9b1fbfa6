# ringcast — two commands on a fresh Debian machine with a Rust toolchain:
#   make demo    the main job
#   make test    every test (what .ci/run runs)
# Both install what is missing first (scripts/deps.sh says what it installs).
# And `make install PREFIX=/usr/local DESTDIR=` / `make uninstall` (same PREFIX and DESTDIR):
# the CLI, the engine, libringcast, ringcast.h, ringcast.pc, the MPI interposers, the systemd
# unit and the docs (scripts/install.sh lists what lands where).

SHELL := /bin/bash
CARGO ?= cargo
AARCH64 := aarch64-unknown-linux-gnu
# Miri with strict provenance: the ring's pointer arithmetic must not launder integers.
MIRIFLAGS ?= -Zmiri-strict-provenance
export CARGO_TERM_COLOR ?= never

.PHONY: reproduce all deps build demo check test test-suites lint test-native test-hw test-c test-mpi test-mpi-matrix install uninstall test-install bench-mpi bench-compare bench-compare-build test-aarch64 test-miri test-loom test-fuzz fuzz bench fmt clippy clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	$(CARGO) build --release --workspace

## The main job: an engine daemon, two host processes, registered shared memory, real COPY
## descriptors verified byte for byte, every bad-input case answered with its typed error.
demo: deps
	$(CARGO) build --release --workspace
	target/release/ringcast demo

## The edit loop: formatting, then clippy and the tests of the crates the working tree changed.
## A protocol edit runs `ringcast-proto`'s tests, the DST at 300 seeds included, without
## building DPDK or rdma-core. `make test` is the full suite (and the crates depending on them).
check:
	@bash scripts/check.sh

## Every test: native unit/integration/property tests, the ABI layout on aarch64 (compile-time
## asserts + the golden-file test under qemu-user), the ring under Miri and loom. The tests must
## leave the machine as they found it: /dev/shm, the processes of this checkout and the network
## namespaces are recorded first and compared at the end (scripts/leftovers.sh), and anything
## new fails `make test` with the list — also when a suite failed.
LEFTOVERS := bash scripts/leftovers.sh
test: deps
	@mkdir -p target
	@$(LEFTOVERS) snapshot target/leftovers.before
	@rc=0; $(MAKE) --no-print-directory test-suites || rc=$$?; \
	  $(LEFTOVERS) check target/leftovers.before || rc=1; \
	  exit $$rc
	@echo "make test: all suites passed"
	@cat target/hw-tests-summary.txt

test-suites: lint test-native test-hw test-c test-mpi test-install test-aarch64 test-miri test-loom test-fuzz

# Formatting and clippy are part of the tests: a warning fails `make test`.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The MPI side of `ringcast bench --compare-mpi` (osu_bcast's method), built before the native
# tests so that host/cli/tests/compare_mpi.rs runs instead of skipping.
$(CURDIR)/target/release/mpi-osu-bcast: host/mpi/bench/osu_bcast.c
	@mkdir -p $(CURDIR)/target/release
	mpicc.openmpi -O2 -Wall -Wextra -Werror -o $@ $<

test-native: $(CURDIR)/target/release/mpi-osu-bcast
	RINGCAST_DST_SEEDS=2000 $(CARGO) test --workspace --exclude ringcast-hw-tests --all-targets
	$(CARGO) test --workspace --doc

## Hardware in the loop (hw-tests/): DPDK over AF_XDP in namespaces and over memif, the group
## lifecycle on udp and dpdk, the aarch64 engine under qemu serving x86-64 hosts, the verbs
## fabric and the `rdma` DMA backend where a device exists. One test at a time (each starts several engines). A test whose path cannot
## run here prints `SKIP: <reason>` and returns: cargo counts it as passed, so the summary below
## counts it as skipped, never as passed.
test-hw:
	@mkdir -p target
	set -o pipefail; $(CARGO) test -p ringcast-hw-tests --all-targets -- --nocapture --test-threads=1 2>&1 | tee target/hw-tests.log
	@ran=$$(awk '/^test result: ok\./ { n += $$4 } END { print n + 0 }' target/hw-tests.log); \
	skipped=$$(grep -o 'SKIP: .*' target/hw-tests.log | wc -l); \
	{ echo "hardware in the loop: $$((ran - skipped)) tests passed on real paths, $$skipped skipped (not counted as passed)"; \
	  grep -o 'SKIP: .*' target/hw-tests.log | sed 's/^/  /'; } | tee target/hw-tests-summary.txt

## The C ABI: libringcast and ringcast.h (cbindgen) from a release build, a pkg-config file
## for them, and a C program compiled against them and run on a local cluster (daemons, then
## engine threads); then 10,000 communicators created, used once and freed back to back, and a
## full communicator table refused with RINGCAST_ERR_TOO_MANY_COMMUNICATORS (comm_cycles.c);
## then two threads per process, one posting, the other finishing its requests (threads.c);
## then broadcasts on two communicators posted in different orders at different ranks and
## finished in any order (two_comms.c: shm daemons, udp, engine threads).
## libringcast and the `ringcast` CLI are built by two cargo commands: built together, cargo
## would unify the engine's features and libringcast would link DPDK and rdma-core too.
RELEASE := $(CURDIR)/target/release
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
test-c:
	$(CARGO) build --release -p ringcast-capi
	$(CARGO) build --release -p ringcast-cli
	sed "s|@PREFIX@|$(RELEASE)|; s|@VERSION@|$(VERSION)|" host/capi/ringcast.pc.in > $(RELEASE)/ringcast.pc
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-example host/capi/examples/bcast.c \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --timeout 120 -- $(RELEASE)/ringcast-c-example
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 3 -p 2 --mode thread --timeout 120 -- $(RELEASE)/ringcast-c-example
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-comm-cycles host/capi/tests/comm_cycles.c \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --timeout 300 -- $(RELEASE)/ringcast-c-comm-cycles
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-threads host/capi/tests/threads.c -pthread \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --timeout 120 -- $(RELEASE)/ringcast-c-threads
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --mode thread --timeout 120 -- $(RELEASE)/ringcast-c-threads
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-two-comms host/capi/tests/two_comms.c \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --timeout 120 -- $(RELEASE)/ringcast-c-two-comms
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 3 -p 1 --fabric udp --timeout 120 -- $(RELEASE)/ringcast-c-two-comms
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --mode thread --timeout 120 -- $(RELEASE)/ringcast-c-two-comms
	# Calls that disagree (issue 38): rank 0's allreduce of 2 KiB against 4 KiB at the others, which
	# the cost model of three engines on two CPUs exchanges apart; typed within 1.25 peer timeouts (a rank that posts late hears nobody: disagree.c).
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-disagree host/capi/tests/disagree.c \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 RINGCAST_MODEL_ENGINE_CPUS=2 $(RELEASE)/ringcast run -n 3 -p 1 --timeout 60 -- $(RELEASE)/ringcast-c-disagree
	RINGCAST_LOG_LEVEL=0 RINGCAST_MODEL_ENGINE_CPUS=2 $(RELEASE)/ringcast run -n 3 -p 1 --mode thread --fabric udp --timeout 60 -- $(RELEASE)/ringcast-c-disagree

## MPI: the PMPI interposer libringcast_mpi.so (against libringcast) and an unmodified MPI
## program (host/mpi/tests/bcast_check.c) under Open MPI and MPICH, without and with LD_PRELOAD:
## every MPI_Bcast and MPI_Ibcast compared byte for byte with PMPI_Bcast (and every MPI_Allgather
## of host/mpi/tests/allgather_check.c with PMPI_Allgather), bad arguments with the
## library's error classes; the path of every call, as RINGCAST_MPI_VERBOSE logs it, counted
## against the documented rule (docs/mpi.md). Each MPI's tools are called by their own names, so
## nothing depends on which one the `mpi` alternatives point at.
OMPI_CC := mpicc.openmpi
OMPI_RUN := env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --oversubscribe --mca btl self,vader
MPICH_CC := mpicc.mpich
MPICH_RUN := mpiexec.mpich
MPI_CFLAGS := -O2 -Wall -Wextra -Werror
MPI_CHECK := bash host/mpi/tests/mpi-check.sh
# A rank dying mid-loop (abort, SIGKILL, _exit): nothing of the crashed job may be left in
# /dev/shm once mpirun returned (at most 10 s later: the engines' reapers), then a clean run
# (issues 13 and 38).
MPI_CRASH := bash host/mpi/tests/mpi-crash.sh
# What one run of the check program on 4 ranks must log (grep counts over all ranks):
# * offloaded, every message within the default bounds (RINGCAST_CHECK_MISMATCH set):
#   MPI_Bcast 288 = 4 x (26 + 14 + 26 sweeps of world, half, dup + 4 interleaved + 1 beside a
#   pending send + 1 vector datatype, packed) (the mismatched one fails at every rank where node-mates disagree: issue 38's call check); MPI_Ibcast 324 = 4 x (24 + 12 sweeps + 35 in flight +
#   2 beside point-to-point + 4 interleaved + 1 on a freed communicator) + 4 x 3 (the mismatched
#   one, posted everywhere; the freed active request; the check after it). Not offloaded: 5 MiB
#   (above the engine's limit), bad arguments.
# * RINGCAST_MPI_MAX_BYTES=4096: MPI_Bcast 165 = 4 x (16 + 8 + 16 + 1) + 1; MPI_Ibcast 208 =
#   4 x (16 + 8 + 21 + 4) + 4 x 3 (the rest goes to PMPI, interleaved with the offloaded calls).
# * RINGCAST_MPI_NODES=4 RINGCAST_MPI_MIN_ENGINES=3: world and its dups (4 engines) offloaded,
#   `half` (2 engines) declined: MPI_Bcast 225 = 4 x (26 + 26 + 2 + 1 + 1) + 1, MPI_Ibcast 208 =
#   4 x (24 + 20 + 2 + 2 + 1) + 4 x 3; declined 180 = 4 x (14 + 2 + 12 + 15 + 2).
# * nothing set but the preload, one host: auto starts no engine, every call says so: Open MPI
#   636 = 4 x (77 MPI_Bcast + 82 MPI_Ibcast); MPICH 628 (its MPI_IN_PLACE checks are skipped).
OFFLOADED := 288 324 0
# The allgather check (host/mpi/tests/allgather_check.c) on 4 ranks, RINGCAST_MPI_NODES=2: 12
# MPI_Allgather and 6 MPI_Iallgather on each of world, a dup and a split half (every one spanning
# both engines), all offloaded, and the vector-datatype one (packed): 4 x 37 and 4 x 18.
ALLGATHERS := MPI_Allgather=148 MPI_Iallgather=72
NO_ALLGATHERS := MPI_Allgather=0 MPI_Iallgather=0
MPI_COLL_CHECK := bash host/mpi/tests/mpi-collective-check.sh
# The allreduce check (host/mpi/tests/allreduce_check.c) on 4 ranks, RINGCAST_MPI_NODES=2: 45
# integer and 24 float allreduces on each of world and a split half (both spanning the two
# engines), all offloaded, 12 reduces and a pair of nonblocking allreduces on each; the
# MPI_MINLOC one (offloaded, MPI_2INT): 4 x 139, 4 x 24 and 4 x 4; and 4 x 4 MPI_Ireduce (2 per
# communicator, rotating roots).
ALLREDUCES := MPI_Allreduce=556 MPI_Reduce=96 MPI_Iallreduce=16 MPI_Ireduce=16
# The barrier check (host/mpi/tests/barrier_check.c) on 4 ranks, RINGCAST_MPI_NODES=2: on each of
# world, a dup and a split half (all spanning both engines) 1 MPI_Barrier and 4 MPI_Ibarrier
# (by MPI_Wait, MPI_Test, two at once), every rank arriving last once: 4 x 3 and 4 x 12. On 3
# ranks (2+1) the half {1} spans one engine: (3 + 3 + 2) x 1 and x 4.
BARRIERS := MPI_Barrier=12 MPI_Ibarrier=48
UNEVEN_BARRIERS := MPI_Barrier=8 MPI_Ibarrier=32
BARRIER_LINE := none left before the last rank arrived
# The alltoall check (host/mpi/tests/alltoall_check.c) on 4 ranks, RINGCAST_MPI_NODES=2: on each
# of world, a dup, a split half and the world evens first (a node's ranks not consecutive), 4
# MPI_Alltoall and a pair of MPI_Ialltoall (1 B to 256 KiB per pair), all offloaded, and
# MPI_IN_PLACE and a vector datatype (packed): 4 x 18 and 4 x 8; a whole send buffer past the
# limit goes to the library. On 3 ranks (2+1): (3 + 3 + 2 + 3) x 4 + 3 x 2 and (3 + 3 + 2 + 3) x 2.
ALLTOALLS := MPI_Alltoall=72 MPI_Ialltoall=32
UNEVEN_ALLTOALLS := MPI_Alltoall=50 MPI_Ialltoall=22
ALLTOALL_LINE := alltoalls identical to PMPI_Alltoall
# An uneven job (issue 17, item 8): 3 ranks on RINGCAST_MPI_NODES=2 are nodes of 2 and 1 ranks
# (RINGCAST_NODE_RANKS=2,1). The world and its dups span both engines, the split halves {0,2}
# and {1} two and one: the bcast check offloads MPI_Bcast 165, MPI_Ibcast 196 and auto declines
# 33 (the one-engine half); the allgather check 99 = 3 x 25 (world, dup, the vector one) + 2 x 12
# (half {0,2}) and 48 = 3 x 12 + 2 x 6; the allreduce check 348, 60, 10 = (3 + 2) x 69 + 3, 12, 2. Every result
# compared with the library's own. (MPI_Ireduce: (3 + 2) x 2.)
# The defects of issue 37 (host/mpi/tests/defects_check.c) on 4 ranks, RINGCAST_MPI_NODES=2, on
# the world and a dup: per communicator and rank 4 + 1 MPI_Bcast of MPI_DOUBLE_INT (packed), an
# MPI_Allreduce and 2 MPI_Reduce of it with MAXLOC/MINLOC, MPI_IN_PLACE with the ignored send
# type MPI_DATATYPE_NULL in MPI_Alltoall, MPI_Ialltoall, MPI_Allgather, MPI_Iallgather and at
# MPI_Reduce's root: 8 x 5, 8, 8 x 2, 8, ...; the same at MPI_THREAD_MULTIPLE (every communicator
# offloaded; until issue 38's engine fix only the world's, half).
DEFECTS := MPI_Bcast=40 MPI_Allreduce=8 MPI_Reduce=16 MPI_Alltoall=8 MPI_Ialltoall=8 MPI_Allgather=8 MPI_Iallgather=8
DEFECTS_MULTIPLE := $(DEFECTS)
DEFECTS_LINE := every result identical to the library's
# The conformance matrix (host/mpi/tests/matrix.c, docs/mpi.md "The conformance matrix"): 15,368
# cells per run, every one compared with the library's own result; run by mpi-matrix.sh, which
# requires 0 failed, 0 gaps (MPICH: only the library's own, listed) and something offloaded.
# Open MPI at np 2, 3, 4 and 8 and at every thread level; MPICH at np 2 (single and multiple)
# here — its oversubscribed ranks spin, so np 3 to 8 take minutes to over six: make
# test-mpi-matrix runs the whole MPICH sweep.
MPI_MATRIX := bash host/mpi/tests/mpi-matrix.sh
OMPI_MATRIX_RUNS := "2 single" "3 single" "4 single" "8 single" "4 funneled" "4 multiple"
MPICH_MATRIX_RUNS := "2 single" "2 multiple"
MPICH_MATRIX_SWEEP := "3 single" "4 single" "8 single" "4 funneled" "4 multiple"
# mpi4py (host/mpi/tests/mpi4py_check.py) on 4 ranks, RINGCAST_MPI_NODES=2, MPI_THREAD_MULTIPLE
# (mpi4py's default), nothing else set: per rank 16 (size, type) x 4 roots + 2 (a pickled
# object's size and bytes) MPI_Bcast, 16 x 2 MPI_Allreduce, 16 MPI_Allgather and 16
# MPI_Alltoall on the world offloaded (the references, on a communicator made by
# MPI_Comm_create_group, which the interposer does not follow, go to the library).
MPI4PY := MPI_Bcast=264 MPI_Allreduce=128 MPI_Allgather=64 MPI_Alltoall=64
UNEVEN := CHECK_RANKS=3
UNEVEN_BCASTS := 164 196 33
UNEVEN_ALLGATHERS := MPI_Allgather=99 MPI_Iallgather=48
UNEVEN_ALLREDUCES := MPI_Allreduce=348 MPI_Reduce=60 MPI_Iallreduce=10 MPI_Ireduce=10
test-mpi: test-c
	$(OMPI_CC) -shared -fPIC $(MPI_CFLAGS) -o $(RELEASE)/libringcast_mpi.so host/mpi/ringcast_mpi.c host/mpi/rc_ops.c host/mpi/rc_types.c host/mpi/rc_collectives.c \
	  -I$(RELEASE)/include -L$(RELEASE) -Wl,-rpath,$(RELEASE) -lringcast
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-bcast-check host/mpi/tests/bcast_check.c
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-bcast-bench host/mpi/bench/bcast_bench.c
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-osu-bcast host/mpi/bench/osu_bcast.c
	$(MPI_CHECK) "Open MPI, no preload" 0 0 0 $(RELEASE)/mpi-check.log -- $(OMPI_RUN) -np 4 $(RELEASE)/mpi-bcast-check
	$(MPI_CHECK) "Open MPI, nothing set but LD_PRELOAD (auto, one host)" 0 0 636 $(RELEASE)/mpi-check.log -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 $(RELEASE)/mpi-bcast-check
	@set -e; for cfg in "RINGCAST_MPI_NODES=2:$(OFFLOADED)" "RINGCAST_MPI_NODES=2 RINGCAST_MPI_FABRIC=udp:$(OFFLOADED)" \
	    "RINGCAST_MPI_NODES=2 RINGCAST_DMA=cma:$(OFFLOADED)" \
	    "RINGCAST_MPI_OFFLOAD=always:$(OFFLOADED)" "RINGCAST_MPI_NODES=2 RINGCAST_MPI_MAX_BYTES=4096:164 208 0" \
	    "RINGCAST_MPI_NODES=4 RINGCAST_MPI_MIN_ENGINES=3:225 208 180"; do \
	  x=""; for kv in $${cfg%%:*}; do x="$$x -x $$kv"; done; \
	  $(MPI_CHECK) "Open MPI, LD_PRELOAD, $${cfg%%:*}" $${cfg##*:} $(RELEASE)/mpi-check.log -- \
	    $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_CHECK_MISMATCH=1 $$x \
	    $(RELEASE)/mpi-bcast-check; \
	done
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-defects-check host/mpi/tests/defects_check.c
	$(MPI_COLL_CHECK) "Open MPI, no preload" $(RELEASE)/mpi-defects.log "$(DEFECTS_LINE)" -- \
	  $(OMPI_RUN) -np 4 $(RELEASE)/mpi-defects-check single
	@set -e; for level in "single:$(DEFECTS)" "multiple:$(DEFECTS_MULTIPLE)"; do \
	  $(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2, $${level%%:*}" $(RELEASE)/mpi-defects.log "$(DEFECTS_LINE)" \
	    $${level#*:} -- $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	    $(RELEASE)/mpi-defects-check $${level%%:*}; \
	done
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-matrix host/mpi/tests/matrix.c -pthread
	@rm -f $(RELEASE)/mpi-matrix.log.summary
	@set -e; for cfg in $(OMPI_MATRIX_RUNS); do set -- $$cfg; \
	  $(MPI_MATRIX) "Open MPI, np $$1, $$2" $(RELEASE)/mpi-matrix.log 0 -- \
	    $(OMPI_RUN) -np $$1 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-matrix $$2; \
	done
	$(MPI_COLL_CHECK) "Open MPI, mpi4py + numpy, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi4py.log \
	  "mpi4py collectives correct at MPI_THREAD_MULTIPLE" $(MPI4PY) -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  python3 host/mpi/tests/mpi4py_check.py
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allgather-check host/mpi/tests/allgather_check.c
	$(MPI_COLL_CHECK) "Open MPI, no preload" $(RELEASE)/mpi-allgather.log "identical to PMPI_Allgather" $(NO_ALLGATHERS) -- \
	  $(OMPI_RUN) -np 4 $(RELEASE)/mpi-allgather-check
	$(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-allgather.log "identical to PMPI_Allgather" $(ALLGATHERS) -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-allgather-check
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allreduce-check host/mpi/tests/allreduce_check.c -lm
	$(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-allreduce.log "matching PMPI_Allreduce" $(ALLREDUCES) -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-allreduce-check
	$(UNEVEN) $(MPI_CHECK) "Open MPI, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(UNEVEN_BCASTS) $(RELEASE)/mpi-check.log -- \
	  $(OMPI_RUN) -np 3 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_CHECK_MISMATCH=1 \
	  -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-bcast-check
	$(UNEVEN) $(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(RELEASE)/mpi-allgather.log \
	  "identical to PMPI_Allgather" $(UNEVEN_ALLGATHERS) -- \
	  $(OMPI_RUN) -np 3 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-allgather-check
	$(UNEVEN) $(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(RELEASE)/mpi-allreduce.log \
	  "matching PMPI_Allreduce" $(UNEVEN_ALLREDUCES) -- \
	  $(OMPI_RUN) -np 3 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-allreduce-check
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-barrier-check host/mpi/tests/barrier_check.c
	$(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-barrier.log "$(BARRIER_LINE)" $(BARRIERS) -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-barrier-check
	$(UNEVEN) $(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(RELEASE)/mpi-barrier.log \
	  "$(BARRIER_LINE)" $(UNEVEN_BARRIERS) -- \
	  $(OMPI_RUN) -np 3 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-barrier-check
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-alltoall-check host/mpi/tests/alltoall_check.c
	$(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-alltoall.log "$(ALLTOALL_LINE)" $(ALLTOALLS) -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-alltoall-check
	$(UNEVEN) $(MPI_COLL_CHECK) "Open MPI, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(RELEASE)/mpi-alltoall.log \
	  "$(ALLTOALL_LINE)" $(UNEVEN_ALLTOALLS) -- \
	  $(OMPI_RUN) -np 3 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_MPI_NODES=2 \
	  $(RELEASE)/mpi-alltoall-check
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-crash-rank host/mpi/tests/crash_rank.c
	$(MPI_CRASH) "Open MPI, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-crash-rank -- \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 -x RINGCAST_PEER_TIMEOUT_MS=1000 -x RINGCAST_MPI_VERBOSE=1
	$(MPICH_CC) -shared -fPIC $(MPI_CFLAGS) -o $(RELEASE)/libringcast_mpi_mpich.so host/mpi/ringcast_mpi.c host/mpi/rc_ops.c host/mpi/rc_types.c host/mpi/rc_collectives.c \
	  -I$(RELEASE)/include -L$(RELEASE) -Wl,-rpath,$(RELEASE) -lringcast
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-bcast-check-mpich host/mpi/tests/bcast_check.c
	$(MPI_CHECK) "MPICH, no preload" 0 0 0 $(RELEASE)/mpi-check.log -- $(MPICH_RUN) -np 4 $(RELEASE)/mpi-bcast-check-mpich
	$(MPI_CHECK) "MPICH, nothing set but LD_PRELOAD (auto, one host)" 0 0 628 $(RELEASE)/mpi-check.log -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 $(RELEASE)/mpi-bcast-check-mpich
	$(MPI_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(OFFLOADED) $(RELEASE)/mpi-check.log -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_CHECK_MISMATCH 1 -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-bcast-check-mpich
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-defects-check-mpich host/mpi/tests/defects_check.c
	@set -e; for level in "single:$(DEFECTS)" "multiple:$(DEFECTS_MULTIPLE)"; do \
	  $(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2, $${level%%:*}" $(RELEASE)/mpi-defects.log "$(DEFECTS_LINE)" \
	    $${level#*:} -- $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	    -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-defects-check-mpich $${level%%:*}; \
	done
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-matrix-mpich host/mpi/tests/matrix.c -pthread
	@set -e; for cfg in $(MPICH_MATRIX_RUNS); do set -- $$cfg; \
	  $(MPI_MATRIX) "MPICH, np $$1, $$2" $(RELEASE)/mpi-matrix.log library -- \
	    $(MPICH_RUN) -np $$1 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_NODES 2 \
	    $(RELEASE)/mpi-matrix-mpich $$2; \
	done
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allgather-check-mpich host/mpi/tests/allgather_check.c
	$(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-allgather.log "identical to PMPI_Allgather" $(ALLGATHERS) -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-allgather-check-mpich
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allreduce-check-mpich host/mpi/tests/allreduce_check.c -lm
	$(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-allreduce.log "matching PMPI_Allreduce" $(ALLREDUCES) -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-allreduce-check-mpich
	$(UNEVEN) $(MPI_CHECK) "MPICH, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(UNEVEN_BCASTS) $(RELEASE)/mpi-check.log -- \
	  $(MPICH_RUN) -np 3 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_CHECK_MISMATCH 1 -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-bcast-check-mpich
	$(UNEVEN) $(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, 3 ranks, RINGCAST_MPI_NODES=2 (uneven: 2+1)" $(RELEASE)/mpi-allreduce.log \
	  "matching PMPI_Allreduce" $(UNEVEN_ALLREDUCES) -- \
	  $(MPICH_RUN) -np 3 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-allreduce-check-mpich
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-barrier-check-mpich host/mpi/tests/barrier_check.c
	$(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-barrier.log "$(BARRIER_LINE)" $(BARRIERS) -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-barrier-check-mpich
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-alltoall-check-mpich host/mpi/tests/alltoall_check.c
	$(MPI_COLL_CHECK) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-alltoall.log "$(ALLTOALL_LINE)" $(ALLTOALLS) -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_VERBOSE 1 \
	  -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-alltoall-check-mpich
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-crash-rank-mpich host/mpi/tests/crash_rank.c
	$(MPI_CRASH) "MPICH, LD_PRELOAD, RINGCAST_MPI_NODES=2" $(RELEASE)/mpi-crash-rank-mpich -- \
	  $(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_NODES 2 -genv RINGCAST_PEER_TIMEOUT_MS 1000 -genv RINGCAST_MPI_VERBOSE 1
	test -z "$$(ls /dev/shm | grep '^ringcast-mpi-')" || { echo "segments left in /dev/shm"; exit 1; }
	@cat $(RELEASE)/mpi-matrix.log.summary

## The conformance matrix's long sweep: MPICH at np 3, 4 and 8 and every thread level (minutes
## each on 2 cores: its ranks spin), after test-mpi built everything.
test-mpi-matrix:
	@set -e; for cfg in $(MPICH_MATRIX_SWEEP); do set -- $$cfg; \
	  $(MPI_MATRIX) "MPICH, np $$1, $$2" $(RELEASE)/mpi-matrix.log library -- \
	    $(MPICH_RUN) -np $$1 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_NODES 2 \
	    $(RELEASE)/mpi-matrix-mpich $$2; \
	done

## Installing: `make install PREFIX=... DESTDIR=...` builds (release) what is missing and
## installs it, writing PREFIX (never DESTDIR) into ringcast.pc and the interposers' RUNPATH;
## `make uninstall` with the same PREFIX and DESTDIR removes what the install manifest
## (PREFIX/share/ringcast/install-manifest.txt) lists. Not part of `make build`: no apt-get.
## BINDIR, LIBDIR, INCLUDEDIR, DATADIR, DOCDIR, SYSCONFDIR, SYSTEMDUNITDIR, MPICC (one
## interposer with that MPI), WITH_MPI=no and NO_BUILD=1 are read too (scripts/install.sh).
PREFIX ?= /usr/local
DESTDIR ?=
INSTALL_SH := PREFIX="$(PREFIX)" DESTDIR="$(DESTDIR)" CARGO="$(CARGO)" VERSION="$(VERSION)" \
  INSTALL_OMPI_CC="$(OMPI_CC)" INSTALL_MPICH_CC="$(MPICH_CC)" bash scripts/install.sh
install:
	$(INSTALL_SH) install

uninstall:
	$(INSTALL_SH) uninstall

## The installed tree on its own (scripts/install-check.sh): installed into a fresh temporary
## prefix, the C example built with `pkg-config ringcast` and run by the installed `ringcast`,
## the MPI check program under the installed interposers (Open MPI, MPICH) with the counts of
## test-mpi, nothing pointing into the build tree, a DESTDIR-staged install, then uninstalled
## down to no file.
test-install:
	INSTALL_CHECK_OFFLOADED="$(OFFLOADED)" INSTALL_CHECK_OMPI_RUN="$(OMPI_RUN)" INSTALL_CHECK_MPICH_RUN="$(MPICH_RUN)" \
	  bash scripts/install-check.sh

test-aarch64:
	$(CARGO) build -p ringcast-abi --features golden-check --target $(AARCH64)
	$(CARGO) test -p ringcast-abi --target $(AARCH64)

test-miri:
	MIRIFLAGS="$(MIRIFLAGS)" $(CARGO) +nightly miri test -p ringcast-ring

test-loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test -p ringcast-ring --release --test loom --test loom_mcast

## Every parser of untrusted input under libFuzzer, briefly (FUZZ_SECONDS each); `make fuzz
## FUZZ_SECONDS=600` for a longer run by hand.
FUZZ_TARGETS := frame_parse protocol_frames descriptor ring_attach
FUZZ_SECONDS ?= 10
test-fuzz:
	$(CARGO) +nightly fuzz build --fuzz-dir offload/fuzz
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $$t ($(FUZZ_SECONDS) s)"; \
	  $(CARGO) +nightly fuzz run --fuzz-dir offload/fuzz $$t -- -max_total_time=$(FUZZ_SECONDS) 2>&1 | grep -E 'DONE|ERROR|panicked|SUMMARY' ; \
	  test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	done

fuzz: test-fuzz

## MPI_Bcast and MPI_Ibcast+MPI_Wait through ringcast vs the MPI library's own, in one run
## (osu_bcast-style): 4 ranks, 2 emulated nodes (auto offloads them), Open MPI (staged, then in
## place with the cma backend) then MPICH; last,
## Open MPI with nothing set but the preload (one host: auto passes every call to PMPI).
bench-mpi: test-mpi
	$(MPICH_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-bcast-bench-mpich host/mpi/bench/bcast_bench.c
	@echo "Open MPI, RINGCAST_MPI_NODES=2:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-bcast-bench 200
	@echo "Open MPI, RINGCAST_MPI_NODES=2 RINGCAST_DMA=cma (MPI_Bcast in place, no staging copy):"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 -x RINGCAST_DMA=cma $(RELEASE)/mpi-bcast-bench 200
	@echo "MPICH, RINGCAST_MPI_NODES=2:"
	$(MPICH_RUN) -np 4 -genv LD_PRELOAD $(RELEASE)/libringcast_mpi_mpich.so -genv RINGCAST_MPI_NODES 2 $(RELEASE)/mpi-bcast-bench-mpich 200
	@echo "Open MPI, nothing set (pass-through):"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so $(RELEASE)/mpi-bcast-bench 200
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allgather-bench host/mpi/bench/allgather_bench.c
	@echo "Open MPI, RINGCAST_MPI_NODES=2, MPI_Allgather against PMPI_Allgather:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-allgather-bench 100 3
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allreduce-bench host/mpi/bench/allreduce_bench.c
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-allgather-loop host/mpi/bench/allgather_loop.c
	@echo "Open MPI, RINGCAST_MPI_NODES=2, 8 KiB MPI_Allgather per rank, then leader-based (RINGCAST_ALLGATHER_PARTS):"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-allgather-loop 8192 300
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 -x RINGCAST_ALLGATHER_PARTS=nodes \
	  $(RELEASE)/mpi-allgather-loop 8192 300
	@echo "Open MPI, RINGCAST_MPI_NODES=2, MPI_Alltoall against PMPI_Alltoall:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-allgather-bench 100 3 alltoall
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-cost-bench host/mpi/bench/cost_bench.c
	@echo "Open MPI, RINGCAST_MPI_NODES=2, MPI_DOUBLE_INT packed against PMPI_Bcast; 8 B at each thread level:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-cost-bench single pack 15
	@for level in single funneled serialized multiple; do \
	  $(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-cost-bench $$level x 15; \
	done
	$(OMPI_CC) $(MPI_CFLAGS) -o $(RELEASE)/mpi-barrier-bench host/mpi/bench/barrier_bench.c
	@echo "Open MPI, RINGCAST_MPI_NODES=2, MPI_Barrier against PMPI_Barrier:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-barrier-bench 500 5
	@echo "Open MPI, RINGCAST_MPI_NODES=2, MPI_Allreduce against PMPI_Allreduce:"
	$(OMPI_RUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-allreduce-bench 100 3

## ringcast against Open MPI's own MPI_Bcast on this machine, in the same run: `ringcast bench
## --compare-mpi` alternates ringcast's bench (--barrier) and host/mpi/bench/osu_bcast.c under
## mpirun on as many ranks, round by round, both with osu_bcast's method (warm-up, untimed
## barrier, per-rank mean), and prints per size the medians and the ratio of the slowest ranks
## (docs/performance.md). A few seconds per line on 2 cores.
CMP_SIZES := 2,8192,65536,1048576
CMP := RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast bench --compare-mpi --sizes $(CMP_SIZES) --iters 1000 --rounds 3
bench-compare-build: $(CURDIR)/target/release/mpi-osu-bcast
	$(CARGO) build --release -p ringcast-cli

bench-compare: deps bench-compare-build
	$(CMP) -n 2 --mode thread
	$(CMP) -n 2 --mode daemon
	$(CMP) -n 8 --algorithm multicast

## Benchmarks (not part of make test): ring vs crossbeam ArrayQueue, NOP round trips, what frame
## authentication costs (keyed BLAKE3 MAC and SipHash tag beside CRC32C and memcpy); last,
## ringcast against Open MPI's MPI_Bcast (bench-compare).
bench: deps
	$(CARGO) bench -p ringcast-ring --bench ring_throughput
	$(CARGO) bench -p ringcast-host --bench nop_roundtrip
	$(CARGO) bench -p ringcast-offload --bench auth
	$(CARGO) bench -p ringcast-offload --bench crc_copy
	$(CARGO) bench -p ringcast-proto --bench timers
	$(CARGO) bench -p ringcast-proto --bench engine_stream
	$(MAKE) --no-print-directory bench-compare

# The papers reproduced on the simulator: every scenario of fixtures/sim/ at full size; tables
# (CSV, JSON) and plots (SVG, PNG) into docs/sim/, which docs/reproduction.md shows.
reproduce: deps
	$(CARGO) build --release -p ringcast-cli
	RINGCAST_NO_PROGRESS=1 ./target/release/ringcast sim fixtures/sim/*.toml --out docs/sim
	./target/release/ringcast paper --mamidala --out docs/sim

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
