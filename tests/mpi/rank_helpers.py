"""Cross-rank assertions for the rank suites (mpi4py on the tests' own communicator)."""
import os

import numpy as np

from horo_reference import dtype_name


def gather_and_compare(comm, value, what):
    """Assert that every rank holds the same value (e.g. a digest of its results)."""
    values = comm.allgather(value)
    if any(v != values[0] for v in values):
        lines = "\n".join(f"  rank {r}: {v!r}" for r, v in enumerate(values))
        raise AssertionError(f"{what} differs between ranks:\n{lines}")
    return values[0]


def outcome_of(fn):
    """(exception class name or None, message) of calling fn()."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - we report whatever was raised
        return (type(e).__name__, str(e), e)
    return (None, "", None)


def expect_raise_on_every_rank(comm, exc_type, fn, must_contain=(), what=""):
    """Call fn on this rank; assert it raised exc_type on EVERY rank.

    must_contain: substrings (case-insensitive) the message has to contain.
    Returns this rank's exception.
    """
    name, msg, exc = outcome_of(fn)
    ok = exc is not None and isinstance(exc, exc_type)
    missing = [s for s in must_contain if ok and str(s).lower() not in msg.lower()]
    report = comm.allgather((ok, name, msg[:400], missing))
    problems = []
    for r, (r_ok, r_name, r_msg, r_missing) in enumerate(report):
        if not r_ok:
            expected = " or ".join(t.__name__ for t in (exc_type if isinstance(exc_type, tuple) else (exc_type,)))
            problems.append(f"  rank {r}: expected {expected}, got {r_name or 'no exception'}: {r_msg}")
        elif r_missing:
            problems.append(f"  rank {r}: message lacks {r_missing}: {r_msg}")
    if problems:
        raise AssertionError(f"{what}: not raised as specified on every rank:\n" + "\n".join(problems))
    return exc


class ResultStore:
    """Results of one launch, written by rank 0 so that the driver can compare
    launches with different settings (fusion on/off, ring vs mpi algorithm)."""

    def __init__(self):
        self.entries = {}

    def add(self, key, result, exact, tol=None):
        assert key not in self.entries, f"duplicate result key {key}"
        self.entries[key] = (np.array(result, copy=True), bool(exact), None if tol is None else np.asarray(tol))

    def save(self, directory):
        import json

        arrays, meta = {}, {}
        for i, (key, (res, exact, tol)) in enumerate(self.entries.items()):
            arrays[f"r{i}"] = np.frombuffer(np.ascontiguousarray(res).tobytes(), dtype=np.uint8)
            if tol is not None:
                arrays[f"t{i}"] = tol.astype(np.float64).reshape(-1)
            meta[key] = {"index": i, "dtype": dtype_name(res.dtype), "shape": list(res.shape), "exact": exact}
        os.makedirs(directory, exist_ok=True)
        np.savez(os.path.join(directory, "results.npz"), **arrays)
        with open(os.path.join(directory, "results.json"), "w") as f:
            json.dump(meta, f)
