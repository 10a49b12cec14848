"""Runs the launch command: output passes through live, a failed rank is named.

mpirun's stderr is read through a pipe rather than inherited so that its
failure report can be parsed while every byte still reaches the user at once
(partial lines included: progress bars redraw with '\\r'). stdout is inherited
untouched.
"""
import collections
import os
import re
import select
import signal
import subprocess
import sys
from dataclasses import dataclass

from horo.run import session_dirs

# Open MPI 4 and 5 both print, once the first rank fails:
#     Process name: [[35121,1],1]            (5.x: [prterun-host-2897@1,1])
#     Exit code:    3
_PROCESS_NAME = re.compile(r"Process name:\s*\[(.*),(\d+)\]\s*$")
_EXIT_CODE = re.compile(r"Exit code:\s*(-?\d+)")
# ... or, for a rank killed by a signal (wrapped over lines at any space):
#     prterun noticed that process rank 1 with PID 123 on node n1 exited on
#     signal 9 (Killed).
_SIGNALLED = re.compile(r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+)")
# ... or, for a host its launcher daemon can no longer reach (Open MPI 5 then exits 0):
#     PRTE has lost communication with a remote daemon.
#       Remote daemon: [prterun-vm-3543@0,3] on node h3
_LOST_DAEMON = re.compile(r"Remote daemon:\s*\[.*\]\s+on\s+node\s+(\S+)")
# ... or, when a surviving rank's MPI noticed first that a peer's connection closed
# (a rank killed on another host, before the launcher reports the signal):
#     An MPI communication peer process has unexpectedly disconnected. ...
#       Peer host:  h3
_PEER_DISCONNECTED = re.compile(r"peer process has unexpectedly disconnected")
_PEER_HOST = re.compile(r"^\s*Peer host:\s*(\S+)")
# ... or, when a survivor's MPI (the ob1 layer over TCP) takes a closed connection as fatal without
# naming the peer, and the launcher then reports that survivor's abort rather than the dead rank:
#     [h2:00000] *** An error occurred in Socket closed
#     prterun has exited due to process rank 3 with PID 0 on node h2 calling
#     "abort". ...
_SOCKET_CLOSED = re.compile(r"An error occurred in Socket closed")
_ABORTED = re.compile(r"has\s+exited\s+due\s+to\s+process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+)"
                      r"\s+calling\s+\"abort\"")
_SIGNAL_WINDOW = 4  # lines the message may wrap over


@dataclass
class RankFailure:
    rank: int
    exit_code: int = None
    signal: int = None
    host: str = None
    lost_host: bool = False  # the launcher lost its connection to `host`; rank is None
    lost_peer: bool = False  # a rank's MPI lost its connection to a peer on `host`; rank is None
    aborted_on_lost_peer: bool = False  # `rank` on `host` aborted: its MPI lost a peer it did not name

    def summary(self):
        if self.lost_host:
            return (f"horo-run: lost the connection to host {self.host} (off the network, or its launcher "
                    "daemon died); the job was ended")
        if self.lost_peer:
            return (f"horo-run: a rank on host {self.host} disconnected (it died, or its host went off the "
                    "network); the job was ended")
        if self.aborted_on_lost_peer:
            return (f"horo-run: rank {self.rank} on host {self.host} ended the job: its MPI lost the connection "
                    "to a peer rank (\"Socket closed\"), which died or went off the network; Open MPI does not "
                    "say which")
        on = f" on host {self.host}" if self.host else ""
        if self.signal is not None:
            return f"horo-run: rank {self.rank} was killed by signal {self.signal}{on}"
        return f"horo-run: rank {self.rank} exited with code {self.exit_code}"


