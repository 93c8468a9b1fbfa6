#!/usr/bin/env bash
# `make test` must leave the machine as it found it. This records, and later compares:
#   * the entries of /dev/shm,
#   * the processes of this checkout: those whose executable or command line lies under its
#     target directory (ringcast, ringcast-engine, test binaries and their re-executed roles,
#     the MPI and C test programs, mpirun started on them),
#   * the network namespaces (`ip netns list`).
#   leftovers.sh snapshot FILE     record the state in FILE
#   leftovers.sh check FILE        fail, listing them, if anything is there now that was not
#                                  in FILE (after a grace period for what is still going away)
# Processes are compared by pid and start time, so a recycled pid is not mistaken for an old one.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
target=$(realpath -m "${CARGO_TARGET_DIR:-$here/target}")
grace=${LEFTOVERS_GRACE_SECONDS:-20}

state() {
  ls -A /dev/shm 2>/dev/null | sed 's|^|shm /dev/shm/|'
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    exe=$(readlink "$p/exe" 2>/dev/null) || exe=
    cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || cmd=
    [[ -z $exe && -z $cmd ]] && continue
    # The toolchain building into the target directory is not a leftover.
    case ${exe##*/} in rustc | rustdoc | cargo | cc1 | ld | ld.* | collect2 | as | gcc | cc) continue ;; esac
    if [[ $exe == "$target"/* || $cmd == *"$target/"* ]]; then
      # Field 22 of stat (after the parenthesised name): start time in clock ticks.
      start=$({ sed 's/.*) //' "$p/stat" | cut -d' ' -f20; } 2>/dev/null)
      [[ $cmd == *"leftovers.sh"* ]] && continue
      echo "process $pid@$start ${cmd:0:200}"
    fi
  done
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }'
}

case ${1:-} in
  snapshot)
    mkdir -p "$(dirname "$2")"
    state | sort >"$2"
    echo "leftovers: recorded $(grep -c '^shm' "$2") /dev/shm entries, $(grep -c '^process' "$2") processes of $target, $(grep -c '^netns' "$2") namespaces"
    ;;
  check)
    [[ -f $2 ]] || { echo "leftovers: no snapshot $2"; exit 2; }
    deadline=$((SECONDS + grace))
    while :; do
      new=$(comm -13 "$2" <(state | sort))
      [[ -z $new || $SECONDS -ge $deadline ]] && break
      sleep 1
    done
    if [[ -n $new ]]; then
      echo "leftovers: the tests left the machine changed (present now, not at the start):"
      echo "$new" | sed 's/^/  /'
      exit 1
    fi
    echo "leftovers: /dev/shm, processes and network namespaces as found"
    ;;
  *)
    echo "usage: $0 snapshot|check FILE" >&2
    exit 2
    ;;
esac
