#!/usr/bin/env bash
# Runs one check program of a collective beside the broadcast (host/mpi/tests/allgather_check.c,
# allreduce_check.c) and checks its log: every rank printed the line saying its
# results matched the library's own (RANKS: a fixed string of that line), and each intercepted
# call took the offloaded path as often as expected (RINGCAST_MPI_VERBOSE lines
# "<CALL>: offloaded").
#   mpi-collective-check.sh LABEL LOG RANKS CALL=N [CALL=N ...] -- launcher args...
# CHECK_RANKS: ranks of the run (default 4).
set -uo pipefail
label=$1 log=$2 ranks_line=$3
shift 3
expect=()
while [[ $# -gt 0 && $1 != -- ]]; do
  expect+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift
echo "mpi-collective-check: $label"
if ! timeout 300 "$@" >"$log" 2>&1; then
  cat "$log"
  echo "mpi-collective-check: $label: the run failed"
  exit 1
fi
fail=0
# Occurrences, not lines: the ranks' outputs reach the log through mpirun and may share a line
# (seen in CI: "… at MPI_THREAD_MULTIPLErank 1: …", counted as 3 of 4 ranks).
ranks=$(grep -oF "$ranks_line" "$log" | wc -l)
nranks=${CHECK_RANKS:-4}
[[ $ranks -eq $nranks ]] || { echo "mpi-collective-check: $label: $ranks of $nranks ranks printed \"$ranks_line\""; fail=1; }
said=""
for e in "${expect[@]}"; do
  call=${e%%=*} want=${e##*=}
  n=$(grep -o "$call: offloaded" "$log" | wc -l)
  [[ $n -eq $want ]] || { echo "mpi-collective-check: $label: $n $call offloaded, expected $want"; fail=1; }
  said="$said $n $call,"
done
if ((fail)); then
  cat "$log"
  exit 1
fi
grep -m1 -F "$ranks_line" "$log"
echo "mpi-collective-check: $label: offloaded${said%,}; every result matching the library's"
