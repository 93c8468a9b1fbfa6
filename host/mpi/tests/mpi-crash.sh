#!/usr/bin/env bash
# Issues 13 and 38 (item 4): an MPI job whose rank dies (abort(), SIGKILL, _exit mid-loop) under
# the interposer leaves nothing in /dev/shm once its ranks are gone — no later start needed:
# every process hosting an engine has a reaper (offload/ring/src/reaper.rs) that removes the
# job's segments nobody maps when its process is gone. Runs host/mpi/tests/crash_rank.c once
# per way of dying; after each, waits at most REAP_SECONDS (10) for the segments the job made
# to go, and fails, with their count and bytes, if any stays. Then a clean run.
#   mpi-crash.sh LABEL PROGRAM -- launcher args...   (PROGRAM and the way of dying are appended;
#   the launcher must pass RINGCAST_MPI_VERBOSE=1: each crashed job must show offloaded calls)
set -uo pipefail
label=$1 program=$2
shift 2
[[ ${1:-} == -- ]] && shift
reap_seconds=${REAP_SECONDS:-10}
segments() { ls /dev/shm | grep '^ringcast-mpi-' | sort; }
bytes() { for f; do stat -c %s "/dev/shm/$f" 2>/dev/null; done | awk '{ s += $1 } END { print s + 0 }'; }
count() { grep -c . <<<"$1"; }
failed=0
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
  # The launcher returned: the job's ranks are gone. What they made goes within the bound.
  at_end=$(comm -13 <(echo "$before") <(segments) | grep .)
  deadline=$((SECONDS + reap_seconds))
  new=$at_end
  while [[ -n $new && $SECONDS -lt $deadline ]]; do
    sleep 0.1
    new=$(comm -13 <(echo "$before") <(segments) | grep .)
  done
  n=$(count "$new")
  echo "mpi-crash: $label: rank 1 died by $how; when the launcher returned the job had $(count "$at_end") segments ($(bytes $at_end) bytes), at most ${reap_seconds} s later $n ($(bytes $new) bytes)"
  if ((n)); then
    echo "$new" | sed 's/^/  /'
    failed=1
    # Not this test's to keep: remove them so the next case starts clean.
    (cd /dev/shm && rm -f $new)
  fi
done
rm -f /tmp/mpi-crash.$$.log
if ((failed)); then
  echo "mpi-crash: $label: segments of crashed jobs outlived them"
  exit 1
fi
if ! timeout 120 "$@" "$program" none >/tmp/mpi-crash.$$.log 2>&1; then
  cat /tmp/mpi-crash.$$.log
  echo "mpi-crash: $label: the clean run failed"
  rm -f /tmp/mpi-crash.$$.log
  exit 1
fi
grep -m1 'every byte checked' /tmp/mpi-crash.$$.log
rm -f /tmp/mpi-crash.$$.log
echo "mpi-crash: $label: nothing of the crashed jobs left in /dev/shm"
