#!/usr/bin/env bash
# Issue 13, defect 5: an MPI job whose rank dies (abort(), SIGKILL, _exit mid-loop) under the
# interposer must not leave its shared memory behind for good. Runs host/mpi/tests/crash_rank.c
# once per way of dying, then once cleanly (the next start on this machine), and fails if any
# `ringcast-mpi-*` segment the crashed jobs made is still in /dev/shm after that.
#   mpi-crash.sh LABEL PROGRAM -- launcher args...   (PROGRAM and the way of dying are appended;
#   the launcher must pass RINGCAST_MPI_VERBOSE=1: each crashed job must show offloaded calls)
set -uo pipefail
label=$1 program=$2
shift 2
[[ ${1:-} == -- ]] && shift
segments() { ls /dev/shm | grep '^ringcast-mpi-' | sort; }
bytes() { (cd /dev/shm && du -cb --apparent-size "$@" 2>/dev/null | tail -1 | cut -f1); }
left=
for how in abort kill exit; do
  before=$(segments)
  if timeout 120 "$@" "$program" "$how" >/tmp/mpi-crash.$$.log 2>&1; then
    cat /tmp/mpi-crash.$$.log
    echo "mpi-crash: $label: the job whose rank 1 died by $how succeeded"
    rm -f /tmp/mpi-crash.$$.log
    exit 1
  fi
  if ! grep -q 'MPI_Bcast: offloaded' /tmp/mpi-crash.$$.log; then
    cat /tmp/mpi-crash.$$.log
    echo "mpi-crash: $label: nothing was offloaded before rank 1 died (RINGCAST_MPI_VERBOSE=1 needed)"
    rm -f /tmp/mpi-crash.$$.log
    exit 1
  fi
  # mpirun returned: the job's ranks are gone, what they made is stale. (Each job's start
  # already reclaims what the one before left.)
  new=$(comm -13 <(echo "$before") <(segments) | grep .)
  n=$(grep -c . <<<"$new")
  echo "mpi-crash: $label: rank 1 died by $how; the job left $n segments ($( ((n)) && bytes $new || echo 0) bytes)"
  left=$(printf '%s\n%s\n' "$left" "$new" | grep . | sort -u)
done
rm -f /tmp/mpi-crash.$$.log
n=$(grep -c . <<<"$left")
if ! timeout 120 "$@" "$program" none >/tmp/mpi-crash.$$.log 2>&1; then
  cat /tmp/mpi-crash.$$.log
  echo "mpi-crash: $label: the clean run failed"
  rm -f /tmp/mpi-crash.$$.log
  exit 1
fi
grep -m1 'every byte checked' /tmp/mpi-crash.$$.log
rm -f /tmp/mpi-crash.$$.log
stale=$(comm -12 <(echo "$left") <(segments) | grep .)
if [[ -n $stale ]]; then
  echo "mpi-crash: $label: segments of the crashed jobs still in /dev/shm after the next start ($(bytes $stale) bytes):"
  echo "$stale" | sed 's/^/  /'
  exit 1
fi
echo "mpi-crash: $label: the next start removed all $n"
