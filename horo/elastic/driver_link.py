"""A rank's connection to the elastic driver (horo-run), which holds the last committed state.

horo-run starts every rank of an elastic job with HORO_ELASTIC_DRIVER (its addresses and port),
HORO_ELASTIC_SECRET and HORO_ELASTIC_GENERATION (0 for the first launch, +1 per relaunch).
Only rank 0 talks to the driver; the other ranks learn what it hears through horo collectives.
Rank 0 holds up to three connections, so none waits behind another: requests and answers (this
module's DriverLink), the host-update notifications the driver pushes (HostWatch: a thread sets a
flag commit() reads) and, where the driver runs on another machine, the commits (CommitSender: a
thread sends each one while training goes on). On the driver's machine a commit is written into
memory the driver maps instead (horo.elastic.commit_slots; Handoff chooses).
"""
import os
import socket
import sys
import threading
import time

from horo.elastic.commit_slots import CommitSlots
from horo.elastic.wire import WireError, recv_message, send_message

DRIVER_VARIABLE = "HORO_ELASTIC_DRIVER"
SECRET_VARIABLE = "HORO_ELASTIC_SECRET"
GENERATION_VARIABLE = "HORO_ELASTIC_GENERATION"
CONNECT_TIMEOUT_SECONDS = 3.0
# A commit of a large model may take a while to cross a slow link; the driver answers at once.
ANSWER_TIMEOUT_SECONDS = 300.0


def under_driver():
    """True in a rank launched by `horo-run --host-discovery-script ...` (an elastic job)."""
    return bool(os.environ.get(DRIVER_VARIABLE))


def generation():
    """How many times horo-run has relaunched this job before this launch (0: the first launch)."""
    return int(os.environ.get(GENERATION_VARIABLE, "0") or 0)


def _addresses(text):
    hosts, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{DRIVER_VARIABLE}={text!r}: expected ADDRESS[,ADDRESS...]:PORT")
    return [(h, int(port)) for h in hosts.split(",") if h]


