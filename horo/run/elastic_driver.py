"""horo-run as the elastic driver: launches the job through mpirun on the hosts discovery offers,
and relaunches it when a rank fails or the hosts change, with the last commit held in memory.

    launch g on the planned hosts (HORO_ELASTIC_GENERATION=g)
      rank 0 fetches the last commit from the driver; every rank takes it (horo.elastic.State)
      each commit: rank 0 hands the serialised state over (from a thread, while training goes on)
      discovery offers other hosts: the driver tells rank 0, and the launch stops at its next commit
    mpirun exits:
      0, no change pending, no failure named -> the job is done
      0 after rank 0 said it stops for the hosts -> relaunch on the new hosts (a reset)
      a failure                  -> blacklist the failed rank's host, relaunch on what is left (a reset)
    fewer than --min-np slots for --elastic-timeout, or more than --reset-limit resets -> fail, saying why

MPI cannot add or drop a process in a running world without ULFM, which the core does not use, so a
change of ranks is a new launch; the committed state never touches a disk.
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from horo.elastic.driver_link import DRIVER_VARIABLE, GENERATION_VARIABLE, SECRET_VARIABLE
from horo.elastic.run import EXIT_PEER_LOST
from horo.run import command, elastic_flags, fabric, hosts, lost_host, session_dirs, tunable_flags
from horo.run.elastic_hosts import HostDiscovery, plan_hosts
from horo.run.elastic_state_server import StateServer, say
from horo.run.job import _exit_status, pump_stderr

# "no answer from ranks 4, 5 on host h3; rank 1 on host h2 within 5 s ..." (csrc/transport/peer_watch.cc)
_UNANSWERED = re.compile(r"no answer from (.*?) within ")
_RANKS_ON_HOST = re.compile(r"ranks? ([\d, ]+) on host ")


class ElasticError(Exception):
    pass


def _describe(planned):
    return ",".join(str(h) for h in planned) or "no host"


def _host_of_rank(planned, rank):
    """Ranks fill each planned host's slots in order (--map-by slot)."""
    first = 0
    for host in planned:
        if rank < first + host.slots:
            return host.name
        first += host.slots
    return None


