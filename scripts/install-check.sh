#!/usr/bin/env bash
# `make test-install` (part of `make test`): the installed tree works on its own.
#
# 1. `make install` into a fresh temporary PREFIX; the layout, the SONAME and its links.
# 2. Nothing installed points into the build tree: no RUNPATH/RPATH there, every library `ldd`
#    resolves outside it, no text file (ringcast.pc, the unit, the manifest) names it.
# 3. With nothing of the build tree in the environment (PATH=$PREFIX/bin:/usr/bin:/bin, no
#    LD_LIBRARY_PATH, pkg-config searching $PREFIX/lib/pkgconfig only): host/capi/examples/bcast.c
#    built with `pkg-config --cflags --libs ringcast` (and once against libringcast.a with
#    `--static`) and run by the installed `ringcast run -n 2 -p 2`; the MPI check program
#    (host/mpi/tests/bcast_check.c) under Open MPI's mpirun with LD_PRELOAD=$PREFIX/lib/
#    libringcast_mpi.so and RINGCAST_MPI_NODES=2 — broadcasts identical to PMPI_Bcast at every
#    rank, and offloaded (exactly test-mpi's counts when the Makefile passes them); the same
#    under MPICH with libringcast_mpi_mpich.so where MPICH is installed.
# 4. A DESTDIR-staged install: PREFIX, never the staging root, inside the .pc, the RUNPATHs, the
#    unit and the manifest; `make uninstall` with the same DESTDIR leaves no file.
# 5. packaging/spack/package.py compiles (Python syntax; Spack is not installed here).
# 6. `make uninstall`: the prefix holds no file afterwards.
#
# Environment: INSTALL_CHECK_OFFLOADED="BCAST IBCAST DECLINED" (the Makefile's OFFLOADED),
# INSTALL_CHECK_OMPI_RUN and INSTALL_CHECK_MPICH_RUN (the Makefile's OMPI_RUN and MPICH_RUN), MAKE.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
MAKE_=${MAKE:-make}
RUN_OMPI=${INSTALL_CHECK_OMPI_RUN:-env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun.openmpi --oversubscribe --mca btl self,vader}
RUN_MPICH=${INSTALL_CHECK_MPICH_RUN:-mpiexec.mpich}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SONAME=libringcast.so.${VERSION%%.*}
start=$SECONDS

say() { echo "test-install: $*"; }
fail() {
  echo "test-install: FAILED: $*" >&2
  exit 1
}
trap 'echo "test-install: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringcast-install-check.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
PREFIX=$TMP/prefix
WORK=$TMP/work
mkdir -p "$WORK"
# A sub-make of our own: not the jobserver or the variables of the `make` that runs us.
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "$MAKE_" --no-print-directory -C "$SRC" "$@"; }

# --- 1. install ---------------------------------------------------------------------------------
say "make install PREFIX=$PREFIX"
submake install PREFIX="$PREFIX" DESTDIR= >"$TMP/install.log" 2>&1 || {
  cat "$TMP/install.log"
  fail "make install"
}
grep -E '^make install: (skipping|WITH_MPI|no MPI)' "$TMP/install.log" || true
for f in bin/ringcast bin/ringcast-engine "lib/libringcast.so.$VERSION" lib/libringcast.a include/ringcast.h \
  lib/pkgconfig/ringcast.pc lib/libringcast_mpi.so lib/systemd/system/ringcast-engine@.service \
  share/ringcast/engine.env share/ringcast/install-manifest.txt share/doc/ringcast/README.md \
  share/doc/ringcast/docs/mpi.md share/doc/ringcast/cli/ringcast.txt share/doc/ringcast/cli/ringcast-run.txt \
  share/doc/ringcast/cli/ringcast-engine.txt; do
  [[ -f $PREFIX/$f && ! -L $PREFIX/$f ]] || fail "$PREFIX/$f is not installed"
