#!/usr/bin/env bash
# Runs the allgather check program (host/mpi/tests/allgather_check.c) and checks its log: every
# rank found every MPI_Allgather identical to PMPI_Allgather, and as many calls as expected took
# the offloaded path (RINGCAST_MPI_VERBOSE lines "MPI_Allgather: offloaded").
#   mpi-allgather-check.sh LABEL OFFLOADED IOFFLOADED LOG -- launcher args...
# OFFLOADED / IOFFLOADED: lines "MPI_Allgather: offloaded" / "MPI_Iallgather: offloaded" expected.
set -uo pipefail
label=$1 offloaded=$2 ioffloaded=$3 log=$4
shift 4
[[ ${1:-} == -- ]] && shift
echo "mpi-allgather-check: $label"
if ! timeout 300 "$@" >"$log" 2>&1; then
  cat "$log"
  echo "mpi-allgather-check: $label: the run failed"
  exit 1
fi
ranks=$(grep -c 'allgathers identical to PMPI_Allgather' "$log")
n=$(grep -c 'MPI_Allgather: offloaded' "$log")
i=$(grep -c 'MPI_Iallgather: offloaded' "$log")
if [[ $ranks -ne 4 || $n -ne $offloaded || $i -ne $ioffloaded ]]; then
  cat "$log"
  echo "mpi-allgather-check: $label: $ranks of 4 ranks identical, $n + $i offloaded (expected $offloaded + $ioffloaded)"
  exit 1
fi
grep -m1 'allgathers identical' "$log"
echo "mpi-allgather-check: $label: $n MPI_Allgather and $i MPI_Iallgather offloaded, every result identical to PMPI's"
