"""The hosts an elastic job may use: what the discovery script prints, less the blacklisted ones.

A host whose rank failed is blacklisted: for the rest of the job, or, with a cooldown range
LO..HI, for LO seconds after its first failure, doubling per further failure up to HI.
"""
import subprocess
import sys
import threading
import time

from horo.run.hosts import Host, HostSpecError, _slots

POLL_SECONDS = 1.0
SCRIPT_TIMEOUT_SECONDS = 30.0


def parse_discovery_output(text, default_slots):
    """'host:slots' or 'host' lines -> {host: slots}, in the order printed (a repeated host: the last line)."""
    found = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, count = line.rpartition(":")
        if not sep:
            name, count = line, str(default_slots)
        if not name or any(c.isspace() for c in name):
            raise HostSpecError(f"discovery output line {number}: cannot read {raw.strip()!r} (expected 'host:slots')")
        found[name] = _slots(count, f"discovery output line {number}")
    return found


class HostDiscovery:
    """Runs the discovery script about once a second on a thread of its own, and keeps the blacklist."""

    def __init__(self, script, default_slots=1, cooldown_range=None, clock=time.monotonic):
        self.script = script
        self.default_slots = default_slots
        self.cooldown_range = cooldown_range
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._discovered = {}
        self._polls = 0
        self._failures = {}  # host -> failures so far
        self._blacklisted_until = {}  # host -> clock time it comes back (inf: never)
        self._last_error = None
        self._stop = threading.Event()
        self._thread = None

    def poll_once(self):
        try:
            proc = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                  timeout=SCRIPT_TIMEOUT_SECONDS)
            if proc.returncode != 0:
                raise HostSpecError(f"exited with code {proc.returncode}: {proc.stderr.strip()[-500:]}")
            found = parse_discovery_output(proc.stdout, self.default_slots)
        except (HostSpecError, subprocess.TimeoutExpired, OSError) as e:
            # A failing script keeps the last hosts it named; say so once per distinct error.
            if str(e) != self._last_error:
                self._last_error = str(e)
                print(f"horo-run: elastic: host discovery script {self.script!r}: {e}", file=sys.stderr, flush=True)
            with self._changed:
                self._polls += 1
                self._changed.notify_all()
            return
        self._last_error = None
        with self._changed:
            self._discovered = found
            self._polls += 1
            self._changed.notify_all()

    def start(self):
        self.poll_once()
        self._thread = threading.Thread(target=self._loop, name="horo-host-discovery", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SCRIPT_TIMEOUT_SECONDS + 1)

    def _loop(self):
        while not self._stop.wait(POLL_SECONDS):
            self.poll_once()

    def wait_for_poll(self, timeout):
        """Blocks until the next poll ends (or `timeout` passes)."""
        with self._changed:
            polls = self._polls
            self._changed.wait_for(lambda: self._polls != polls, timeout=timeout)

    def blacklist(self, host):
        """Marks `host` failed; returns how long it stays out (inf: for good)."""
        with self._lock:
            failures = self._failures.get(host, 0) + 1
            self._failures[host] = failures
            if self.cooldown_range is None:
                seconds = float("inf")
            else:
                lo, hi = self.cooldown_range
                seconds = min(hi, lo * 2 ** (failures - 1))
            self._blacklisted_until[host] = self._clock() + seconds
            return seconds

    def blacklisted(self):
        now = self._clock()
        with self._lock:
            return {h for h, until in self._blacklisted_until.items() if until > now}

    def available(self):
        """{host: slots} discovered and not blacklisted now, in the script's order."""
        out_now = self.blacklisted()
        with self._lock:
            return {h: s for h, s in self._discovered.items() if h not in out_now}

    def discovered(self):
        with self._lock:
            return dict(self._discovered)


def plan_hosts(available, max_np, prefer=()):
    """The hosts (with the slots to use on each) for a launch of as many ranks as `available` offers,
    up to max_np: hosts in `prefer` (the current launch's) first, so a change moves as few ranks as it can."""
    order = [h for h in prefer if h in available] + [h for h in available if h not in prefer]
    planned, total = [], 0
    for name in order:
        take = available[name] if max_np is None else min(available[name], max_np - total)
        if take <= 0:
            break
        planned.append(Host(name, take))
        total += take
    return planned
