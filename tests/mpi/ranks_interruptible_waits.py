"""A thread blocked in synchronize() wakes for Python signals: a SIGALRM handler (how
pytest-timeout ends a test) raises out of the wait, Ctrl-C raises KeyboardInterrupt,
and the collective keeps running: synchronizing the same handle later returns its result.
A blocking call (one crossing into the core, no handle) interrupted the same way keeps
its buffers alive until the collective is done.

Runs inside each MPI rank (np = 2): rank 0 waits on a tensor rank 1 submits only
after rank 0 was interrupted.
"""
import gc
import os
import signal
import threading
import time
import weakref

import numpy as np
import pytest

from horo_reference import check_result, make_rank_inputs


class AlarmFired(Exception):
    pass


@pytest.fixture(autouse=True)
def _two_ranks(comm):
    if comm.Get_size() != 2:
        pytest.skip("runs on exactly two ranks")


def _raise_alarm(signum, frame):
    raise AlarmFired()


def _interrupt_with(how):
    """Arms the signal; returns (expected exception, disarm)."""
    if how == "sigalrm":
        previous = signal.signal(signal.SIGALRM, _raise_alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        return AlarmFired, lambda: (signal.setitimer(signal.ITIMER_REAL, 0), signal.signal(signal.SIGALRM, previous))
    # Ctrl-C: SIGINT from another thread, as a terminal would send it to the process.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return KeyboardInterrupt, lambda: (timer.cancel(), signal.signal(signal.SIGINT, previous))


def _numpy_api(hvd, name, x):
    return hvd.allreduce_async(x, name=name, op=hvd.Sum), hvd.synchronize, lambda out: out


def _torch_api(hvd, name, x):
    import torch

    import horo.torch as ht

    return ht.allreduce_async(torch.from_numpy(x), name=name, op=ht.Sum), ht.synchronize, lambda out: out.numpy()


def _tensorflow_api(hvd, name, x):
    """Eager TensorFlow: the blocking call itself is interrupted. Its tensor stays in flight
    (so rank 1 is not left waiting), but there is no handle to resume."""
    import tensorflow as tf

    import horo.tensorflow as htf

    def call(_handle):
        return htf.allreduce(tf.constant(x), name=name, op=htf.Sum)

    return None, call, lambda out: out.numpy()


API = {"numpy": _numpy_api, "torch": _torch_api, "tensorflow": _tensorflow_api}


@pytest.mark.parametrize("how", ["sigalrm", "ctrl_c"])
@pytest.mark.parametrize("api", list(API))
def test_signal_interrupts_a_blocked_synchronize(hvd, comm, api, how):
    rank = hvd.rank()
    name = f"interruptible.{api}.{how}"
    inputs = make_rank_inputs(name, "float32", (33,), "Sum", "exact", 2)
    if rank == 0:
        handle, wait, as_numpy = API[api](hvd, name, inputs[0])
        expected, disarm = _interrupt_with(how)
        started = time.monotonic()
        try:
            with pytest.raises(expected):
                wait(handle)
        finally:
            disarm()
        waited = time.monotonic() - started
        assert waited < 20, f"the signal ended the wait only after {waited:.1f} s"
        comm.Barrier()  # now rank 1 submits
        if api != "tensorflow":  # an interrupted eager TF call has no handle; its tensor still serves rank 1
            out = as_numpy(wait(handle))
            check_result(out, inputs, "Sum", True, what=f"{name} after the interruption")
    else:
        comm.Barrier()
        out = hvd.allreduce(inputs[1], name=name, op=hvd.Sum)
        check_result(out, inputs, "Sum", True, what=name)
    comm.Barrier()


@pytest.mark.parametrize("how", ["sigalrm", "ctrl_c"])
def test_an_interrupted_blocking_call_holds_its_buffer_until_the_collective_is_done(hvd, comm, how):
    rank = hvd.rank()
    name = f"interrupted_blocking.{how}"
    inputs = make_rank_inputs(name, "float32", (33,), "Sum", "exact", 2)
    if rank == 0:
        x = inputs[0].copy()
        alive = weakref.ref(x)
        expected, disarm = _interrupt_with(how)
        try:
            hvd.allreduce_(x, name=name, op=hvd.Sum)  # rank 1 has not submitted: it waits
        except expected:
            pass  # (not pytest.raises: its record of the traceback would hold x)
        else:
            pytest.fail("the signal did not end the wait")
        finally:
            disarm()
        del x
        gc.collect()
        assert alive() is not None, "nothing holds the buffer the core will write the interrupted allreduce_ into"
    comm.Barrier()  # now rank 1 submits, and the collective writes into rank 0's buffer
    if rank == 1:
        check_result(hvd.allreduce(inputs[1], name=name, op=hvd.Sum), inputs, "Sum", True, what=name)
    # Blocking calls release the buffers of interrupted ones that are done: after the first
    # of these the interrupted collective has run (cycles run in order); the second releases.
    for i in range(2):
        hvd.allreduce(inputs[rank], name=f"{name}.after.{i}", op=hvd.Sum)
        held = alive() if rank == 0 else None
        if held is not None:
            check_result(held, inputs, "Sum", True, what=f"{name}, written after the interruption")
        del held
    if rank == 0:
        gc.collect()
        assert alive() is None, "the interrupted allreduce_'s buffer was never released"
    comm.Barrier()
