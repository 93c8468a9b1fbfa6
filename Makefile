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

.PHONY: reproduce all deps build demo test lint test-native test-c test-aarch64 test-miri test-loom test-fuzz fuzz bench fmt clippy clean

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
test: deps lint test-native test-c test-aarch64 test-miri test-loom test-fuzz
	@echo "make test: all suites passed"

# Formatting and clippy are part of the tests: a warning fails `make test`.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-native:
	RINGCAST_DST_SEEDS=2000 $(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc

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
