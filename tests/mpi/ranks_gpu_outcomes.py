"""The GPU path's cross-rank decisions, run for real over MPI without a GPU
(gpu/collective_outcome.h): a step one rank fails (creating the NCCL
communicator, an NCCL error found in flight) raises on every rank, naming each
failing rank and its reason, and leaves the ranks in step.

Runs inside each MPI rank (np >= 2).
"""
import pytest
from mpi4py import MPI

import horo
from horo._native import _core
from rank_helpers import expect_raise_on_every_rank

NCCL_REASON = "ncclCommInitRankConfig: unhandled system error (NCCL error 2)"


@pytest.fixture(autouse=True)
def _needs_two_ranks(comm):
    if comm.Get_size() < 2:
        pytest.skip("needs at least two ranks")


def agree(comm, local_error, what="creating the NCCL communicator"):
    _core._agree_outcome_for_test(MPI._addressof(comm), local_error, what)


def test_every_rank_succeeding_returns_on_every_rank(comm):
    agree(comm, "")
    assert comm.allreduce(1) == comm.Get_size()


def test_one_failing_rank_raises_on_every_rank_naming_it_and_nccls_reason(comm):
    last = comm.Get_size() - 1
    exc = expect_raise_on_every_rank(
        comm, horo.HoroError, lambda: agree(comm, NCCL_REASON if comm.Get_rank() == last else ""),
        must_contain=("creating the NCCL communicator failed on rank " + str(last), f"rank {last}: " + NCCL_REASON),
        what="one failing rank",
    )
    # Word for word the same message everywhere.
    assert len(set(comm.allgather(str(exc)))) == 1


def test_several_failing_ranks_are_all_named(comm):
    n = comm.Get_size()
    failing = [r for r in range(n) if r % 2 == 0]
    reason = f"cudaStreamCreateWithFlags failed: out of memory on rank {comm.Get_rank()}"
    expect_raise_on_every_rank(
        comm, horo.HoroError, lambda: agree(comm, reason if comm.Get_rank() in failing else "", "preparing"),
        must_contain=["preparing failed on ranks " if len(failing) > 1 else "preparing failed on rank "]
        + [f"rank {r}: cudaStreamCreateWithFlags failed: out of memory on rank {r}" for r in failing],
        what="several failing ranks",
    )


def test_ranks_stay_in_step_after_a_failure(comm):
    for round_ in range(3):
        failing = round_ % comm.Get_size()
        with pytest.raises(horo.HoroError, match=f"on rank {failing}"):
            agree(comm, "boom" if comm.Get_rank() == failing else "")
        agree(comm, "")
    assert comm.allgather(comm.Get_rank()) == list(range(comm.Get_size()))
