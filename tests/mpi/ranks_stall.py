"""The stall inspector, inside each MPI rank (np >= 2): a tensor rank 1 submits late is
warned about through Python's logging (logger "horo") as well as stderr, and with
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS a tensor rank 1 never submits fails on the other ranks
with an error naming the tensor and the missing rank; horo keeps working afterwards.
The driver (tests/test_stall.py) sets the stall times."""
import logging
import time

import numpy as np
import pytest

from horo_reference import check_result, make_rank_inputs


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(autouse=True)
def _needs_two_ranks(comm):
    if comm.Get_size() < 2:
        pytest.skip("needs at least two ranks")


def test_stall_warning_goes_through_python_logging_and_stderr(hvd, comm, capfd):
    rank, size = hvd.rank(), hvd.size()
    name = "stalled.late"
    inputs = make_rank_inputs(name, "float32", (5,), "Sum", "exact", size)
    records = Records()
    logging.getLogger("horo").addHandler(records)
    try:
        if rank == 1:
            time.sleep(4)  # HORO_STALL_CHECK_TIME_SECONDS is 1
        check_result(hvd.allreduce(inputs[rank], name=name, op=hvd.Sum), inputs, "Sum", True, what=name)
    finally:
        logging.getLogger("horo").removeHandler(records)
    if rank == 0:  # the coordinator inspects stalls
        warnings = [r for r in records.records if r.levelno == logging.WARNING and name in r.getMessage()]
        assert warnings, f"no stall warning for {name} through logging: {[r.getMessage() for r in records.records]}"
        assert "rank(s) 1" in warnings[0].getMessage(), warnings[0].getMessage()
        assert warnings[0].name == "horo"
        stderr = capfd.readouterr().err
        assert f"[horo WARNING rank 0] stall: allreduce '{name}'" in stderr, stderr[-2000:]


def test_stall_shutdown_time_fails_the_tensor_naming_it_and_the_missing_rank(hvd, comm):
    rank, size = hvd.rank(), hvd.size()
    name = "stalled.never"
    if rank != 1:
        with pytest.raises(hvd.HoroError) as raised:
            hvd.allreduce(np.ones(3, np.float32), name=name)
        message = str(raised.value)
        for part in (name, "rank(s) 1", "STALL_SHUTDOWN_TIME_SECONDS"):
            assert part in message, f"{part!r} missing from: {message}"
    comm.Barrier()
    inputs = make_rank_inputs("after.stall", "int32", (7,), "Sum", "wide", size)
    check_result(hvd.allreduce(inputs[rank], name="after.stall", op=hvd.Sum), inputs, "Sum", True, what="after")