done
[[ $(readlink "$PREFIX/lib/$SONAME") == "libringcast.so.$VERSION" ]] || fail "lib/$SONAME is not a link to libringcast.so.$VERSION"
[[ $(readlink "$PREFIX/lib/libringcast.so") == "$SONAME" ]] || fail "lib/libringcast.so is not a link to $SONAME"
soname=$(readelf -d "$PREFIX/lib/libringcast.so.$VERSION" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[[ $soname == "$SONAME" ]] || fail "libringcast's SONAME is '$soname', not $SONAME"
# The default libringcast needs neither DPDK nor rdma-core (README, host/capi/Cargo.toml).
! readelf -d "$PREFIX/lib/libringcast.so.$VERSION" | grep -E 'NEEDED.*(librte_|libibverbs|librdmacm)' ||
  fail "the installed libringcast links DPDK or rdma-core (built together with the engine?)"
ls "$PREFIX/share/doc/ringcast/cli" | tr '\n' ' ' | sed 's/^/test-install: --help pages: /; s/ $/\n/'
[[ $(grep -c . "$PREFIX/share/doc/ringcast/cli/ringcast-run.txt") -gt 3 ]] || fail "ringcast-run.txt is nearly empty"

# --- 2. nothing points into the build tree ------------------------------------------------------
elves=()
while IFS= read -r -d '' f; do
  if [[ $(head -c4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then elves+=("$f"); fi
done < <(find "$PREFIX" -type f -print0)
((${#elves[@]} >= 5)) || fail "only ${#elves[@]} ELF files installed"
for f in "${elves[@]}"; do
  paths=$(readelf -d "$f" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  [[ $paths != *"$SRC"* && $paths != *target/* ]] || fail "$f: RUNPATH/RPATH into the build tree: $paths"
  case $f in */lib/libringcast_mpi*.so) [[ $paths == "$PREFIX/lib" ]] || fail "$f: RUNPATH '$paths', not $PREFIX/lib" ;; esac
  if [[ $f == *.so* || -x $f ]]; then
    if ldd "$f" | grep -E "$SRC|not found"; then fail "$f: a library from the build tree, or missing (ldd above)"; fi
  fi
done
[[ $(ldd "$PREFIX/lib/libringcast_mpi.so" | awk '$1 == "'"$SONAME"'" { print $3 }') == "$PREFIX/lib/$SONAME" ]] ||
  fail "libringcast_mpi.so does not resolve $SONAME to $PREFIX/lib"
if grep -rlI -e "$SRC" -e "target/release" "$PREFIX" --exclude-dir=docs --exclude=README.md; then
  fail "the files above name the build tree"
fi
grep -qx "prefix=$PREFIX" "$PREFIX/lib/pkgconfig/ringcast.pc" || fail "ringcast.pc: prefix is not $PREFIX"
say "${#elves[@]} ELF files and the text files: nothing points into $SRC"

# --- 3. use it with nothing of the build tree ---------------------------------------------------
unset LD_LIBRARY_PATH LD_PRELOAD LIBRARY_PATH CPATH C_INCLUDE_PATH PKG_CONFIG_SYSROOT_DIR OMPI_CC MPICH_CC
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^RINGCAST_' || true)
export PATH=$PREFIX/bin:/usr/bin:/bin
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig PKG_CONFIG_LIBDIR=$PREFIX/lib/pkgconfig
export RINGCAST_LOG_LEVEL=0
[[ $(command -v ringcast) == "$PREFIX/bin/ringcast" ]] || fail "ringcast on PATH is $(command -v ringcast)"
[[ $(pkg-config --variable=libdir ringcast) == "$PREFIX/lib" ]] || fail "pkg-config: libdir $(pkg-config --variable=libdir ringcast)"
[[ $(pkg-config --modversion ringcast) == "$VERSION" ]] || fail "pkg-config: version $(pkg-config --modversion ringcast)"
cd "$WORK"
cp "$SRC/host/capi/examples/bcast.c" "$SRC/host/mpi/tests/bcast_check.c" .
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror -o bcast bcast.c $(pkg-config --cflags --libs ringcast)
[[ $(ldd ./bcast | awk '$1 == "'"$SONAME"'" { print $3 }') == "$PREFIX/lib/$SONAME" ]] || fail "./bcast does not find $SONAME in $PREFIX/lib"
say "bcast.c built with \`pkg-config --cflags --libs ringcast\`; ringcast run -n 2 -p 2 (installed ringcast and engines)"
timeout 300 ringcast run -n 2 -p 2 --timeout 120 -- ./bcast
# Against libringcast.a: the library's archive and `pkg-config --static`'s other libraries.
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror -o bcast-static bcast.c $(pkg-config --cflags ringcast) \
  "$(pkg-config --variable=libdir ringcast)/libringcast.a" $(pkg-config --static --libs-only-l ringcast | sed 's/-lringcast\b//')
! ldd ./bcast-static | grep -q libringcast || fail "bcast-static links libringcast.so"
say "bcast.c against libringcast.a (\`pkg-config --static\`); ringcast run -n 2 -p 2"
timeout 300 ringcast run -n 2 -p 2 --timeout 120 -- ./bcast-static

# The MPI check program, unmodified, under the installed interposer. Exact counts (test-mpi's,
# RINGCAST_CHECK_MISMATCH set) when the Makefile passes them, else: offloaded at all.
mpi_check() { # LABEL LOG -- launcher...
  local label=$1 log=$2
  shift 3
  if [[ -n ${INSTALL_CHECK_OFFLOADED:-} ]]; then
    # shellcheck disable=SC2086
    bash "$SRC/host/mpi/tests/mpi-check.sh" "$label" $INSTALL_CHECK_OFFLOADED "$log" -- "$@"
  else
    timeout 300 "$@" >"$log" 2>&1 || { cat "$log"; fail "$label: the run failed"; }
    [[ $(grep -o 'broadcasts identical to PMPI_Bcast' "$log" | wc -l) -eq 4 ]] || { cat "$log"; fail "$label: not every rank reported identical broadcasts"; }
    n=$(grep -o 'MPI_Bcast: offloaded' "$log" | wc -l) || true
    ((n > 0)) || { cat "$log"; fail "$label: no MPI_Bcast offloaded"; }
    say "$label: $n MPI_Bcast offloaded"
  fi
}
mpicc.openmpi -O2 -Wall -Wextra -Werror -o mpi-bcast-check bcast_check.c
# shellcheck disable=SC2086
mpi_check "installed, Open MPI, LD_PRELOAD=$PREFIX/lib/libringcast_mpi.so, RINGCAST_MPI_NODES=2" "$WORK/mpi.log" -- \
  $RUN_OMPI -np 4 -x LD_PRELOAD="$PREFIX/lib/libringcast_mpi.so" -x RINGCAST_MPI_NODES=2 -x RINGCAST_MPI_VERBOSE=1 \
  -x RINGCAST_CHECK_MISMATCH=1 ./mpi-bcast-check
if [[ -f $PREFIX/lib/libringcast_mpi_mpich.so ]] && command -v mpicc.mpich >/dev/null; then
  mpicc.mpich -O2 -Wall -Wextra -Werror -o mpi-bcast-check-mpich bcast_check.c
  # shellcheck disable=SC2086
  mpi_check "installed, MPICH, LD_PRELOAD=$PREFIX/lib/libringcast_mpi_mpich.so, RINGCAST_MPI_NODES=2" "$WORK/mpi.log" -- \
    $RUN_MPICH -np 4 -genv LD_PRELOAD "$PREFIX/lib/libringcast_mpi_mpich.so" -genv RINGCAST_MPI_NODES 2 \
    -genv RINGCAST_MPI_VERBOSE 1 -genv RINGCAST_CHECK_MISMATCH 1 ./mpi-bcast-check-mpich
else
  say "no MPICH interposer installed: its run skipped"
fi
cd "$SRC"

# --- 4. a staged install ------------------------------------------------------------------------
STAGE=$TMP/stage
SPREFIX=/opt/ringcast-staged
say "make install PREFIX=$SPREFIX DESTDIR=$STAGE"
submake install PREFIX="$SPREFIX" DESTDIR="$STAGE" NO_BUILD=1 >"$TMP/stage.log" 2>&1 || {
  cat "$TMP/stage.log"
  fail "staged make install"
}
[[ -f $STAGE$SPREFIX/bin/ringcast && -f $STAGE$SPREFIX/lib/libringcast_mpi.so ]] || fail "nothing staged under $STAGE$SPREFIX"
grep -qx "prefix=$SPREFIX" "$STAGE$SPREFIX/lib/pkgconfig/ringcast.pc" || fail "staged ringcast.pc: prefix is not $SPREFIX"
grep -q "^ExecStart=$SPREFIX/bin/ringcast-engine " "$STAGE$SPREFIX/lib/systemd/system/ringcast-engine@.service" ||
  fail "staged unit: ExecStart is not $SPREFIX/bin/ringcast-engine"
for f in "$STAGE$SPREFIX"/lib/libringcast_mpi*.so; do
  rp=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [[ $rp == "$SPREFIX/lib" ]] || fail "staged $f: RUNPATH '$rp', not $SPREFIX/lib"
done
if grep -rlI -e "$STAGE" -e "$SRC" "$STAGE" --exclude-dir=docs --exclude=README.md; then
  fail "the staged files above name the staging root or the build tree"
fi
! grep -v "^[fld] $SPREFIX/" "$STAGE$SPREFIX/share/ringcast/install-manifest.txt" || fail "staged manifest: paths outside $SPREFIX (above)"
submake uninstall PREFIX="$SPREFIX" DESTDIR="$STAGE" >"$TMP/stage.log" 2>&1 || {
  cat "$TMP/stage.log"
  fail "staged make uninstall"
}
left=$(find "$STAGE" ! -type d)
[[ -z $left ]] || fail "staged make uninstall left files: $left"
say "staged: PREFIX inside, the staging root nowhere; uninstalled to no file"

# --- 5. the Spack recipe parses ----------------------------------------------------------------
python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
  packaging/spack/package.py "$TMP/package.pyc"
say "packaging/spack/package.py compiles"

# --- 6. uninstall -------------------------------------------------------------------------------
submake uninstall PREFIX="$PREFIX" DESTDIR= >"$TMP/uninstall.log" 2>&1 || {
  cat "$TMP/uninstall.log"
  fail "make uninstall"
}
cat "$TMP/uninstall.log"
if [[ -e $PREFIX ]]; then
  left=$(find "$PREFIX" ! -type d)
  [[ -z $left ]] || fail "make uninstall left files: $left"
fi
say "passed in $((SECONDS - start)) s"
