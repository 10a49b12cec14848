"""The mpirun command line for one launch, in the spelling of the MPI found.

Open MPI:   mpirun -np 4 -H a:2,b:2 --bind-to none --map-by slot [--oversubscribe]
                   [--allow-run-as-root] -x PATH -x PYTHONPATH ... -x HORO_CYCLE_TIME=2 python train.py
MPICH/Hydra: mpiexec -np 4 -hosts a:2,b:2 -genv HORO_CYCLE_TIME 2 -envlist PATH,PYTHONPATH,... python train.py

Variables are forwarded by name (their values come from horo-run's own
environment, which mpirun inherits), tunables set by flags by value, so the
printed command reproduces the launch when pasted into the same shell.
OMPI_*/PRTE_* settings need no forwarding: mpirun reads them itself.
"""
import shlex
from dataclasses import dataclass, field

from horo.run.hosts import total_slots
from horo.run.mpi_flavor import MPICH, OPENMPI

FORWARDED_VARIABLES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
FORWARDED_PREFIXES = ("HORO_", "HOROVOD_")


@dataclass
class LaunchSpec:
    mpirun: str
    flavor: str
    num_proc: int
    program: list
    hosts: list = None  # [Host] from -H
    hostfile: object = None  # hosts.Hostfile from --hostfile
    oversubscribe: bool = False  # asked for on the command line
    local_slots: int = 1  # slots when no hosts are named (the local cores)
    as_root: bool = False
    env: dict = field(default_factory=dict)  # the environment mpirun will inherit
    tunable_env: dict = field(default_factory=dict)  # {var: value} from tunable flags
    mpi_args: list = field(default_factory=list)  # passed through to mpirun verbatim

    @property
    def available_slots(self):
        if self.hosts:
            return total_slots(self.hosts)
        if self.hostfile:
            return total_slots(self.hostfile.hosts)
        return self.local_slots

    @property
    def needs_oversubscribe(self):
        return self.oversubscribe or self.num_proc > self.available_slots


def forwarded_names(env, overridden=()):
    """Names to forward by reference: PATH & co. when set, then every HORO_*/HOROVOD_*."""
    names = [n for n in FORWARDED_VARIABLES if n in env]
    names += sorted(n for n in env if n.startswith(FORWARDED_PREFIXES) and n not in overridden)
    return names


def _host_list(hosts):
    return ",".join(str(h) for h in hosts)


def _openmpi_command(spec):
    cmd = [spec.mpirun, "-np", str(spec.num_proc)]
    if spec.hosts:
        cmd += ["-H", _host_list(spec.hosts)]
    elif spec.hostfile:
        if spec.hostfile.syntax == MPICH:  # 'host:N' lines: Open MPI wants 'slots=N'
            cmd += ["-H", _host_list(spec.hostfile.hosts)]
        else:
            cmd += ["--hostfile", spec.hostfile.path]
    # Ranks bound to one core each would fight the core's background thread;
    # fill each host's slots in order, so local_rank follows the host list.
    cmd += ["--bind-to", "none", "--map-by", "slot"]
    if spec.needs_oversubscribe:
        cmd.append("--oversubscribe")
    if spec.as_root:
        cmd.append("--allow-run-as-root")
    cmd += spec.mpi_args
    for name in forwarded_names(spec.env, spec.tunable_env):
        cmd += ["-x", name]
    for name, value in spec.tunable_env.items():
        cmd += ["-x", f"{name}={value}"]
    return cmd + list(spec.program)


def _mpich_command(spec):
    cmd = [spec.mpirun, "-np", str(spec.num_proc)]
    if spec.hosts:
        cmd += ["-hosts", _host_list(spec.hosts)]
    elif spec.hostfile:
        if spec.hostfile.syntax == OPENMPI:  # 'slots=N' lines: Hydra wants 'host:N'
            cmd += ["-hosts", _host_list(spec.hostfile.hosts)]
        else:
            cmd += ["-f", spec.hostfile.path]
    # Hydra places ranks round-robin over the slots and wraps past them:
    # it has no oversubscription switch and binds nothing unless asked.
    cmd += spec.mpi_args
    for name, value in spec.tunable_env.items():
        cmd += ["-genv", name, value]
    names = forwarded_names(spec.env, spec.tunable_env)
    if names:
        cmd += ["-envlist", ",".join(names)]
    return cmd + list(spec.program)


def build_command(spec):
    if spec.flavor == OPENMPI:
        return _openmpi_command(spec)
    if spec.flavor == MPICH:
        return _mpich_command(spec)
    raise ValueError(f"unknown MPI flavor {spec.flavor!r} (expected {OPENMPI!r} or {MPICH!r})")


def shell_quote(argv):
    return shlex.join(str(a) for a in argv)