class FailureParser:
    """Fed mpirun's stderr line by line; keeps the first failed rank it names."""

    def __init__(self):
        self.failure = None
        self._pending_rank = None
        self._peer_disconnected = False
        self._socket_closed = False
        self._held = None  # a disconnected peer reported after "Socket closed" (see feed_line)
        self._recent = collections.deque(maxlen=_SIGNAL_WINDOW)
        self._partial = b""

    def feed(self, chunk):
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self.feed_line(line.decode("utf-8", "replace"))

    def close(self):
        if self._partial:
            self.feed_line(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        if self.failure is None:
            self.failure = self._held

    def feed_line(self, line):
        if self.failure is not None:
            return
        line = line.rstrip("\r")
        self._recent.append(line)
        m = _SIGNALLED.search(" ".join(self._recent))
        if m:
            self.failure = RankFailure(int(m.group(1)), signal=int(m.group(3)), host=m.group(2))
            return
        m = self._socket_closed and _ABORTED.search(" ".join(self._recent))
        if m:
            self.failure = RankFailure(int(m.group(1)), host=m.group(2), aborted_on_lost_peer=True)
            return
        if _SOCKET_CLOSED.search(line):
            self._socket_closed = True
            return
        m = _LOST_DAEMON.search(line)
        if m:
            self.failure = RankFailure(None, host=m.group(1), lost_host=True)
            return
        if _PEER_DISCONNECTED.search(line):
            self._peer_disconnected = True
            return
        m = _PEER_HOST.search(line)
        if m and self._peer_disconnected:
            lost = RankFailure(None, host=m.group(1), lost_peer=True)
            # After a survivor's "Socket closed" abort, a peer that disconnected may be that survivor
            # (its abort closed the connection): the launcher's report of the abort names it, so that
            # report comes first if it follows (seen in CI: rank 5 on h3 killed, rank 0 on h1 aborted,
            # and rank 4 on h3 then reported its peer on h1 gone).
            if self._socket_closed:
                self._held = self._held or lost
                self._peer_disconnected = False
                return
            self.failure = lost
            return
        m = _PROCESS_NAME.search(line)
        if m:
            self._pending_rank = int(m.group(2))
            return
        m = _EXIT_CODE.search(line)
        if m and self._pending_rank is not None:
            self.failure = RankFailure(self._pending_rank, exit_code=int(m.group(1)))


def parse_failure(text):
    """The first failed rank named in a launcher's output, or None."""
    parser = FailureParser()
    for line in text.splitlines():
        parser.feed_line(line)
    parser.close()
    return parser.failure


def _exit_status(returncode):
    return 128 - returncode if returncode < 0 else returncode


_received = []  # signals horo-run was sent while its launcher ran


def signalled():
    """Whether horo-run was sent SIGTERM/SIGHUP/SIGINT during the last run_job."""
    return bool(_received)


def _forward_signals(proc):
    """SIGTERM/SIGHUP/SIGINT sent to horo-run go on to mpirun, which stops the ranks.

    A Ctrl-C at a terminal already reaches mpirun (same process group), so
    SIGINT is passed on only when horo-run is not the terminal's foreground job.
    """

    def forward(signum, _frame):
        _received.append(signum)
        if signum == signal.SIGINT and _in_terminal_foreground():
            return
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, forward)


def _in_terminal_foreground():
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def pump_stderr(proc, each_round=None):
    """Copies `proc`'s stderr to ours as it comes, reading it for failures (FailureParser, returned
    closed), until the process has exited; `each_round()` runs about every 0.5 s."""
    parser = FailureParser()
    stderr_fd = proc.stderr.fileno()
    while True:
        if each_round is not None:
            each_round()
        # Not until EOF alone: a daemon on a host mpirun lost holds the pipe open after mpirun exits.
        exited = proc.poll() is not None
        try:
            chunk = os.read(stderr_fd, 65536) if select.select([stderr_fd], [], [], 0.5)[0] else None
        except InterruptedError:
            continue
        if chunk:
            _write_all(2, chunk)
            parser.feed(chunk)
        elif chunk == b"" or exited:
            break
    parser.close()
    proc.stderr.close()
    return parser


def run_job(argv, env, on_signal=None):
    """Runs argv; returns the exit status horo-run should exit with. `on_signal()` is called once, soon
    after horo-run is first sent SIGTERM/SIGHUP/SIGINT (inside Slurm: say why the job is ending while the
    launcher still winds down, as Slurm kills what is left soon after)."""
    session_dirs.remove_stale()
    try:
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    except OSError as e:
        print(f"horo-run: cannot start {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    _received.clear()
    _forward_signals(proc)

    def signalled():
        nonlocal on_signal
        if _received and on_signal is not None:
            on_signal()
            on_signal = None

    parser = pump_stderr(proc, signalled)
    status = _exit_status(proc.wait())
    failure = parser.failure
    if failure is not None:
        print(failure.summary(), file=sys.stderr, flush=True)
        if failure.lost_host or failure.aborted_on_lost_peer:
            return status or 1
        if failure.signal is not None:
            return 128 + failure.signal
        if failure.exit_code:
            return failure.exit_code & 0xFF or status or 1
    if status != 0 and failure is None:
        # Open MPI 5's launcher sometimes exits with the failed rank's code but without its report:
        # where that rank exits right after MPI_Finalize (horo finalizes at exit), 1 job in 3 to 10 on
        # a loaded 2-core machine; half a second between the two, and it reported every time.
        print(f"horo-run: {os.path.basename(argv[0])} exited with code {status} without naming a failed rank",
              file=sys.stderr, flush=True)
    return status


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except BrokenPipeError:
            return
        view = view[written:]
