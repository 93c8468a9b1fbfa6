#!/usr/bin/env bash
# `make install` and `make uninstall` (issue 18): ringcast into PREFIX, staged under DESTDIR.
#
#   scripts/install.sh install     build (release) what is missing, then install
#   scripts/install.sh uninstall   remove what the install manifest lists
#
# What lands where (PREFIX=/usr/local by default):
#   bin/ringcast, bin/ringcast-engine
#   lib/libringcast.so.<version> (SONAME libringcast.so.<major>), lib/libringcast.so.<major> and
#     lib/libringcast.so (links), lib/libringcast.a
#   lib/libringcast_mpi.so        the PMPI interposer built with Open MPI's mpicc (or MPICC)
#   lib/libringcast_mpi_mpich.so  the same built with MPICH's
#   lib/pkgconfig/ringcast.pc     prefix=PREFIX; Libs: -L${libdir} -Wl,-rpath,${libdir} -lringcast
#   include/ringcast.h
#   lib/systemd/system/ringcast-engine@.service  (packaging/systemd, its paths filled in)
#   share/ringcast/engine.env     the commented tunables file, to copy to SYSCONFDIR/ringcast/
#                                 (/etc/ringcast/, where the unit reads it)
#   share/ringcast/install-manifest.txt  every file, link and directory this install made
#   share/doc/ringcast/           README.md, docs/ (*.md and the figures of docs/sim),
#                                 cli/ (the --help of `ringcast`, each subcommand, ringcast-engine)
#
# DESTDIR stages the tree for a package: files go to DESTDIR/PREFIX/..., but every path written
# into them (the .pc, the interposers' RUNPATH, the unit, the manifest) is PREFIX's.
#
# Environment (the Makefile passes its variables; all optional):
#   PREFIX DESTDIR BINDIR LIBDIR INCLUDEDIR DATADIR DOCDIR SYSCONFDIR SYSTEMDUNITDIR
#   CARGO       cargo, for the release build of ringcast-cli, ringcast-engine and ringcast-capi
#   NO_BUILD=1  install what target/release holds without running cargo
#   MPICC       build one interposer, lib/libringcast_mpi.so, with this MPI compiler wrapper
#               (Spack passes its MPI's); otherwise INSTALL_OMPI_CC (mpicc.openmpi) builds
#               libringcast_mpi.so and INSTALL_MPICH_CC (mpicc.mpich) libringcast_mpi_mpich.so,
#               each skipped, saying so, where the wrapper is missing. (Not OMPI_CC and
#               MPICH_CC: the wrappers read those as the compiler they run.)
#   WITH_MPI=no install no interposer
#   INTERPOSER_CFLAGS (-O2 -Wall -Wextra)
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
RELEASE=$SRC/target/release
action=${1:-}
case $action in install | uninstall) ;; *)
  echo "usage: $0 install|uninstall" >&2
  exit 2
  ;;
esac

say() { echo "make $action: $*"; }
die() {
  echo "make $action: error: $*" >&2
  exit 1
}

# Directories. Absolute, no trailing slash, no `..`: they are written into files and the manifest.
norm() {
  local v=$1 name=$2
  [[ $v == /* ]] || die "$name must be an absolute path (got '$v')"
  [[ /$v/ != */../* && /$v/ != */./* ]] || die "$name must not contain . or .. (got '$v')"
  while [[ $v == */ && $v != / ]]; do v=${v%/}; done
  printf '%s' "$v"
}
PREFIX=$(norm "${PREFIX:-/usr/local}" PREFIX)
DESTDIR=${DESTDIR:-}
[[ -z $DESTDIR ]] || DESTDIR=$(norm "$DESTDIR" DESTDIR)
[[ $DESTDIR != / ]] || DESTDIR=
BINDIR=$(norm "${BINDIR:-$PREFIX/bin}" BINDIR)
LIBDIR=$(norm "${LIBDIR:-$PREFIX/lib}" LIBDIR)
INCLUDEDIR=$(norm "${INCLUDEDIR:-$PREFIX/include}" INCLUDEDIR)
DATADIR=$(norm "${DATADIR:-$PREFIX/share}" DATADIR)
DOCDIR=$(norm "${DOCDIR:-$DATADIR/doc/ringcast}" DOCDIR)
PKGDATADIR=$DATADIR/ringcast
# Where the unit reads its tunables files (nothing is installed there): /etc/ringcast/ as
# docs/deploy-bluefield.md says, whatever the prefix.
SYSCONFDIR=$(norm "${SYSCONFDIR:-/etc}" SYSCONFDIR)
SYSTEMDUNITDIR=$(norm "${SYSTEMDUNITDIR:-$PREFIX/lib/systemd/system}" SYSTEMDUNITDIR)
MANIFEST=$PKGDATADIR/install-manifest.txt
# The directories only ringcast puts files in: removed at uninstall once empty, whoever made them.
OWN_DIRS=("$DOCDIR" "$DOCDIR/docs" "$DOCDIR/docs/sim" "$DOCDIR/cli" "$PKGDATADIR")

