"""horo-run's flags for the core's tunables, each naming the variable it sets.

The core's table (`horo.tunables()`: env, horovod_alias, default, doc) is the
source of the help text and defaults; this file only adds the flag spelling and
the unit conversion. The launcher must work where the core is not importable
(a login node without the build): then each flag falls back to its own line.
"""
from dataclasses import dataclass


def _number_text(value):
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _mebibytes_to_bytes(value):
    return str(round(float(value) * 1024 * 1024))


@dataclass(frozen=True)
class TunableFlag:
    flag: str
    env: str
    metavar: str
    type: object
    to_env: object  # parsed value -> the variable's text
    fallback_doc: str
    choices: tuple = None
    unit_note: str = ""  # when the flag's unit differs from the variable's
    switch: bool = False  # takes no value: given means on
    aliases: tuple = ()  # horovodrun's spelling, where it differs

    @property
    def dest(self):
        return self.flag.lstrip("-").replace("-", "_")


TUNABLE_FLAGS = (
    TunableFlag("--fusion-threshold-mb", "HORO_FUSION_THRESHOLD", "MB", float, _mebibytes_to_bytes,
                "fusion buffer size; 0 disables fusion", unit_note="given in MiB, "),
    TunableFlag("--cycle-time-ms", "HORO_CYCLE_TIME", "MS", float, _number_text,
                "ms between coordination cycles"),
    TunableFlag("--cache-capacity", "HORO_CACHE_CAPACITY", "N", int, str,
                "responses cached to skip negotiation; 0 disables the cache"),
    TunableFlag("--disable-cache", "HORO_CACHE_CAPACITY", None, None, lambda value: "0",
                "no response cache (as --cache-capacity 0)", switch=True),
    TunableFlag("--timeline-filename", "HORO_TIMELINE", "FILE", str, str,
                "write a Chrome trace (Perfetto) of every tensor's phases to FILE"),
    TunableFlag("--timeline-mark-cycles", "HORO_TIMELINE_MARK_CYCLES", None, None, lambda value: "1",
                "mark background cycles in the timeline", switch=True),
    TunableFlag("--stall-check-time", "HORO_STALL_CHECK_TIME_SECONDS", "SECONDS", float, _number_text,
                "warn about tensors not submitted by every rank after this long; 0 disables",
                aliases=("--stall-check-warning-time-seconds",)),
    TunableFlag("--no-stall-check", "HORO_STALL_CHECK_DISABLE", None, None, lambda value: "1",
                "no stall warnings", switch=True),
    TunableFlag("--stall-shutdown-time", "HORO_STALL_SHUTDOWN_TIME_SECONDS", "SECONDS", float, _number_text,
                "fail stalled tensors after this long; 0 waits forever",
                aliases=("--stall-check-shutdown-time-seconds",)),
    TunableFlag("--hierarchical-allreduce", "HORO_HIERARCHICAL_ALLREDUCE", None, None, lambda value: "1",
                "all-reduce within hosts, then across them", switch=True),
    TunableFlag("--hierarchical-allgather", "HORO_HIERARCHICAL_ALLGATHER", None, None, lambda value: "1",
                "all-gather within hosts, then across them", switch=True),
    TunableFlag("--log-level", "HORO_LOG_LEVEL", "LEVEL", str.lower, str,
                "core log level (horovodrun's TRACE and FATAL too)",
                choices=("trace", "debug", "info", "warning", "error", "fatal")),
    TunableFlag("--allreduce-algo", "HORO_ALLREDUCE_ALGO", "ALGO", str.lower, str,
                "all-reduce algorithm", choices=("ring", "mpi", "auto")),
    TunableFlag("--transport", "HORO_TRANSPORT", "KIND", str.lower, str,
                "shared memory between ranks on one host, or MPI", choices=("auto", "shm", "mpi")),
    TunableFlag("--gpu-transport", "HORO_GPU_TRANSPORT", "TRANSPORT", str.lower, str,
                "how GPU tensors move", choices=("nccl", "mpi", "auto")),
)


def core_tunables():
    """{env: row} from the core's table, or {} when the core cannot be imported."""
    try:
        import horo

        return {row["env"]: row for row in horo.tunables()}
    except Exception:  # noqa: BLE001 - no core build (or a broken one) must not stop the launcher
        return {}


def help_text(flag, core_rows):
    row = core_rows.get(flag.env)
    doc = row["doc"] if row else flag.fallback_doc
    text = f"{doc} ({flag.unit_note}sets {flag.env}"
    if row and row.get("default") not in (None, ""):
        text += f"; core default {row['default']}"
        if flag.env == "HORO_FUSION_THRESHOLD" and row["default"].isdigit():
            text += f" bytes = {int(row['default']) / (1024 * 1024):g} MiB"
    return text + ")"


def add_tunable_flags(parser, core_rows):
    group = parser.add_argument_group("tunables (each sets an environment variable on every rank)")
    for flag in TUNABLE_FLAGS:
        if flag.switch:
            group.add_argument(flag.flag, *flag.aliases, dest=flag.dest, action="store_const", const=True,
                               default=None, help=help_text(flag, core_rows))
            continue
        metavar = "{" + ",".join(flag.choices) + "}" if flag.choices else flag.metavar
        group.add_argument(flag.flag, *flag.aliases, dest=flag.dest, metavar=metavar, type=flag.type,
                           choices=flag.choices, default=None, help=help_text(flag, core_rows))


def tunable_env(args):
    """{env var: text} for the tunable flags given on the command line, in table order."""
    env = {}
    for flag in TUNABLE_FLAGS:
        value = getattr(args, flag.dest, None)
        if value is not None:
            env[flag.env] = flag.to_env(value)
    return env
