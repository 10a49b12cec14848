"""torch.distributed `Work` objects over horo handles.

A Work is finished by whoever asks first: `wait()` on the caller's thread, or the
completion thread once `get_future()` has been asked for (DDP's reducer and its
communication hooks wait on the future from C++, which runs no Python, so the
future has to be completed by a thread of ours).
"""
import queue
import threading

import torch
import torch.distributed as dist

from horo.torch.handles import poll, synchronize


class HoroWork(dist._Work):
    """One torch.distributed operation made of zero or more horo handles.

    `finish(values)` runs once they are all synchronized (values: what each handle's
    synchronize() returned, in order); it copies results into the caller's tensors and
    returns what the future holds (by default `outputs`).
    """

    def __init__(self, handles=(), finish=None, outputs=None, what="operation"):
        super().__init__()
        self._handles = list(handles)
        self._finish = finish
        self._outputs = outputs if outputs is not None else []
        self._what = what
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        self._value = None
        self._future = None

    @classmethod
    def finished(cls, outputs=None, what="operation"):
        """A Work for an operation that already completed (a blocking call, or one with nothing to move)."""
        work = cls(outputs=outputs, what=what)
        work._done, work._value = True, work._outputs  # what _complete() would set, without its lock
        return work

    @classmethod
    def failed(cls, error, what="operation"):
        work = cls(what=what)
        work._done, work._error = True, error
        return work

    def _complete(self):
        with self._lock:
            if not self._done:
                try:
                    values = [synchronize(h) for h in self._handles]
                    self._value = self._finish(values) if self._finish is not None else self._outputs
                except Exception as e:  # noqa: BLE001 - kept, raised by wait() and set on the future
                    self._error = e
                # Not in a finally: a KeyboardInterrupt leaves the operation pending, to be waited again.
                self._done = True
        future = self._future
        if future is not None and not future.done():
            if self._error is not None:
                future.set_exception(self._error)
            else:
                future.set_result(self._value)

    def wait(self, timeout=None):
        self._complete()
        if self._error is not None:
            raise self._error
        return True

    def synchronize(self):
        self.wait()

    def is_completed(self):
        if self._done:
            return True
        return all(poll(h) for h in self._handles)

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._value if isinstance(self._value, list) else self._outputs

    def get_future(self):
        if self._future is None:
            self._future = torch.futures.Future()
            if self._done or _completer.is_current():
                # On the completer itself (a future's callback, e.g. PowerSGD's, starting the next allreduce
                # and waiting for it), finish here: queued behind the callback it would never be reached.
                self._complete()
            else:
                _completer.submit(self)
        return self._future

    def __repr__(self):
        return f"HoroWork({self._what}, done={self._done})"


class _Completer:
    """One daemon thread that finishes, in submission order, the Works whose future was asked for.
    horo's synchronize() releases the GIL while it waits, so the thread costs the training loop nothing."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._start_lock = threading.Lock()

    def submit(self, work):
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="horo-c10d-completer", daemon=True)
                    self._thread.start()
        self._queue.put(work)

    def is_current(self):
        return self._thread is not None and threading.current_thread() is self._thread

    def _run(self):
        while True:
            work = self._queue.get()
            try:
                work._complete()
            except BaseException:  # noqa: BLE001 - an interrupted wait: the owner's wait() retries it
                pass


_completer = _Completer()
