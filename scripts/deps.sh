#!/usr/bin/env bash
# Installs what `make demo` / `make test` need on a fresh Debian machine with a Rust toolchain,
# and says what it installs. Idempotent: a second run installs nothing.
#   scripts/deps.sh base   -> apt packages + rustup target/components needed by the build and tests
set -euo pipefail

say() { printf 'deps: %s\n' "$*"; }

# Debian packages: "command-or-file-to-probe package" (a file probe may be a glob)
APT_NEED=(
  "aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu"          # cross linker for the aarch64 (BlueField) ABI test
  "/usr/aarch64-linux-gnu/lib/libc.so.6 libc6-dev-arm64-cross"
  "qemu-aarch64 qemu-user"                               # runs the aarch64 test binary on x86-64
  "pkg-config pkg-config"
  "ip iproute2"                                          # network namespaces, veth and bridges of the udp fabric tests
  "mpicc.openmpi libopenmpi-dev"                         # the PMPI interposer and the MPI tests (Open MPI)
  "mpirun.openmpi openmpi-bin"
  "mpicc.mpich libmpich-dev"                             # the interposer built and tested against MPICH too
  "mpiexec.mpich mpich"
  # bindgen/*-sys: bindgen loads libclang at build time; clang's builtin headers (stddef.h, ...)
  # come with it (libclang-dev -> libclang-14-dev -> libclang-common-14-dev, no clang binary needed)
  "/usr/lib/llvm-*/lib/libclang.so libclang-dev"
  "/usr/lib/llvm-*/lib/clang/*/include/stddef.h libclang-dev"
  "/usr/include/infiniband/verbs.h libibverbs-dev"        # rdma-core-sys: verbs ...
  "/usr/include/rdma/rdma_cma.h librdmacm-dev"            # ... and the RDMA connection manager
  "/usr/include/dpdk/rte_eal.h libdpdk-dev"               # ringcast-dpdk-sys (pulls in DPDK's driver plugins)
  # the dpdk fabric's drivers in hw-tests/, loaded by the EAL as plugins: AF_XDP (needs libxdp and
  # libbpf, which the package brings) on veth pairs in namespaces, and memif between two processes
  "/usr/lib/*/dpdk/pmds-*/librte_net_af_xdp.so.* librte-net-af-xdp23"
  "/usr/lib/*/dpdk/pmds-*/librte_net_memif.so.* librte-net-memif23"
)

missing=()
for entry in "${APT_NEED[@]}"; do
  probe=${entry%% *}; pkg=${entry##* }
  if [[ $probe == /* ]]; then compgen -G "$probe" >/dev/null && continue; else command -v "$probe" >/dev/null 2>&1 && continue; fi
  [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  say "installing rustup target aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi
for comp in clippy rustfmt; do
  if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
    say "installing rustup component $comp"
    rustup component add "$comp"
  fi
done
if ! rustup toolchain list | grep -q '^nightly'; then
  say "installing the nightly toolchain (for Miri)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  say "installing the nightly miri and rust-src components"
  rustup component add --toolchain nightly miri rust-src
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz (crates.io) for the fuzz targets"
  cargo install cargo-fuzz --locked --quiet
fi
# mpi4py and numpy for make test-mpi's Python check (an mpi4py program under the interposer):
# from PyPI, mpi4py built from source against Open MPI's mpicc (its wheels bring their own MPI).
if ! python3 -c 'import numpy' >/dev/null 2>&1; then
  say "installing numpy (PyPI)"
  python3 -m pip install --quiet numpy
fi
if ! python3 -c 'import mpi4py.MPI' >/dev/null 2>&1; then
  say "installing mpi4py (PyPI, built with mpicc.openmpi)"
  MPICC=mpicc.openmpi python3 -m pip install --quiet --no-binary=mpi4py --no-cache-dir mpi4py
fi
say "ready"
