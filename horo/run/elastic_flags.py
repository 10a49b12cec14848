"""horo-run's elastic flags, in horo's and horovodrun's spellings.

    horo-run -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py

A discovery script makes the launch elastic: horo-run becomes the driver (horo.run.elastic_driver).
"""

DEFAULT_ELASTIC_TIMEOUT_SECONDS = 600.0  # Horovod's


def add_elastic_flags(parser):
    group = parser.add_argument_group(
        "elastic training", "a job that continues from its last commit when ranks fail and grows when hosts "
        "join (hvd.elastic.run; see docs/elastic.md)")
    group.add_argument("--host-discovery-script", metavar="SCRIPT",
                       help="makes the job elastic: a command printing the available hosts, one 'host:slots' "
                       "(or 'host') per line; run about once a second")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                       help="fewest ranks to run with (default: -np)")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                       help="most ranks to run with (default: no limit)")
    group.add_argument("--slots-per-host", "--slots", dest="slots_per_host", type=int, metavar="K",
                       help="slots of a host the discovery script names without ':slots' (default 1)")
    group.add_argument("--reset-limit", type=int, metavar="R",
                       help="end the job with an error at the R+1st reset (a relaunch after a failure or a "
                       "change of hosts; default: no limit)")
    group.add_argument("--blacklist-cooldown-range", type=float, nargs=2, metavar=("LO", "HI"),
                       help="a host blacklisted after a failure comes back after LO seconds, doubling per "
                       "further failure up to HI (default: blacklisted for the rest of the job)")
    group.add_argument("--elastic-timeout", type=float, default=DEFAULT_ELASTIC_TIMEOUT_SECONDS, metavar="SECONDS",
                       help="how long to wait for at least --min-np slots before failing "
                       f"(default {DEFAULT_ELASTIC_TIMEOUT_SECONDS:g})")
    return group


def is_elastic(args):
    return bool(getattr(args, "host_discovery_script", None))


def check_elastic_args(args):
    """A message for an inconsistent combination, or None."""
    if args.hosts or args.hostfile:
        return ("-H/--hostfile and --host-discovery-script both name hosts: an elastic job takes its hosts "
                "from the script")
    if args.dry_run or args.check_build:
        return "--dry-run and --check-build do not apply to an elastic job (its hosts change as it runs)"
    if args.num_proc is None and args.min_np is None:
        return "an elastic job needs -np or --min-np"
    min_np = args.min_np if args.min_np is not None else args.num_proc
    if min_np < 1:
        return f"--min-np must be at least 1, got {min_np}"
    if args.max_np is not None and args.max_np < min_np:
        return f"--max-np {args.max_np} is below --min-np {min_np}"
    if args.num_proc is not None and not (min_np <= args.num_proc <= (args.max_np or args.num_proc)):
        return f"-np {args.num_proc} lies outside --min-np {min_np} .. --max-np {args.max_np}"
    if args.slots_per_host is not None and args.slots_per_host < 1:
        return f"--slots-per-host must be at least 1, got {args.slots_per_host}"
    if args.reset_limit is not None and args.reset_limit < 0:
        return f"--reset-limit must be 0 or more, got {args.reset_limit}"
    if args.blacklist_cooldown_range is not None:
        lo, hi = args.blacklist_cooldown_range
        if not 0 <= lo <= hi:
            return f"--blacklist-cooldown-range {lo:g} {hi:g}: needs 0 <= LO <= HI"
    if args.elastic_timeout <= 0:
        return f"--elastic-timeout must be positive, got {args.elastic_timeout:g}"
    return None