# ---------------------------------------------------------------------------------------------
if [[ $action == uninstall ]]; then
  m=$DESTDIR$MANIFEST
  [[ -f $m ]] || die "no $m: nothing was installed under $DESTDIR$PREFIX by make install (same PREFIX and DESTDIR?)"
  files=() dirs=()
  while read -r kind path; do
    [[ -n $kind ]] || continue
    [[ $path == /* && /$path/ != */../* ]] || die "bad manifest line: $kind $path"
    case $kind in
    f | l) files+=("$path") ;;
    d) dirs+=("$path") ;;
    *) die "bad manifest line: $kind $path" ;;
    esac
  done <"$m"
  n=0
  for p in "${files[@]}"; do
    t=$DESTDIR$p
    if [[ -L $t || -f $t ]]; then
      rm -f -- "$t"
      n=$((n + 1))
    elif [[ -e $t ]]; then
      die "$t is not a file or a link: left alone"
    else
      say "$p was already gone"
    fi
  done
  # Deepest first, and only once empty: a directory holding files of others stays.
  kept=0
  if ((${#dirs[@]})); then
    while read -r p; do
      t=$DESTDIR$p
      [[ -d $t ]] || continue
      if ! rmdir -- "$t" 2>/dev/null; then
        say "kept $p (not empty)"
        kept=$((kept + 1))
      fi
    done < <(printf '%s\n' "${dirs[@]}" | awk '{ print gsub("/", "/") "\t" $0 }' | sort -k1,1nr -k2r | cut -f2-)
  fi
  say "removed $n files and links from $DESTDIR$PREFIX (${#dirs[@]} directories made by install, $kept kept)"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# install
VERSION=${VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "cannot read the version from Cargo.toml (got '$VERSION')"
MAJOR=${VERSION%%.*}
SONAME=libringcast.so.$MAJOR

# The release build, in two cargo commands as `make test-c` does: built together, cargo would
# unify the engine's features into libringcast, which would then link DPDK and rdma-core.
CARGO=${CARGO:-cargo}
if [[ ${NO_BUILD:-} == 1 ]]; then
  say "NO_BUILD=1: installing what $RELEASE holds"
elif ! command -v "$CARGO" >/dev/null; then
  say "no $CARGO on PATH (sudo?): installing what $RELEASE holds; build first with 'make build' as yourself"
else
  "$CARGO" build --release -p ringcast-cli -p ringcast-offload --bin ringcast --bin ringcast-engine
  "$CARGO" build --release -p ringcast-capi
fi
for f in ringcast ringcast-engine libringcast.so libringcast.a include/ringcast.h; do
  [[ -f $RELEASE/$f ]] || die "$RELEASE/$f is missing: build first (cargo build --release)"
done
if command -v readelf >/dev/null; then
  got=$(readelf -d "$RELEASE/libringcast.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
  [[ $got == "$SONAME" ]] || die "$RELEASE/libringcast.so has SONAME '$got', not $SONAME (host/capi/build.rs sets it)"
  ! readelf -d "$RELEASE/libringcast.so" | grep -q 'NEEDED.*librte_' ||
    die "$RELEASE/libringcast.so links DPDK: a build of the whole workspace made it; cargo build --release -p ringcast-capi first"
fi

# The previous install's manifest: what it made and this one does not is removed at the end; the
# directories it made stay recorded.
old_manifest=
if [[ -f $DESTDIR$MANIFEST ]]; then
  old_manifest=$(cat "$DESTDIR$MANIFEST")
fi
manifest=()
record() { manifest+=("$1 $2"); }

# mkdir -p that records the directories it made within PREFIX (not PREFIX's parents, and not
# under DESTDIR: a staging root's directories belong to the system the package goes to).
mkdirs() {
  local d=$1 missing=() p
  p=$d
  while [[ ! -d $DESTDIR$p ]]; do
    missing=("$p" "${missing[@]}")
    [[ $p != / ]] || break
    p=$(dirname "$p")
  done
  for p in "${missing[@]}"; do
    mkdir -m 0755 -p -- "$DESTDIR$p"
    if [[ -z $DESTDIR && ($p == "$PREFIX" || $p == "$PREFIX"/*) ]]; then record d "$p"; fi
  done
}
put() { # MODE SRC DEST
  mkdirs "$(dirname "$3")"
  install -m "$1" -- "$2" "$DESTDIR$3"
  record f "$3"
  [[ -n ${QUIET_PUT:-} ]] || echo "  $3"
}
link() { # TARGET DEST
  mkdirs "$(dirname "$2")"
  ln -sfn -- "$1" "$DESTDIR$2"
  record l "$2"
  echo "  $2 -> $1"
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringcast-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A path for a .pc variable: ${prefix}/... when under PREFIX.
pcpath() { if [[ $1 == "$PREFIX"/* ]]; then printf '${prefix}/%s' "${1#"$PREFIX"/}"; else printf '%s' "$1"; fi; }

say "ringcast $VERSION into $DESTDIR$PREFIX"
put 0755 "$RELEASE/ringcast" "$BINDIR/ringcast"
put 0755 "$RELEASE/ringcast-engine" "$BINDIR/ringcast-engine"

put 0755 "$RELEASE/libringcast.so" "$LIBDIR/libringcast.so.$VERSION"
link "libringcast.so.$VERSION" "$LIBDIR/$SONAME"
link "$SONAME" "$LIBDIR/libringcast.so"
put 0644 "$RELEASE/libringcast.a" "$LIBDIR/libringcast.a"
put 0644 "$RELEASE/include/ringcast.h" "$INCLUDEDIR/ringcast.h"

# pkg-config: the build tree's template (make test-c) with the installed layout's directories.
libdir_pc=$(pcpath "$LIBDIR")
includedir_pc=$(pcpath "$INCLUDEDIR")
sed -e "s|@PREFIX@|$PREFIX|; s|@VERSION@|$VERSION|" \
  -e "s|^libdir=.*|libdir=$libdir_pc|; s|^includedir=.*|includedir=$includedir_pc|" \
  host/capi/ringcast.pc.in >"$tmp/ringcast.pc"
grep -qx "prefix=$PREFIX" "$tmp/ringcast.pc" || die "ringcast.pc: no prefix line"
grep -qx "libdir=$libdir_pc" "$tmp/ringcast.pc" || die "ringcast.pc: no libdir line"
! grep -q '@[A-Z_]*@' "$tmp/ringcast.pc" || die "ringcast.pc: a placeholder is left: $(grep '@[A-Z_]*@' "$tmp/ringcast.pc")"
put 0644 "$tmp/ringcast.pc" "$LIBDIR/pkgconfig/ringcast.pc"

# The PMPI interposer, against the installed library and header: its RUNPATH is LIBDIR (none
# where LIBDIR is one the dynamic linker searches anyway, as distributions want).
rpath=(-Wl,-rpath,"$LIBDIR")
case $LIBDIR in /lib | /lib64 | /usr/lib | /usr/lib64 | /usr/lib/*-linux-gnu*) rpath=() ;; esac
interposer() { # CC NAME
  local cc=$1 name=$2
  # Open MPI's wrapper reads OMPI_CC (MPICH's MPICH_CC) as the compiler it runs: naming the
  # wrapper itself there would make it run itself forever (a fork bomb, seen). Not passed on.
  # shellcheck disable=SC2086
  env -u OMPI_CC -u MPICH_CC "$cc" -shared -fPIC ${INTERPOSER_CFLAGS:--O2 -Wall -Wextra} -o "$tmp/$name" \
    host/mpi/ringcast_mpi.c host/mpi/rc_ops.c host/mpi/rc_types.c host/mpi/rc_collectives.c \
    -I"$DESTDIR$INCLUDEDIR" -L"$DESTDIR$LIBDIR" "${rpath[@]}" -lringcast
  put 0755 "$tmp/$name" "$LIBDIR/$name"
}
if [[ ${WITH_MPI:-yes} == no ]]; then
  say "WITH_MPI=no: no MPI interposer"
elif [[ -n ${MPICC:-} ]]; then
  command -v "$MPICC" >/dev/null || die "MPICC=$MPICC: not found"
  interposer "$MPICC" libringcast_mpi.so
else
  built=0
  for pair in "${INSTALL_OMPI_CC:-mpicc.openmpi}:libringcast_mpi.so:Open MPI" \
    "${INSTALL_MPICH_CC:-mpicc.mpich}:libringcast_mpi_mpich.so:MPICH"; do
    IFS=: read -r cc name what <<<"$pair"
    if command -v "$cc" >/dev/null; then
      interposer "$cc" "$name"
      built=$((built + 1))
    else
      say "skipping $name: $what's compiler wrapper $cc is not on PATH"
    fi
  done
  ((built)) || say "no MPI found: no interposer installed (MPICC=<your mpicc> names one)"
fi

# The engine as a systemd service (docs/deploy-bluefield.md, "As a service").
# @DOCDIR@ is where deploy-bluefield.md lands.
sed -e "s|@BINDIR@|$BINDIR|g; s|@SYSCONFDIR@|$SYSCONFDIR|g; s|@DOCDIR@|$DOCDIR/docs|g" \
  packaging/systemd/ringcast-engine@.service.in >"$tmp/ringcast-engine@.service"
! grep -q '@[A-Z_]*@' "$tmp/ringcast-engine@.service" ||
  die "ringcast-engine@.service: a placeholder is left: $(grep '@[A-Z_]*@' "$tmp/ringcast-engine@.service")"
put 0644 "$tmp/ringcast-engine@.service" "$SYSTEMDUNITDIR/ringcast-engine@.service"
put 0644 packaging/systemd/engine.env "$PKGDATADIR/engine.env"

# Documentation: the README, docs/ as in the tree (the README's links hold), and the --help of
# every command, run in an empty environment (no RINGCAST_* value shows up as a default).
QUIET_PUT=1
put 0644 README.md "$DOCDIR/README.md"
for f in docs/*.md docs/sim/*; do
  if [[ -f $f ]]; then put 0644 "$f" "$DOCDIR/$f"; fi
done
helptext() { # OUT CMD...
  local out=$1
  shift
  env -i PATH=/usr/bin:/bin HOME=/nonexistent "$@" >"$tmp/$out" 2>&1 || die "$* failed: $(cat "$tmp/$out")"
  [[ -s $tmp/$out ]] || die "$* printed nothing"
}
helptext ringcast.txt "$RELEASE/ringcast" --help
put 0644 "$tmp/ringcast.txt" "$DOCDIR/cli/ringcast.txt"
subs=$(awk '/^Commands:/ { on = 1; next } on && /^[^ ]/ { on = 0 } on && NF { print $1 }' "$tmp/ringcast.txt" | grep -vx help || true)
[[ -n $subs ]] || die "no subcommands found in 'ringcast --help'"
for s in $subs; do
  helptext "ringcast-$s.txt" "$RELEASE/ringcast" "$s" --help
  [[ $s == engine ]] || put 0644 "$tmp/ringcast-$s.txt" "$DOCDIR/cli/ringcast-$s.txt"
done
# `ringcast engine` and the ringcast-engine binary are the same daemon: one page for both, with
# what configures it, the tunables (`ringcast info` in an empty environment: the defaults).
# ringcast-engine answers --help with its usage line (and exit status 2).
usage=$(env -i PATH=/usr/bin:/bin HOME=/nonexistent "$RELEASE/ringcast-engine" --help 2>&1) || true
[[ $usage == usage:\ ringcast-engine* ]] || die "ringcast-engine --help: unexpected answer: $usage"
helptext info-defaults.txt "$RELEASE/ringcast" info
{
  echo "$usage"
  if [[ -f $tmp/ringcast-engine.txt ]]; then
    echo
    echo "The same daemon as \`ringcast engine\`:"
    echo
    cat "$tmp/ringcast-engine.txt"
  fi
  echo
  echo "Its configuration: RINGCAST_* environment variables, their defaults as \`ringcast info\` shows them:"
  echo
  cat "$tmp/info-defaults.txt"
} >"$tmp/ringcast-engine-page.txt"
put 0644 "$tmp/ringcast-engine-page.txt" "$DOCDIR/cli/ringcast-engine.txt"
QUIET_PUT=
echo "  $DOCDIR/: $(printf '%s\n' "${manifest[@]}" | grep -c "^f $DOCDIR/") files (README.md, docs/, cli/ with the --help of ringcast, its subcommands and ringcast-engine)"

record f "$MANIFEST"
# What the previous install made and this one did not: gone.
if [[ -n $old_manifest ]]; then
  declare -A now=()
  for e in "${manifest[@]}"; do now[${e#* }]=1; done
  while read -r kind path; do
    [[ -n $kind && $path == /* ]] || continue
    case $kind in
    f | l)
      if [[ -z ${now[$path]:-} && (-f $DESTDIR$path || -L $DESTDIR$path) ]]; then
        rm -f -- "$DESTDIR$path"
        say "removed $path (installed before, not any more)"
      fi
      ;;
    d) [[ -n ${now[$path]:-} ]] || record d "$path" ;;
    esac
  done <<<"$old_manifest"
fi
mkdirs "$PKGDATADIR"
for d in "${OWN_DIRS[@]}"; do
  [[ ! -d $DESTDIR$d ]] || record d "$d"
done
printf '%s\n' "${manifest[@]}" | awk '!seen[$0]++' >"$DESTDIR$MANIFEST"
chmod 0644 "$DESTDIR$MANIFEST"
say "done: $(grep -c '^[fl] ' "$DESTDIR$MANIFEST") files and links under $DESTDIR$PREFIX, listed in $MANIFEST"
say "pkg-config: PKG_CONFIG_PATH=$LIBDIR/pkgconfig pkg-config --cflags --libs ringcast"
