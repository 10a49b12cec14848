"""500 async allreduces enqueued in a different order on every rank, then synchronised.

Runs inside each MPI rank. The coordinator must agree on one global order although
no two ranks submit in the same order; every result must still match NumPy and be
bit-identical on all ranks. The second round reuses the names (response cache hits).
"""
import time

import numpy as np

from horo_reference import DTYPES, OPS, check_result, digest, kinds_for, make_rank_inputs, must_be_exact
from rank_helpers import gather_and_compare

N_TENSORS = 500


def _spec(i):
    """(dtype, op, shape, in_place) of tensor i: the same on every rank."""
    rng = np.random.default_rng(10_000 + i)
    dtype = DTYPES[i % len(DTYPES)]
    op = OPS[(i // len(DTYPES)) % len(OPS)]
    n = int(rng.integers(0, 300)) if i % 17 else 0  # every 17th tensor is empty
    shape = (n,) if i % 5 else (n // 3 + 1, 3)
    return dtype, op, shape, (i % 3 == 0)


def _run_round(hvd, comm, round_no, poll_first):
    size, rank = hvd.size(), hvd.rank()
    cases = []
    for i in range(N_TENSORS):
        dtype, op, shape, in_place = _spec(i)
        kind = kinds_for(dtype)[0]
        inputs = make_rank_inputs(("async", round_no, i), dtype, shape, op, kind, size)
        cases.append((dtype, op, kind, in_place, inputs, inputs[rank].copy()))

    enqueue_order = np.random.default_rng([77, round_no, rank]).permutation(N_TENSORS)
    gather_and_compare(comm, True, "setup")  # all ranks ready: start together
    handles = {}
    for i in enqueue_order:
        dtype, op, kind, in_place, inputs, x = cases[i]
        enqueue = hvd.allreduce_async_ if in_place else hvd.allreduce_async
        handles[i] = enqueue(x, name=f"async.tensor.{i}", op=getattr(hvd, op))
    assert len(set(handles.values())) == N_TENSORS, "handles must be distinct"

    if poll_first:
        deadline = time.monotonic() + 120
        pending = set(range(N_TENSORS))
        while pending and time.monotonic() < deadline:
            pending = {i for i in pending if not hvd.poll(handles[i])}
            if pending:
                time.sleep(0.002)
        assert not pending, f"{len(pending)} handles never reported done by poll()"

    results = {}
    sync_order = np.random.default_rng([99, round_no, rank]).permutation(N_TENSORS)
    for i in sync_order:
        results[i] = hvd.synchronize(handles[i])

    digests = []
    for i in range(N_TENSORS):
        dtype, op, kind, in_place, inputs, x = cases[i]
        exact = must_be_exact(dtype, op, kind, size)
        what = f"round {round_no} tensor {i} ({op} {dtype} {inputs[0].shape} {'in place' if in_place else 'out of place'})"
        check_result(results[i], inputs, op, exact, what=what)
        if in_place:
            check_result(x, inputs, op, exact, what=what + " input array")
        digests.append(digest(results[i]))
    gather_and_compare(comm, digests, f"round {round_no} result digests")


def test_500_tensors_enqueued_in_a_per_rank_order_all_complete_correctly(hvd, comm):
    _run_round(hvd, comm, round_no=0, poll_first=False)


def test_second_round_with_the_same_names_and_polling_completes_correctly(hvd, comm):
    _run_round(hvd, comm, round_no=1, poll_first=True)


def test_ranks_submitting_at_different_times_still_agree(hvd, comm):
    """Rank r sleeps r*50 ms between its two halves: coordination waits for stragglers."""
    size, rank = hvd.size(), hvd.rank()
    cases = [make_rank_inputs(("stagger", i), "float32", (i + 1,), "Sum", "exact", size) for i in range(40)]
    order = np.random.default_rng([5, rank]).permutation(len(cases))
    handles = {}
    for k, i in enumerate(order):
        if k == len(order) // 2:
            time.sleep(0.05 * rank)
        handles[i] = hvd.allreduce_async(cases[i][rank], name=f"stagger.{i}", op=hvd.Sum)
    for i in range(len(cases)):
        check_result(hvd.synchronize(handles[i]), cases[i], "Sum", True, what=f"stagger {i}")
