#!/usr/bin/env bash
# Runs one configuration of the MPI check program (host/mpi/tests/bcast_check.c) and checks what
# its log shows: every rank reported its broadcasts identical to PMPI_Bcast, and the paths the
# RINGCAST_MPI_VERBOSE lines name add up to the numbers the Makefile derives from the program.
#   mpi-check.sh LABEL BCAST IBCAST DECLINED LOG -- launcher args...
# BCAST / IBCAST: lines "MPI_Bcast: offloaded" / "MPI_Ibcast: offloaded" expected;
# DECLINED: lines "pmpi (auto: ..." expected (either call): the calls auto sent to PMPI because
# the job or the communicator spans too few engines.
# CHECK_RANKS: ranks of the run (default 4).
set -uo pipefail
label=$1 bcast=$2 ibcast=$3 declined=$4 log=$5
shift 5
[[ ${1:-} == -- ]] && shift
echo "mpi-check: $label"
if ! timeout 300 "$@" >"$log" 2>&1; then
  cat "$log"
  echo "mpi-check: $label: the run failed"
  exit 1
fi
fail=0
# Occurrences, not lines: ranks' outputs may share a line of the log (mpirun merges them).
ranks=$(grep -o 'broadcasts identical to PMPI_Bcast' "$log" | wc -l)
nranks=${CHECK_RANKS:-4}
[[ $ranks -eq $nranks ]] || { echo "mpi-check: $label: $ranks of $nranks ranks reported identical broadcasts"; fail=1; }
n=$(grep -o 'MPI_Bcast: offloaded' "$log" | wc -l)
[[ $n -eq $bcast ]] || { echo "mpi-check: $label: $n MPI_Bcast offloaded, expected $bcast"; fail=1; }
n=$(grep -o 'MPI_Ibcast: offloaded' "$log" | wc -l)
[[ $n -eq $ibcast ]] || { echo "mpi-check: $label: $n MPI_Ibcast offloaded, expected $ibcast"; fail=1; }
# With the engine reaching host memory by DMA (RINGCAST_DMA=cma in the label) every offloaded
# MPI_Bcast of one run of bytes registers the user's buffer in place (a packed one cannot);
# otherwise none does.
inplace=0
packed=$(grep -o 'MPI_Bcast: offloaded (packed)' "$log" | wc -l)
[[ $label == *RINGCAST_DMA=cma* ]] && inplace=$((bcast - packed))
n=$(grep -o 'MPI_Bcast: offloaded (in place)' "$log" | wc -l)
[[ $n -eq $inplace ]] || { echo "mpi-check: $label: $n MPI_Bcast in place, expected $inplace"; fail=1; }
n=$(grep -o 'cast: pmpi (auto: ' "$log" | wc -l)
[[ $n -eq $declined ]] || { echo "mpi-check: $label: auto sent $n calls to PMPI, expected $declined"; fail=1; }
if ((fail)); then
  cat "$log"
  exit 1
fi
grep -m1 'broadcasts identical' "$log"
echo "mpi-check: $label: $bcast MPI_Bcast and $ibcast MPI_Ibcast offloaded, $declined declined by auto, as expected"