class DriverLink:
    """One connection to the driver, opened at the first request and kept for the process."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        self._addresses = _addresses(env[DRIVER_VARIABLE])
        self._secret = env.get(SECRET_VARIABLE, "")
        self._generation = int(env.get(GENERATION_VARIABLE, "0") or 0)
        self._sock = None

    def header(self, op, **fields):
        """A message's header: the operation, this job's secret and launch generation, and `fields`."""
        return {"op": op, "secret": self._secret, "generation": self._generation, **fields}

    def connect(self):
        # The driver listens on all its addresses; the first one reachable from this host wins
        # (loopback on the driver's machine, the cluster network elsewhere).
        errors = []
        for address in self._addresses:
            try:
                sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_SECONDS)
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e.strerror or e}")
                continue
            sock.settimeout(ANSWER_TIMEOUT_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise ConnectionError("cannot reach the elastic driver (horo-run) at any of its addresses: "
                              + "; ".join(errors))

    def request(self, op, payload=b"", **fields):
        """Sends one request and returns (answer header, answer payload); one reconnect on a dropped link."""
        header = self.header(op, **fields)
        for attempt in (0, 1):
            if self._sock is None:
                self._sock = self.connect()
            try:
                send_message(self._sock, header, payload)
                answer, data = recv_message(self._sock)
                break
            except (OSError, WireError):
                self.close()
                if attempt:
                    raise
                time.sleep(0.1)
        if answer.get("error"):
            raise ConnectionError(f"the elastic driver refused {op!r}: {answer['error']}")
        return answer, data

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


class CommitSender:
    """Sends rank 0's commits to a driver on another machine from a thread of its own, one at a time, so a
    commit costs the step its in-memory copy and not the transfer. The driver keeps a commit only once it holds all
    of it; `wait()` returns when the last one handed over is held there."""

    def __init__(self, env=None):
        self._link = DriverLink(env)
        self._cond = threading.Condition()
        self._pending = None  # (payload, fields) not yet taken by the thread
        self._busy = False  # a commit handed over and not yet answered
        self._error = None
        self._thread = threading.Thread(target=self._loop, name="horo-elastic-commit", daemon=True)
        self._thread.start()

    def submit(self, payload, **fields):
        """Queues one commit. The caller must not change what `payload` points to before `wait()` returns."""
        with self._cond:
            self._raise_error()
            self._pending = (payload, fields)
            self._busy = True
            self._cond.notify_all()

    def wait(self, timeout=None):
        """Blocks until the driver holds every commit submitted (True), or `timeout` passes (False);
        raises the error that stopped the last hand-off."""
        with self._cond:
            done = self._cond.wait_for(lambda: not self._busy, timeout=timeout)
            self._raise_error()
            return done

    def _raise_error(self):
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _loop(self):
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                (payload, fields), self._pending = self._pending, None
            try:
                self._link.request("commit", payload, **fields)
            except (OSError, ConnectionError) as e:
                error = e
            else:
                error = None
            with self._cond:
                self._error = error or self._error
                self._busy = self._pending is not None
                self._cond.notify_all()


class HostWatch:
    """A connection on which the driver pushes one message when the job should change hosts; a thread
    waits on it and sets `updated`, so checking for host updates asks nobody."""

    def __init__(self, env=None):
        self.updated = threading.Event()
        self._link = DriverLink(env)
        self._thread = threading.Thread(target=self._loop, name="horo-elastic-hosts", daemon=True)
        self._thread.start()

    def _loop(self):
        link = self._link
        try:
            sock = link.connect()
            sock.settimeout(None)  # the driver writes only when the hosts change, which may be never
            send_message(sock, link.header("watch"))
        except (OSError, ConnectionError) as e:
            print(f"horo: elastic: no host-update notifications from the driver: {e}", flush=True)
            return
        try:
            answer, _ = recv_message(sock)
        except (OSError, WireError):
            return  # the driver closed it: this launch is ending
        if answer.get("hosts_updated"):
            self.updated.set()


class Handoff:
    """Rank 0's commits to the driver. On the driver's machine each one is written into a slot the driver
    maps (horo.elastic.commit_slots) and is held there once commit() returns; elsewhere (the driver cannot
    open the slot) it goes over the socket from CommitSender's thread, and the next commit waits for it."""

    def __init__(self, env=None):
        self._env = env
        self._link = DriverLink(env)
        self._slots = CommitSlots() if hasattr(os, "memfd_create") else None
        self._sender = None

    def next_slot(self):
        """The slot the next commit is written into (None where commits go over the socket): a state may save
        into it (Slot.view) so that its commit is already in place."""
        return self._slots.next() if self._slots is not None else None

    def commit(self, parts):
        """Hands over one commit (bytes-like, or a list of parts). Returns the slot it was written into, or
        None where it went to the socket."""
        parts = parts if isinstance(parts, list) else [parts]
        if self._slots is not None:
            slot = self._slots.next(sum(memoryview(p).nbytes for p in parts))
            length = slot.write(parts)
            answer, _ = self._link.request("commit", slot=slot.describe(length))
            if answer.get("held"):
                self._slots.held(slot)
                return slot
            print(f"horo: elastic: the driver cannot map rank 0's commits ({answer.get('why')}); sending them "
                  "over its socket instead", file=sys.stderr, flush=True)
            self._slots = None
        if self._sender is None:
            self._sender = CommitSender(self._env)
        self._sender.submit(parts)
        return None

    def wait(self, timeout=None):
        """Blocks until the driver holds every commit handed over (True), or `timeout` passes (False)."""
        return True if self._sender is None else self._sender.wait(timeout)


_link = None
_handoff = None
_watch = None


def link():
    """This process's DriverLink (None outside an elastic job)."""
    global _link
    if _link is None and under_driver():
        _link = DriverLink()
    return _link


def handoff():
    """This process's Handoff (None outside an elastic job); only rank 0 uses one."""
    global _handoff
    if _handoff is None and under_driver():
        _handoff = Handoff()
    return _handoff


def host_watch():
    """This process's HostWatch (None outside an elastic job); rank 0 starts it at the launch's start."""
    global _watch
    if _watch is None and under_driver():
        _watch = HostWatch()
    return _watch


def handoff_done(timeout=None):
    """Waits until the driver holds rank 0's last commit (True at once where nothing is on its way)."""
    return True if _handoff is None else _handoff.wait(timeout)
