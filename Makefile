# ringcast — two commands on a fresh Debian machine with a Rust toolchain:
#   make demo    the main job
#   make test    every test (what .ci/run runs)
# Both install what is missing first (scripts/deps.sh says what it installs).

SHELL := /bin/bash
CARGO ?= cargo
AARCH64 := aarch64-unknown-linux-gnu
# Miri with strict provenance: the ring's pointer arithmetic must not launder integers.
MIRIFLAGS ?= -Zmiri-strict-provenance
export CARGO_TERM_COLOR ?= never

.PHONY: reproduce all deps build demo test lint test-native test-hw test-c test-mpi bench-mpi test-aarch64 test-miri test-loom test-fuzz fuzz bench fmt clippy clean

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

## Every test: native unit/integration/property tests, the ABI layout on aarch64 (compile-time
## asserts + the golden-file test under qemu-user), the ring under Miri and loom.
test: deps lint test-native test-hw test-c test-mpi test-aarch64 test-miri test-loom test-fuzz
	@echo "make test: all suites passed"
	@cat target/hw-tests-summary.txt

# Formatting and clippy are part of the tests: a warning fails `make test`.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-native:
	RINGCAST_DST_SEEDS=2000 $(CARGO) test --workspace --exclude ringcast-hw-tests --all-targets
	$(CARGO) test --workspace --doc

## Hardware in the loop (hw-tests/): DPDK over AF_XDP in namespaces and over memif, the group
## lifecycle on udp and dpdk, the aarch64 engine under qemu serving x86-64 hosts, verbs where a
## device exists. One test at a time (each starts several engines). A test whose path cannot
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
## engine threads).
RELEASE := $(CURDIR)/target/release
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
test-c:
	$(CARGO) build --release -p ringcast-capi -p ringcast-host
	sed "s|@PREFIX@|$(RELEASE)|; s|@VERSION@|$(VERSION)|" host/capi/ringcast.pc.in > $(RELEASE)/ringcast.pc
	$(CC) -Wall -Wextra -Werror -o $(RELEASE)/ringcast-c-example host/capi/examples/bcast.c \
	  $$(PKG_CONFIG_PATH=$(RELEASE) pkg-config --cflags --libs ringcast)
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 2 -p 2 --timeout 120 -- $(RELEASE)/ringcast-c-example
	RINGCAST_LOG_LEVEL=0 $(RELEASE)/ringcast run -n 3 -p 2 --mode thread --timeout 120 -- $(RELEASE)/ringcast-c-example

## MPI: the PMPI interposer libringcast_mpi.so (mpicc, against libringcast) and an unmodified
## MPI program under Open MPI's mpirun, without and with LD_PRELOAD: every broadcast compared
## byte for byte with PMPI_Bcast, bad arguments with the library's error classes; with the
## preload every broadcast must have been offloaded (emulated 2-node shm, 2-node udp, 1 node).
MPIRUN := env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --mca btl self,vader
test-mpi: test-c
	mpicc -shared -fPIC -O2 -Wall -Wextra -Werror -o $(RELEASE)/libringcast_mpi.so host/mpi/ringcast_mpi.c \
	  -I$(RELEASE)/include -L$(RELEASE) -Wl,-rpath,$(RELEASE) -lringcast
	mpicc -O2 -Wall -Wextra -Werror -o $(RELEASE)/mpi-bcast-check host/mpi/tests/bcast_check.c
	mpicc -O2 -Wall -Wextra -Werror -o $(RELEASE)/mpi-bcast-bench host/mpi/bench/bcast_bench.c
	timeout 300 $(MPIRUN) -np 4 $(RELEASE)/mpi-bcast-check
	@set -e; for cfg in "RINGCAST_MPI_NODES=2" "RINGCAST_MPI_NODES=2 RINGCAST_MPI_FABRIC=udp" "RINGCAST_MPI_NODES=1"; do \
	  x=""; for kv in $$cfg; do x="$$x -x $$kv"; done; \
	  echo "mpirun -np 4 with LD_PRELOAD, $$cfg"; \
	  timeout 300 $(MPIRUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_VERBOSE=1 -x RINGCAST_CHECK_MISMATCH=1 $$x \
	    $(RELEASE)/mpi-bcast-check > $(RELEASE)/mpi-check.log 2>&1 || { cat $(RELEASE)/mpi-check.log; exit 1; }; \
	  grep 'broadcasts identical' $(RELEASE)/mpi-check.log; \
	  n=$$(grep -c 'MPI_Bcast: offloaded' $(RELEASE)/mpi-check.log); \
	  test "$$n" -eq 265 || { echo "expected 265 offloaded broadcasts (264 + the root of the mismatched one), got $$n"; cat $(RELEASE)/mpi-check.log; exit 1; }; \
	done
	test -z "$$(ls /dev/shm | grep '^ringcast-mpi-')" || { echo "segments left in /dev/shm"; exit 1; }

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

## MPI_Bcast through ringcast vs the MPI library's own, in one run (osu_bcast-style).
bench-mpi: test-mpi
	$(MPIRUN) -np 4 -x LD_PRELOAD=$(RELEASE)/libringcast_mpi.so -x RINGCAST_MPI_NODES=2 $(RELEASE)/mpi-bcast-bench 200

## Benchmarks (not part of make test): ring vs crossbeam ArrayQueue, NOP round trips.
bench: deps
	$(CARGO) bench -p ringcast-ring --bench ring_throughput
	$(CARGO) bench -p ringcast-host --bench nop_roundtrip

# The papers reproduced on the simulator: every scenario of fixtures/sim/ at full size; tables
# (CSV, JSON) and plots (SVG, PNG) into docs/sim/, which docs/reproduction.md shows.
reproduce: deps
	$(CARGO) build --release -p ringcast-host
	RINGCAST_NO_PROGRESS=1 ./target/release/ringcast sim fixtures/sim/*.toml --out docs/sim

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
