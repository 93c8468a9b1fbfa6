#!/usr/bin/env bash
# Runs the conformance matrix (host/mpi/tests/matrix.c) once and judges its line:
#   mpi-matrix.sh LABEL LOG GAPS -- launcher args...
# The run must end, every rank's cells must match the library's (0 failed), the interposer must
# have offloaded (offloaded + packed > 0: the runs set RINGCAST_MPI_NODES=2), and gaps — cells
# the matrix cannot compare — must be 0, unless GAPS is `library` (MPICH: the cells its own
# MPI_Reduce / MPI_Alltoall cannot run, which the log names one by one). Prints the matrix line
# and appends it to LOG.summary (the figures docs/mpi.md quotes).
set -uo pipefail
label=$1 log=$2 gaps_allowed=$3
shift 3
[[ ${1:-} == -- ]] && shift
echo "mpi-matrix: $label"
start=$(date +%s)
if ! timeout 900 "$@" >"$log" 2>&1; then
  grep -m 40 'FAILED\|gap\|error\|Error' "$log"
  echo "mpi-matrix: $label: the run failed"
  exit 1
fi
line=$(grep -m1 '^matrix ' "$log")
if [[ $line == SKIP* || -z $line ]]; then
  grep -m1 '^SKIP' "$log" && exit 0
  cat "$log"
  echo "mpi-matrix: $label: no matrix line"
  exit 1
fi
read -r failed gaps offloaded packed <<<"$(sed -E 's/.* ([0-9]+) failed and ([0-9]+) gaps.*offloaded ([0-9]+), packed ([0-9]+).*/\1 \2 \3 \4/' <<<"$line")"
fail=0
[[ $failed -eq 0 ]] || { echo "mpi-matrix: $label: $failed cells differ from the library's"; fail=1; }
if [[ $gaps -gt 0 && $gaps_allowed != library ]]; then
  echo "mpi-matrix: $label: $gaps cells could not be compared"
  fail=1
fi
if [[ $gaps_allowed == library ]]; then
  # Every gap must be one the library caused: its refusal, or a cell it dies on (not run).
  other=$(grep ': gap ' "$log" | grep -v -c 'reduce .* in place\|(classes 0 / library [1-9]')
  [[ $other -eq 0 ]] || { echo "mpi-matrix: $label: $other gaps not of the library's making"; fail=1; }
fi
((offloaded + packed > 0)) || { echo "mpi-matrix: $label: nothing offloaded"; fail=1; }
if ((fail)); then
  grep -m 40 'FAILED\|gap' "$log"
  exit 1
fi
echo "$line [$label, $(($(date +%s) - start)) s]" | tee -a "$log.summary"
