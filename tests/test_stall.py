"""Stalled ranks (issue #14, item 1): the stall warning reaches Python's logging and
stderr; HOROVOD_STALL_SHUTDOWN_TIME_SECONDS turns a stall into an error naming the tensor
and the missing rank, on every rank that submitted it."""
import pytest


@pytest.mark.timeout(150)
@pytest.mark.parametrize("np_", [2, 3])
def test_stall_warning_through_logging_and_stderr(ranks, np_):
    ranks(np_, "ranks_stall.py", select="warning", timeout=120, env={"HORO_STALL_CHECK_TIME_SECONDS": "1"})


@pytest.mark.timeout(150)
@pytest.mark.parametrize("np_", [2, 3])
def test_stall_shutdown_time_raises_naming_tensor_and_missing_rank(ranks, np_):
    ranks(np_, "ranks_stall.py", select="shutdown_time", timeout=120,
          env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "3"})
