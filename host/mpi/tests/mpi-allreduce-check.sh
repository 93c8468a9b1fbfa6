#!/usr/bin/env bash
# Runs the allreduce check program (host/mpi/tests/allreduce_check.c) and checks its log: every
# rank found every MPI_Allreduce matching PMPI_Allreduce (integers exactly; floats within
# rounding and bit-identical across ranks), and as many calls as expected took the offloaded
# path (RINGCAST_MPI_VERBOSE lines "MPI_Allreduce: offloaded").
#   mpi-allreduce-check.sh LABEL OFFLOADED LOG -- launcher args...
set -uo pipefail
label=$1 offloaded=$2 log=$3
shift 3
[[ ${1:-} == -- ]] && shift
echo "mpi-allreduce-check: $label"
if ! timeout 300 "$@" >"$log" 2>&1; then
  cat "$log"
  echo "mpi-allreduce-check: $label: the run failed"
  exit 1
fi
ranks=$(grep -c 'allreduces matching PMPI_Allreduce' "$log")
n=$(grep -c 'MPI_Allreduce: offloaded' "$log")
if [[ $ranks -ne 4 || $n -ne $offloaded ]]; then
  cat "$log"
  echo "mpi-allreduce-check: $label: $ranks of 4 ranks matching, $n offloaded (expected $offloaded)"
  exit 1
fi
grep -m1 'allreduces matching' "$log"
echo "mpi-allreduce-check: $label: $n MPI_Allreduce offloaded, every result matching PMPI's"
