"""A rank's connection to the elastic driver (horo-run), which holds the last committed state.

horo-run starts every rank of an elastic job with HORO_ELASTIC_DRIVER (its addresses and port),
HORO_ELASTIC_SECRET and HORO_ELASTIC_GENERATION (0 for the first launch, +1 per relaunch).
Only rank 0 talks to the driver; the other ranks learn what it hears through horo collectives.
"""
import os
import socket
import time

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

    def _connect(self):
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
        header = {"op": op, "secret": self._secret, "generation": self._generation, **fields}
        for attempt in (0, 1):
            if self._sock is None:
                self._sock = self._connect()
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


_link = None


def link():
    """This process's DriverLink (None outside an elastic job)."""
    global _link
    if _link is None and under_driver():
        _link = DriverLink()
    return _link
