"""The driver's end of the ranks' connections (horo.elastic.driver_link): it holds the last committed
state in memory and tells rank 0 when the hosts changed.

    fetch      -> the last commit (empty before the first one); rank 0 asks at the start of a launch
    commit     <- where rank 0 wrote its serialised state ("slot": pid, fd, nonce, length; the driver maps it,
                  horo.elastic.commit_slots) -> {"commits": n, "held": true}, or {"held": false, "why": ...}
                  when it cannot (another machine); then the state itself, sent from a thread of rank 0's
                  -> {"commits": n} once held
    watch      rank 0, at its start: the connection stays open, and the driver writes {"hosts_updated": true}
               on it when the job should change hosts (the launch then stops at its next commit)
    leaving    rank 0, after that commit reached the driver: the launch is stopping for the new hosts
    peer_lost  <- a rank's report that a peer failed (the message names the peers' hosts)
    hello      <- every rank, at its start; its connection then stays open, so a rank that dies is seen
                  at once (the kernel closes its socket): the first rank to go names the failed host when
                  the launcher cannot (Open MPI's "Socket closed" abort, reported for a survivor)

A commit replaces the last one only once all of its bytes are in: one cut off by a fault is dropped,
and the relaunch resumes from the one before. A request from a launch other than the current one is
refused, so a rank of an ending launch cannot overwrite what the new one resumes from.
"""
import fcntl
import hmac
import os
import secrets
import socket
import socketserver
import struct
import sys
import threading
import time

from horo.elastic.commit_slots import open_held, read_held
from horo.elastic.wire import WireError, recv_message, send_message

_SIOCGIFADDR = 0x8915


def local_ipv4_addresses():
    """This machine's IPv4 addresses, loopback first (ranks on this machine reach it at once)."""
    found = ["127.0.0.1"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue  # no IPv4 address on this interface
            address = socket.inet_ntoa(packed[20:24])
            if address not in found:
                found.append(address)
    return found


class _Refused(Exception):
    pass


class StateServer:
    """The TCP service the ranks reach through HORO_ELASTIC_DRIVER; answers from threads of its own."""

    def __init__(self, hosts_updated, wait_for_hosts=time.sleep, on_leaving=None):
        """`hosts_updated(generation)` -> bool: whether that launch should stop at its next commit, asked
        again after each `wait_for_hosts(seconds)` (a new discovery poll); `on_leaving(generation)`:
        that launch's rank 0 said it stops for the hosts."""
        self.secret = secrets.token_hex(16)
        self.generation = 0
        self.commits = 0  # commits received over the whole job
        self.peer_reports = []  # (generation, rank, host, message)
        self.departures = []  # (clock time, generation, rank): connections that closed, in order
        self.last_commit_time = None
        self._hosts_updated = hosts_updated
        self._wait_for_hosts = wait_for_hosts
        self._on_leaving = on_leaving
        self._closed = threading.Event()
        self._state = b""  # the last commit's bytes: received, or mapped from rank 0's slot
        self._spare = None  # the commit before the last one's memory, refilled by the next commit
        self._slots = {}  # (pid, fd, nonce) -> the driver's descriptor of a rank 0's commit slot
        self._lock = threading.Lock()
        self._fetched = threading.Event()
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.rank = None
                while True:
                    try:
                        header, payload = recv_message(self.request, accept=server._accept,
                                                       payload_buffer=server._commit_buffer)
                    except (WireError, OSError, _Refused):
                        if self.rank is not None:
                            with server._lock:
                                server.departures.append((time.monotonic(), self.generation, self.rank))
                        return
                    if header.get("op") == "hello" and isinstance(header.get("rank"), int):
                        self.rank, self.generation = header["rank"], header.get("generation")
                    if header.get("op") == "watch":
                        server._watch(self.request, header.get("generation"))
                        return
                    try:
                        answer, data = server._answer(header, payload)
                    except _Refused as e:
                        answer, data = {"error": str(e)}, b""
                    try:
                        send_message(self.request, answer, data)
                    except OSError:
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("0.0.0.0", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="horo-elastic-state", daemon=True)
        self._thread.start()

    def address_variable(self):
        return ",".join(local_ipv4_addresses()) + f":{self.port}"

    def close(self):
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for fd in self._slots.values():
                os.close(fd)
            self._slots.clear()

    def new_generation(self, generation):
        with self._lock:
            self.generation = generation
            self._fetched.clear()

    def wait_fetched(self, timeout):
        return self._fetched.wait(timeout)

    def first_departure(self, generation):
        """(clock time, rank) of the first rank of launch `generation` whose connection closed, or None."""
        with self._lock:
            for at, gen, rank in self.departures:
                if gen == generation:
                    return at, rank
        return None

    def _watch(self, sock, generation):
        """Holds rank 0's watch connection of launch `generation`: writes once when its hosts change."""
        while not self._closed.is_set():
            with self._lock:
                if generation != self.generation:
                    return
            if self._hosts_updated(generation):
                try:
                    send_message(sock, {"hosts_updated": True})
                except OSError:
                    pass
                return
            self._wait_for_hosts(1.0)

    def _hold_slot(self, slot):
        """Maps the commit rank 0 wrote into its slot; keeps a descriptor for that slot and the other one,
        and lets go of any older (a relaunch's rank 0 has slots of its own)."""
        key = (slot["pid"], slot["fd"], slot["nonce"])
        if key not in self._slots:
            self._slots[key] = open_held(*key, slot["length"])
        self._state = read_held(self._slots[key], slot["length"])
        self._spare = None
        for old in list(self._slots)[:-2]:
            if old != key:
                os.close(self._slots.pop(old))

    @property
    def committed_bytes(self):
        return len(self._state)

    def _accept(self, header):
        if not hmac.compare_digest(str(header.get("secret", "")), self.secret):
            raise _Refused("wrong secret")
        if header.get("op") == "commit" and header.get("generation") != self.generation:
            raise _Refused("a commit from a launch that has ended")  # before its payload is read

    def _commit_buffer(self, header, length):
        # A model's state each commit: reusing the same memory saves allocating and page-faulting it.
        with self._lock:
            spare, self._spare = self._spare, None
        return spare if spare is not None and len(spare) == length else None

    def _answer(self, header, payload):
        op = header.get("op")
        generation = header.get("generation")
        with self._lock:
            if generation != self.generation:
                raise _Refused(f"request from launch {generation}, but launch {self.generation} is running")
            if op == "fetch":
                self._fetched.set()
                say(f"launch {generation}: the ranks are up; rank 0 takes "
                    + (f"commit {self.commits} ({len(self._state)} bytes)" if self._state else "no commit (none yet)"))
                return {"commits": self.commits}, self._state
            if op == "commit":
                if isinstance(header.get("slot"), dict):
                    try:
                        self._hold_slot(header["slot"])
                    except (OSError, KeyError, TypeError, ValueError) as e:
                        return {"held": False, "why": str(e)}, b""
                else:
                    if isinstance(self._state, bytearray) and self._state is not payload:
                        self._spare = self._state
                    self._state = payload
                self.commits += 1
                self.last_commit_time = time.monotonic()
                return {"commits": self.commits, "held": True}, b""
            if op == "peer_lost":
                self.peer_reports.append((generation, header.get("rank"), header.get("host"),
                                          str(header.get("message", ""))))
                return {}, b""
            if op == "hello":
                return {}, b""
            if op != "leaving":
                raise _Refused(f"unknown request {op!r}")
        if self._on_leaving is not None:
            self._on_leaving(generation)
        return {}, b""


def say(message):
    print(f"horo-run: elastic: {message}", file=sys.stderr, flush=True)
