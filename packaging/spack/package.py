# A Spack recipe for ringcast (issue 18). Copy this directory into a Spack package repository as
# packages/ringcast/ (see packaging/README.md); it installs with the repository's own
# `make install PREFIX=<prefix>` (scripts/install.sh), so a Spack install and a hand install
# hold the same files.

from spack.package import *

try:  # Spack 1.x: the build-system base classes live in the builtin package repository
    from spack_repo.builtin.build_systems.generic import Package
except ImportError:  # Spack 0.x: spack.package exports them
    pass


class Ringcast(Package):
    """NIC-offloaded reliable multicast collectives for MPI: the `ringcast` CLI, the
    `ringcast-engine` daemon, the C library libringcast (ringcast.h, ringcast.pc) and the PMPI
    interposer libringcast_mpi.so that offloads an unmodified MPI program's collectives."""

    homepage = "https://example.invalid/ringcast"
    git = "https://example.invalid/ringcast.git"

    license("MIT OR Apache-2.0")

    version("main", branch="main")

    variant(
        "mpi",
        default=True,
        description="Build the PMPI interposer lib/libringcast_mpi.so with the MPI of the spec",
    )

    # The engine and the CLI (Cargo features dpdk and verbs): bindgen, at build time, against
    # DPDK's and rdma-core's headers, found through pkg-config; libclang loaded at run time.
    depends_on("c", type="build")
    depends_on("rust@1.87:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("llvm+clang", type="build")
    depends_on("dpdk")
    depends_on("rdma-core")
    depends_on("mpi", when="+mpi")

    # Linux only: futexes, memfd, process_vm_readv, network namespaces.
    conflicts("platform=darwin", msg="ringcast runs on Linux only")
    conflicts("platform=windows", msg="ringcast runs on Linux only")

    sanity_check_is_file = [
        "bin/ringcast",
        "bin/ringcast-engine",
        "lib/libringcast.so",
        "lib/libringcast.a",
        "include/ringcast.h",
        "lib/pkgconfig/ringcast.pc",
    ]

    def setup_build_environment(self, env):
        # bindgen's libclang (the -sys crates use its run-time loading).
        env.set("LIBCLANG_PATH", self.spec["llvm"].prefix.lib)

    def install(self, spec, prefix):
        args = ["PREFIX={0}".format(prefix)]
        if spec.satisfies("+mpi"):
            # One interposer, lib/libringcast_mpi.so, with this MPI's compiler wrapper.
            args.append("MPICC={0}".format(spec["mpi"].mpicc))
        else:
            args.append("WITH_MPI=no")
        # `make install` builds what is missing (cargo build --release) and installs; it never
        # runs scripts/deps.sh (no apt-get).
        make("install", *args)
