"""The timeline at run time: a Chrome trace of every tensor's phases (see README, "Timeline").

HORO_TIMELINE=path starts one at horo.init(); these start and stop one later, with Horovod's
names and signature. Rank 0 (the coordinator) writes; on other ranks they do nothing.
"""
import os

from horo._native import _core


def start_timeline(file_path, mark_cycles=False):
    """Starts recording to `file_path` (replacing a timeline already running).

    mark_cycles: also mark each background cycle that ran something (instant CYCLE_START events).
    """
    if not isinstance(file_path, (str, os.PathLike)):  # str(None) would record to a file named "None"
        raise TypeError(f"start_timeline: file_path must be a str or path, got {type(file_path).__name__}")
    _core.start_timeline(os.fspath(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops recording and closes the file, leaving valid JSON."""
    _core.stop_timeline()
