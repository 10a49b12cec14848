"""Where the ranks go: `-H` host lists, hostfiles, and how many slots they offer.

A slot is a place for one rank. `-H a:2,b:2` and a hostfile
(Open MPI's `a slots=2`, or Hydra's `a:2`) both name hosts with slot counts;
a host named without a count offers one slot. With no hosts, the local
machine offers one slot per physical core, as Open MPI counts them.
"""
import os
import re
from dataclasses import dataclass


class HostSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Host:
    name: str
    slots: int = 1

    def __str__(self):
        return f"{self.name}:{self.slots}"


def _slots(text, where):
    try:
        slots = int(text)
    except ValueError:
        raise HostSpecError(f"{where}: slot count {text!r} is not a number") from None
    if slots < 1:
        raise HostSpecError(f"{where}: slot count must be at least 1, got {slots}")
    return slots


def parse_host_list(text):
    """`host1:2,host2:2` (or `host1,host2`, one slot each) -> [Host]."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        if not sep:
            name, count = item, "1"
        if not name:
            raise HostSpecError(f"-H {text!r}: empty host name in {item!r}")
        hosts.append(Host(name, _slots(count, f"-H {text!r}")))
    if not hosts:
        raise HostSpecError(f"-H {text!r} names no host")
    return hosts


# Open MPI:  node1 slots=4 max_slots=8     Hydra:  node1:4     Both:  node1
_OPENMPI_LINE = re.compile(r"^(?P<name>[^\s:#=]+)(?P<attrs>(\s+\w+\s*=\s*\S+)*)$")
_HYDRA_LINE = re.compile(r"^(?P<name>[^\s:#=]+)(:(?P<slots>\S+))?$")


@dataclass(frozen=True)
class Hostfile:
    path: str
    hosts: tuple
    syntax: str  # "openmpi", "mpich", or "plain" (bare host names: both launchers read it)


def parse_hostfile(path):
    """Reads a hostfile in either launcher's syntax; comments (#) and blank lines skipped."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise HostSpecError(f"hostfile {path}: {e.strerror}") from None
    hosts, syntaxes = [], set()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{number}"
        hydra = _HYDRA_LINE.match(line)
        openmpi = _OPENMPI_LINE.match(line)
        if hydra and hydra.group("slots") is not None:
            hosts.append(Host(hydra.group("name"), _slots(hydra.group("slots"), where)))
            syntaxes.add("mpich")
        elif openmpi:
            attrs = dict(re.findall(r"(\w+)\s*=\s*(\S+)", openmpi.group("attrs")))
            slots = attrs.get("slots")
            hosts.append(Host(openmpi.group("name"), _slots(slots, where) if slots else 1))
            if attrs:
                syntaxes.add("openmpi")
        else:
            raise HostSpecError(f"{where}: cannot read {raw.strip()!r} (expected 'host', 'host:N' or 'host slots=N')")
    if not hosts:
        raise HostSpecError(f"hostfile {path} names no host")
    if len(syntaxes) > 1:
        raise HostSpecError(f"hostfile {path} mixes 'host:N' and 'host slots=N' lines")
    return Hostfile(path, tuple(hosts), syntaxes.pop() if syntaxes else "plain")


def total_slots(hosts):
    return sum(h.slots for h in hosts)


def local_core_count():
    """Physical cores this process may run on: Open MPI's default slot count
    for the local machine (hardware threads are not slots unless asked)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        topo = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with open(f"{topo}/physical_package_id") as f:
                package = f.read().strip()
            with open(f"{topo}/core_id") as f:
                core = f.read().strip()
        except OSError:
            return len(cpus) or 1
        cores.add((package, core))
    return len(cores) or 1
