"""An unmodified mpi4py program under the interposer: Bcast, Allreduce, Allgather and Alltoall of
numpy arrays on MPI.COMM_WORLD, as Python codes write them, with mpi4py's defaults (MPI
initialized at MPI_THREAD_MULTIPLE). Each result is checked against numpy's own arithmetic on the
same inputs, and against the library's result for the same call made through a duplicate of the
world (which the interposer leaves to the library at MPI_THREAD_MULTIPLE). Prints one line per
rank: "rank R: N mpi4py collectives correct at MPI_THREAD_MULTIPLE"; exits non-zero otherwise.
The Makefile counts the calls the interposer offloaded (RINGCAST_MPI_VERBOSE)."""
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
level = MPI.Query_thread()
if level != MPI.THREAD_MULTIPLE:
    print(f"rank {rank}: mpi4py initialized MPI at thread level {level}, not MPI_THREAD_MULTIPLE", file=sys.stderr)
    sys.exit(1)
library = comm.Dup()  # the library's path: the reference
done = 0


def check(what, got, want):
    global done
    if not np.array_equal(got, want):
        print(f"rank {rank}: {what}: {got[:8]} ... differs from {want[:8]} ...", file=sys.stderr)
        comm.Abort(1)
    done += 1


for n in (1, 7, 1000, 70000):
    for dtype in (np.float64, np.int32, np.float32, np.int64):
        # Bcast from every root.
        for root in range(size):
            a = np.arange(n, dtype=dtype) * (root + 1) if rank == root else np.zeros(n, dtype=dtype)
            b = a.copy()
            comm.Bcast(a, root=root)
            library.Bcast(b, root=root)
            check(f"Bcast {n} {dtype.__name__} from {root}", a, np.arange(n, dtype=dtype) * (root + 1))
            check("Bcast against the library", a, b)
        # Allreduce: sums of small integers, exact in any order.
        mine = (np.arange(n) % 13 + rank).astype(dtype)
        out, ref = np.empty_like(mine), np.empty_like(mine)
        comm.Allreduce(mine, out, op=MPI.SUM)
        library.Allreduce(mine, ref, op=MPI.SUM)
        check(f"Allreduce {n} {dtype.__name__}", out, sum((np.arange(n) % 13 + r).astype(dtype) for r in range(size)))
        check("Allreduce against the library", out, ref)
        comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.MAX)
        check("Allreduce in place (MAX)", mine, (np.arange(n) % 13 + size - 1).astype(dtype))
        # Allgather and Alltoall.
        block = (np.arange(n) + 100 * rank).astype(dtype)
        gathered = np.empty(n * size, dtype=dtype)
        comm.Allgather(block, gathered)
        check(f"Allgather {n} {dtype.__name__}", gathered, np.concatenate([(np.arange(n) + 100 * r).astype(dtype) for r in range(size)]))
        send = (np.arange(n * size) + 1000 * rank).astype(dtype)
        got, ref = np.empty_like(send), np.empty_like(send)
        comm.Alltoall(send, got)
        library.Alltoall(send, ref)
        want = np.concatenate([(np.arange(n * size) + 1000 * r).astype(dtype)[rank * n:(rank + 1) * n] for r in range(size)])
        check(f"Alltoall {n} {dtype.__name__}", got, want)
        check("Alltoall against the library", got, ref)

# The lowercase (pickled object) forms go through MPI_Bcast of bytes too.
obj = comm.bcast({"rank": rank, "payload": list(range(50))} if rank == 0 else None, root=0)
if obj != {"rank": 0, "payload": list(range(50))}:
    comm.Abort(1)
library.Free()
print(f"rank {rank}: {done} mpi4py collectives correct at MPI_THREAD_MULTIPLE")
