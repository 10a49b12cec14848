"""One spec per collective: bus-bandwidth factor, input/expected data, the horo call and
MPI's own (mpi4py) call. `count` is the element count of the buffer the size refers to,
as in nccl-tests: allreduce/broadcast/reduce the tensor, allgather/gather the gathered output,
reducescatter the input, alltoall each rank's send buffer, scatter the root's."""
import numpy as np

from horo.bench import data

NAMES = ("allreduce", "broadcast", "allgather", "alltoall", "reducescatter", "gather", "scatter", "reduce")
REDUCING = ("allreduce", "reducescatter", "reduce")
ROOTED = ("broadcast", "gather", "scatter", "reduce")
SHARED = ("allgather", "alltoall", "reducescatter", "gather", "scatter")  # the size is split in equal shares


def busbw_factor(collective, n):
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in SHARED:
        return (n - 1) / n
    return 1.0


def count_multiple(collective, n):
    """Element counts must be multiples of this (equal shares per rank)."""
    return n if collective in SHARED else 1


class Case:
    """Inputs, expected output and callables for one (collective, count) on this rank."""

    def __init__(self, collective, count, dtype, op, rank, n, root=0):
        self.collective, self.count, self.dtype, self.op = collective, count, dtype, op
        self.rank, self.n, self.root = rank, n, root
        self.name = f"horo_bench.{collective}.{dtype.name}.{op}.{count}"
        op_data = op if collective in REDUCING else "Sum"
        share = count // n
        if collective in ("allreduce", "reduce"):
            self.input = data.pattern(count, rank, dtype, op_data)
            self.expected = data.reduced(count, n, dtype, op)
        elif collective == "reducescatter":
            self.input = data.pattern(count, rank, dtype, op_data)
            self.expected = data.reduced(share, n, dtype, op, offset=rank * share)
        elif collective == "broadcast":
            self.input = data.pattern(count, rank, dtype)
            self.expected = data.pattern(count, root, np.float64)
        elif collective in ("allgather", "gather"):
            self.input = data.pattern(share, rank, dtype)
            self.expected = np.concatenate([data.pattern(share, r, np.float64) for r in range(n)])
        elif collective == "scatter":
            self.input = data.pattern(count, rank, dtype)  # only the root's is read
            self.expected = data.pattern(share, root, np.float64, offset=rank * share)
        elif collective == "alltoall":
            self.input = data.pattern(count, rank, dtype)
            self.expected = np.concatenate(
                [data.pattern(share, r, np.float64, offset=rank * share) for r in range(n)])
        else:
            raise ValueError(f"unknown collective {collective!r}")
        self.check_op = op if collective in REDUCING else "Sum"
        self.out_count = self.expected.size
        # gather and reduce leave the other ranks without a result (horo returns None)
        self.receives = collective not in ("gather", "reduce") or rank == root

    def rewrite_input(self):
        """Stores every byte of this rank's input again, the same values: its lines then start the
        call modified in this core's cache, as a training step leaves a gradient or a weight
        (left alone, a receiver may find a sender's unchanged lines in its own cache from the
        call before)."""
        raw = self.input.view(np.uint8)
        np.bitwise_xor(raw, 0, out=raw)

    def nbytes(self):
        return self.count * self.dtype.itemsize

    def wrong(self, out, baseline=False):
        if not self.receives:
            return 0 if baseline or out is None else max(np.asarray(out).size, 1)
        # MPI has no Average: the baseline sums, and is checked against the sum
        op = "Sum" if baseline and self.check_op == "Average" else self.check_op
        expected = self.expected
        if op != self.check_op:
            expected = (data.reduced(self.count, self.n, np.float64, "Sum") if self.collective != "reducescatter"
                        else data.reduced(self.count // self.n, self.n, np.float64, "Sum",
                                          offset=self.rank * (self.count // self.n)))
        return data.count_wrong(out, expected, self.dtype, op)

    # ------------------------------------------------------------------ horo
    def horo_call(self, horo):
        op = getattr(horo, self.op)
        x, name, c = self.input, self.name, self.collective
        if c == "allreduce":
            return lambda: horo.allreduce(x, op=op, name=name)
        if c == "reducescatter":
            return lambda: horo.reducescatter(x, op=op, name=name)
        if c == "broadcast":
            # In place, as MPI's Bcast below: the root sends its input as it is, the others
            # receive into one buffer (out of place, the root would copy its input first).
            buf = x if self.rank == self.root else np.empty(self.out_count, dtype=self.dtype)
            return lambda: horo.broadcast_(buf, root_rank=self.root, name=name)
        if c == "allgather":
            return lambda: horo.allgather(x, name=name)
        if c == "gather":
            return lambda: horo.gather(x, root_rank=self.root, name=name)
        if c == "scatter":
            return lambda: horo.scatter(x, root_rank=self.root, name=name)
        if c == "reduce":
            return lambda: horo.reduce(x, root_rank=self.root, op=op, name=name)
        return lambda: horo.alltoall(x, name=name)

    # ------------------------------------------------------------------ MPI baseline
    def mpi_call(self, comm):
        """(callable, output buffer) for MPI's own collective; raises if MPI cannot do this dtype."""
        from mpi4py import MPI

        x, c = self.input, self.collective
        out = np.empty(self.out_count, dtype=self.dtype)
        if c in REDUCING:
            mpi_op = {"Sum": MPI.SUM, "Average": MPI.SUM, "Min": MPI.MIN, "Max": MPI.MAX,
                      "Product": MPI.PROD}[self.op]
            if self.dtype.name == "bfloat16":
                raise TypeError("MPI has no bfloat16 reduction")
            if c == "allreduce":
                comm.Allreduce(x, out, op=mpi_op)   # probe: raises here if the dtype is unsupported
                return (lambda: comm.Allreduce(x, out, op=mpi_op)), out
            if c == "reduce":
                comm.Reduce(x, out, op=mpi_op, root=self.root)
                return (lambda: comm.Reduce(x, out, op=mpi_op, root=self.root)), out
            if hasattr(comm, "Reduce_scatter_block"):
                comm.Reduce_scatter_block(x, out, op=mpi_op)
                return (lambda: comm.Reduce_scatter_block(x, out, op=mpi_op)), out
            counts = [self.count // self.n] * self.n
            comm.Reduce_scatter(x, out, counts, op=mpi_op)
            return (lambda: comm.Reduce_scatter(x, out, counts, op=mpi_op)), out
        # data movement only: bytes work for every dtype
        xb = [x, x.nbytes, MPI.BYTE]
        if c == "broadcast":
            buf = x if self.rank == self.root else out   # MPI leaves the root's buffer as it is
            bb = [buf, buf.nbytes, MPI.BYTE]
            return (lambda: comm.Bcast(bb, root=self.root)), buf
        if c == "allgather":
            ob = [out, x.nbytes, MPI.BYTE]   # recv count is per rank
            return (lambda: comm.Allgather(xb, ob)), out
        if c == "gather":
            ob = [out, x.nbytes, MPI.BYTE]
            return (lambda: comm.Gather(xb, ob, root=self.root)), out
        per = x.nbytes // self.n
        if c == "scatter":
            return (lambda: comm.Scatter([x, per, MPI.BYTE], [out, per, MPI.BYTE], root=self.root)), out
        return (lambda: comm.Alltoall([x, per, MPI.BYTE], [out, per, MPI.BYTE])), out