class ElasticDriver:
    def __init__(self, args, mpirun, flavor):
        self.args = args
        self.mpirun = mpirun
        self.flavor = flavor
        self.min_np = args.min_np if args.min_np is not None else args.num_proc
        self.max_np = args.max_np
        self.first_np = args.num_proc if args.num_proc is not None else self.min_np
        self.discovery = HostDiscovery(args.host_discovery_script, args.slots_per_host or 1,
                                       args.blacklist_cooldown_range)
        self.server = StateServer(self._hosts_updated, lambda seconds: self.discovery.wait_for_poll(timeout=seconds),
                                  self._on_leaving)
        self.generation = 0
        self.planned = []
        self.resets = 0
        self._told = None  # the launch told to stop at its next commit for a change of hosts
        self._interrupted = None  # the launch that stopped for it
        self._proc = None
        self._stopping = None  # the signal horo-run was asked to stop by

    # -- the hosts ---------------------------------------------------------------------------------

    def _hosts_wanted(self):
        """The hosts a launch would use now, or None where that is the current launch's set (or too few)."""
        wanted = plan_hosts(self.discovery.available(), self.max_np, prefer=[h.name for h in self.planned])
        if hosts.total_slots(wanted) < self.min_np or set(wanted) == set(self.planned):
            return None
        return wanted

    def _hosts_updated(self, generation):
        """Asked after each discovery poll while launch `generation` runs: should it stop at its next commit
        so the job can grow or shrink?"""
        if generation != self.generation or self._told == generation:
            return False
        wanted = self._hosts_wanted()
        if wanted is None:
            return False
        self._told = generation
        say(f"discovery offers {_describe(wanted)}: launch {generation} on {_describe(self.planned)} "
            "is told to stop at its next commit")
        return True

    def _on_leaving(self, generation):
        """Launch `generation`'s rank 0 raised HostsUpdatedInterrupt, and the driver holds that commit."""
        if generation != self.generation:
            return
        self._interrupted = generation
        wanted = self._hosts_wanted()
        going_on = _describe(wanted) if wanted else "the hosts there are"
        say(f"hosts changed: launch {generation} on {_describe(self.planned)} stops at this commit "
            f"(commit {self.server.commits}); the job goes on with {going_on}")

    def _wait_for_slots(self, needed):
        """The hosts for the next launch once `needed` slots are free, or ElasticError after --elastic-timeout."""
        timeout = self.args.elastic_timeout
        deadline = time.monotonic() + timeout
        told = False
        while True:
            available = self.discovery.available()
            if sum(available.values()) >= needed:
                return plan_hosts(available, self.max_np, prefer=[h.name for h in self.planned])
            if self._stopping:
                return None
            left = deadline - time.monotonic()
            have = sum(available.values())
            where = ", ".join(f"{h}:{s}" for h, s in available.items()) or "none"
            out = sorted(self.discovery.blacklisted())
            blacklisted = f"; blacklisted: {', '.join(out)}" if out else ""
            if left <= 0:
                raise ElasticError(
                    f"only {have} slot{'s' if have != 1 else ''} available (hosts: {where}{blacklisted}), fewer than "
                    f"the {needed} needed (--min-np {self.min_np}), for {timeout:g} s (--elastic-timeout): "
                    "ending the job")
            if not told:
                say(f"waiting up to {timeout:g} s for {needed} slots; available now: {have} "
                    f"(hosts: {where}{blacklisted})")
                told = True
            self.discovery.wait_for_poll(timeout=min(2.0, left))

    # -- one launch ----------------------------------------------------------------------------------

    def _command(self, planned):
        env = dict(os.environ)
        env[DRIVER_VARIABLE] = self.server.address_variable()
        env[SECRET_VARIABLE] = self.server.secret
        env[GENERATION_VARIABLE] = str(self.generation)
        spec = command.LaunchSpec(
            mpirun=self.mpirun, flavor=self.flavor, num_proc=hosts.total_slots(planned),
            program=list(self.args.program), hosts=planned, oversubscribe=self.args.oversubscribe,
            local_slots=hosts.local_core_count(), as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
            env=env, tunable_env=tunable_flags.tunable_env(self.args), mpi_args=shlex.split(self.args.mpi_args))
        cmd = command.build_command(spec)
        if spec.flavor == command.OPENMPI:
            env.update(lost_host.keepalive_env(env, spec.tunable_env))
            env.update(fabric.launch_env(spec))
        return cmd, env

    def _launch(self, cmd, env):
        """Runs one mpirun; (exit status, the first failure its output names or None)."""
        session_dirs.remove_stale()
        try:
            self._proc = proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
        except OSError as e:
            raise ElasticError(f"cannot start {cmd[0]}: {e.strerror}") from None
        parser = pump_stderr(proc)
        status = _exit_status(proc.wait())
        self._proc = None
        return status, parser.failure

    def _failed_hosts(self, failure):
        """The hosts to blacklist for a failed launch, from the most specific evidence there is."""
        if failure is not None and failure.rank is not None and failure.signal is not None:
            return [_host_of_rank(self.planned, failure.rank)]  # the launcher saw it killed
        if failure is not None and failure.rank is None and failure.host:
            return [failure.host]  # the launcher lost that host, or a rank lost its peer there
        # Ranks that timed out on stopped or unreachable peers name them (peer_watch.cc's message).
        named = []
        for generation, _, _, message in self.server.peer_reports:
            m = _UNANSWERED.search(message) if generation == self.generation else None
            for ranks in _RANKS_ON_HOST.findall(m.group(1)) if m else ():
                for rank in ranks.replace(",", " ").split():
                    host = _host_of_rank(self.planned, int(rank))
                    if host and host not in named:
                        named.append(host)
        if named:
            return named
        # The first rank whose process ended: the survivors' connections close only after it.
        first = self.server.first_departure(self.generation)
        if first is not None:
            return [_host_of_rank(self.planned, first[1])]
        if failure is not None and failure.rank is not None and failure.exit_code != EXIT_PEER_LOST \
                and not failure.aborted_on_lost_peer:
            return [_host_of_rank(self.planned, failure.rank)]
        return []

    # -- the job -----------------------------------------------------------------------------------

    def _on_signal(self, signum, _frame):
        self._stopping = signum
        proc = self._proc
        if proc is not None:
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass

    def run(self):
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        self.discovery.start()
        try:
            return self._run()
        except ElasticError as e:
            print(f"horo-run: error: elastic job: {e}", file=sys.stderr, flush=True)
            return 1
        finally:
            self.discovery.stop()
            self.server.close()

    def _run(self):
        needed = self.first_np
        while True:
            planned = self._wait_for_slots(needed)
            if planned is None:
                return 128 + self._stopping
            self.planned = planned
            self.server.new_generation(self.generation)
            cmd, env = self._command(planned)
            say(f"launch {self.generation}: {hosts.total_slots(planned)} ranks on {_describe(planned)}")
            if self.args.verbose:
                print(command.shell_quote(cmd), file=sys.stderr, flush=True)
            started = time.monotonic()
            status, failure = self._launch(cmd, env)
            if self._stopping:
                return 128 + self._stopping
            # Open MPI 5 exits 0 after losing a host's daemon: a failure its output names counts, whatever the status.
            if status == 0 and failure is None and self._interrupted != self.generation:
                say(f"launch {self.generation} finished: the job is done ({self.server.commits} commits, "
                    f"{self.resets} reset{'s' if self.resets != 1 else ''})")
                return 0
            if failure is None and (status == 0 or self._interrupted == self.generation):
                why = "the hosts changed"
            else:
                why = failure.summary().removeprefix("horo-run: ") if failure else \
                    f"{os.path.basename(cmd[0])} exited with code {status} without naming a failed rank"
                for host in self._failed_hosts(failure):
                    seconds = self.discovery.blacklist(host)
                    until = "for the rest of the job" if seconds == float("inf") else f"for {seconds:g} s"
                    say(f"host {host} blacklisted {until}")
            self.resets += 1
            limit = self.args.reset_limit
            if limit is not None and self.resets > limit:
                raise ElasticError(f"reset limit reached: the job needed its reset number {self.resets} "
                                   f"(--reset-limit {limit}) after launch {self.generation} ended because {why}")
            say(f"launch {self.generation} ended after {time.monotonic() - started:.1f} s because {why}; "
                f"reset {self.resets}: relaunching from commit {self.server.commits}")
            self.generation += 1
            needed = self.min_np


def main(args, mpirun, flavor):
    """horo-run's entry for an elastic launch (args already parsed by horo.run.launcher)."""
    problem = elastic_flags.check_elastic_args(args)
    if problem is None and not args.program:
        problem = "no program to run (e.g. horo-run -np 2 --host-discovery-script ./hosts.sh python train.py)"
    if problem:
        print(f"horo-run: error: {problem} (see horo-run --help)", file=sys.stderr)
        return 2
    return ElasticDriver(args, mpirun, flavor).run()
