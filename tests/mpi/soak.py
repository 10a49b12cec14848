"""A seeded soak of random collectives, run inside each MPI rank (np = 4 for the figures).

Every op is drawn from one seed, the same on every rank: its kind (every collective),
dtype, reduction op, shape (0-sized and odd included), process set (everyone, or a set
this rank may not be in), and whether it runs alone, through the blocking call (the core's
lane for a plain array in the global set), or in an async batch; each rank submits a batch
in its own shuffled order. Every result is checked against NumPy. Resident
memory and open file descriptors are sampled after warm-up and at the end.

Used by tests/mpi/ranks_soak.py (~1,000 ops in the suite) and scripts/soak.py (10,000).
"""
import os
import time

import numpy as np

from horo_reference import check_result, kinds_for, make_rank_inputs, must_be_exact, np_dtype

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
KINDS = ["allreduce", "allreduce_", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
         "gather", "scatter", "reduce", "barrier"]
FIRST_DIMS = [0, 1, 2, 3, 5, 7, 16, 33, 1000]


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_fds():
    return len(os.listdir("/proc/self/fd"))


class Soak:
    def __init__(self, hvd, comm, seed):
        self.hvd, self.comm, self.seed = hvd, comm, seed
        size = hvd.size()
        self.sets = [None]  # None: every rank
        if size >= 3:
            self.sets += [hvd.add_process_set([0, 2]), hvd.add_process_set(list(range(1, size)))]
        self.wrong = []
        self.checked = 0  # results this rank compared with NumPy

    def draw(self, i):
        rng = np.random.default_rng([self.seed, i])
        kind = KINDS[rng.integers(len(KINDS))]
        dtype = DTYPES[rng.integers(len(DTYPES))]
        op = ["Sum", "Min", "Max", "Average"][rng.integers(4)] if kind in ("allreduce", "allreduce_",
                                                                           "grouped_allreduce") else "Sum"
        if kind == "reduce":
            op = ["Sum", "Min", "Max"][rng.integers(3)]
        first = int(FIRST_DIMS[rng.integers(len(FIRST_DIMS))])
        rest = [(), (3,), (2, 5)][rng.integers(3)]
        process_set = self.sets[rng.integers(len(self.sets))]
        members = list(range(self.hvd.size())) if process_set is None else process_set.ranks
        root = members[rng.integers(len(members))]
        return dict(i=i, kind=kind, dtype=dtype, op=op, shape=(first, *rest), process_set=process_set,
                    members=members, root=root, rng_seed=int(rng.integers(1 << 30)),
                    alone=kind == "barrier" or bool(rng.integers(4) == 0))

    def start(self, d, collective, *args, **kw):
        """`collective`'s async call (a handle to synchronize), or, for an op that runs alone, its
        blocking call (the result itself). `allreduce_`: allreduce_async_ / allreduce_."""
        if d["alone"]:
            return getattr(self.hvd, collective)(*args, **kw)
        in_place = collective.endswith("_")
        return getattr(self.hvd, collective.rstrip("_") + "_async" + ("_" if in_place else ""))(*args, **kw)

    def submit(self, d):
        """Starts op d on this rank; returns check(result) or None if this rank is not in its set."""
        hvd, me = self.hvd, self.hvd.rank()
        if me not in d["members"]:
            return None
        n, idx = len(d["members"]), d["members"].index(me)
        kw = dict(name=f"soak.{d['i']}", process_set=d["process_set"])
        kind, dtype, shape = d["kind"], d["dtype"], d["shape"]
        key = ("soak", self.seed, d["i"])
        datakind = kinds_for(dtype)[0]
        op = d["op"]
        hop = getattr(hvd, op)
        if kind in ("allreduce", "allreduce_", "reduce"):
            inputs = make_rank_inputs(key, dtype, shape, op, datakind, n)
            exact = must_be_exact(dtype, op, datakind, n)
            mine = inputs[idx].copy()
            if kind in ("allreduce", "allreduce_"):
                h = self.start(d, kind, mine, op=hop, **kw)
            else:
                h = self.start(d, "reduce", mine, root_rank=d["root"], op=hop, **kw)

            def check(out):
                if kind == "reduce" and me != d["root"]:
                    assert out is None, "reduce returned a value off the root"
                    return
                check_result(out, inputs, op, exact, what=str(d))
            return h, check
        if kind == "grouped_allreduce":
            cases = [make_rank_inputs(key + (j,), dtype, (shape[0] + j,), op, datakind, n) for j in range(3)]
            exact = must_be_exact(dtype, op, datakind, n)
            hs = self.start(d, "grouped_allreduce", [c[idx].copy() for c in cases], op=hop, **kw)

            def check(outs):
                for out, c in zip(outs, cases):
                    check_result(out, c, op, exact, what=str(d))
            return hs, check
        dt = np_dtype(dtype)
        rows = [(d["rng_seed"] + r * 7) % 4 for r in range(n)]  # ragged first dims, zeros included
        data = [make_rank_inputs(key + (r,), dtype, (rows[r] if kind == "allgather" else shape[0], *shape[1:]),
                                 "Sum", datakind, 1)[0] for r in range(n)]
        root_idx = d["members"].index(d["root"])
        if kind == "allgather":
            return self.start(d, "allgather", data[idx], **kw), lambda out: _same(out, np.concatenate(data), d)
        if kind == "broadcast":
            return self.start(d, "broadcast", data[idx], d["root"], **kw), lambda out: _same(out, data[root_idx], d)
        if kind == "gather":
            expected = np.concatenate([x.reshape(-1, *shape[1:]) if x.ndim else x.reshape(1) for x in data])
            return self.start(d, "gather", data[idx], root_rank=d["root"], **kw), (
                lambda out: _same(out, expected, d) if me == d["root"] else _none(out, d))
        if kind in ("scatter", "reducescatter"):
            src = data[root_idx] if kind == "scatter" else sum_exact(data, dt)
            counts = [shape[0] // n + (1 if r < shape[0] % n else 0) for r in range(n)]
            start = sum(counts[:idx])
            expected = src[start:start + counts[idx]]
            if kind == "scatter":
                h = self.start(d, "scatter", data[idx], root_rank=d["root"], **kw)
            else:
                h = self.start(d, "reducescatter", data[idx], op=hvd.Sum, **kw)
            return h, lambda out: _same(out, expected, d)
        if kind == "alltoall":
            srng = [np.random.default_rng([d["rng_seed"], r]) for r in range(n)]
            splits = [_splits(g, shape[0], n) for g in srng]
            sent = [np.split(data[r], np.cumsum(splits[r])[:-1]) for r in range(n)]
            expected = np.concatenate([sent[r][idx] for r in range(n)])
            # Without splits where the rows divide evenly (the parts Horovod's default makes).
            even = not d["rng_seed"] % 3 and shape[0] % n == 0
            splits = [[shape[0] // n] * n] * n if even else splits
            sent = [np.split(data[r], np.cumsum(splits[r])[:-1]) for r in range(n)]
            expected = np.concatenate([sent[r][idx] for r in range(n)])
            if even:
                return self.start(d, "alltoall", data[idx], **kw), lambda out: _same(out, expected, d)
            h = self.start(d, "alltoall", data[idx], splits=splits[idx], **kw)
            return h, lambda out: (_same(out[0], expected, d), _same(np.asarray(out[1]),
                                                                     np.array([splits[r][idx] for r in range(n)]), d))
        if kind == "barrier":
            hvd.barrier(process_set=d["process_set"])
            return None
        raise AssertionError(kind)

    def run(self, ops, batch_max=8, warmup=None):
        hvd = self.hvd
        warmup = ops // 10 if warmup is None else warmup
        order_rng = np.random.default_rng([self.seed, 1000 + hvd.rank()])  # differs per rank
        batch_rng = np.random.default_rng([self.seed, 999999])  # the same on every rank
        i = 0
        baseline = None
        started = time.monotonic()
        while i < ops:
            if baseline is None and i >= warmup:
                baseline = (rss_bytes(), open_fds())
            count = min(int(batch_rng.integers(1, batch_max + 1)), ops - i)
            batch = [self.draw(j) for j in range(i, i + count)]
            # Barriers and the ops drawn to run alone block: they run between batches, in draw order.
            blocking = [d for d in batch if d["alone"]]
            batch = [d for d in batch if not d["alone"]]
            order = order_rng.permutation(len(batch))
            pending = []
            for k in order:
                started_op = self.submit(batch[k])
                if started_op is not None:
                    pending.append((batch[k], started_op))
            for d, (handle, check) in pending:
                try:
                    check(_sync(hvd, handle))
                    self.checked += 1
                except AssertionError as e:
                    self.wrong.append(f"op {d['i']}: {str(e)[:300]}")
            for d in blocking:
                started_op = self.submit(d)
                if started_op is None:
                    continue
                try:
                    started_op[1](started_op[0])
                    self.checked += 1
                except AssertionError as e:
                    self.wrong.append(f"op {d['i']} (alone): {str(e)[:300]}")
            i += count
        hvd.barrier()
        end = (rss_bytes(), open_fds())
        return {
            "ops": ops,
            "checked": self.checked,
            "wrong": len(self.wrong),
            "first_wrong": self.wrong[:3],
            "rss_growth_bytes": end[0] - baseline[0],
            "fd_growth": end[1] - baseline[1],
            "rss_end_bytes": end[0],
            "seconds": time.monotonic() - started,
        }


def _sync(hvd, handle):
    if isinstance(handle, list):
        return [hvd.synchronize(h) for h in handle]
    return hvd.synchronize(handle)


def _splits(rng, rows, n):
    cuts = np.sort(rng.integers(0, rows + 1, size=n - 1))
    return [int(x) for x in np.diff(np.concatenate([[0], cuts, [rows]]))]


def sum_exact(arrays, dt):
    with np.errstate(over="ignore"):
        acc = arrays[0].copy()
        for a in arrays[1:]:
            acc = np.asarray(acc + a, dtype=dt)
    return acc


def _same(out, expected, d):
    out = np.asarray(out)
    assert out.dtype == expected.dtype and out.shape == expected.shape, (
        f"{d['kind']} {d['i']}: got {out.dtype}{out.shape}, expected {expected.dtype}{expected.shape}")
    assert out.tobytes() == expected.tobytes(), f"{d['kind']} {d['i']}: values differ from NumPy"


def _none(out, d):
    assert out is None, f"{d['kind']} {d['i']}: a value off the root"
