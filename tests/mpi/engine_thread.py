"""The background thread (named horo-engine) seen from /proc: how often it switched out and
how long it ran, and pinning every thread of this process. Shared by the shared-memory rank
suite and the world-of-one checks in test_single_process.py."""
import os


def engine_thread_activity(kinds=("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
    """(context switches of the given kinds, seconds on a CPU) of this process's background thread so far."""
    for tid in os.listdir("/proc/self/task"):
        try:
            comm = open(f"/proc/self/task/{tid}/comm").read().strip()
        except OSError:  # a thread that has ended since the listing
            continue
        if comm == "horo-engine":
            status = open(f"/proc/self/task/{tid}/status").read()
            switches = sum(int(line.split()[1]) for line in status.splitlines() if line.split(":")[0] in kinds)
            return switches, thread_cpu_seconds(f"/proc/self/task/{tid}")
    raise AssertionError("no thread named horo-engine in this process")


def thread_cpu_seconds(task):
    # schedstat counts nanoseconds on a CPU exactly; stat's utime+stime are samples at
    # each clock tick (10 ms), which a thread that wakes for 60 us now and then may still hit.
    try:
        return int(open(f"{task}/schedstat").read().split()[0]) / 1e9
    except OSError:  # a kernel without schedstats
        fields = open(f"{task}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_threads(cores):
    """Every thread of this process (the background thread too) onto `cores`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that has ended since
            pass
