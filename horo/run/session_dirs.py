"""Open MPI 5 session directories that a killed mpirun left behind.

Open MPI 5's mpirun (PRRTE) keeps its session in `<tmpdir>/ompi.<its pid>` and removes it when it
exits; a SIGKILLed one cannot. A later mpirun that is given the same pid finds the old directory and
its PMIx rendezvous files, and fails at once ("The PMIx server's listener thread failed to start",
exit code 213). Pids come round again on a busy machine, so horo-run removes those directories of
dead processes before it launches.
"""
import os
import re
import shutil
import tempfile

_SESSION = re.compile(r"ompi\.(\d+)")


def process_running(pid):
    """Whether a process with this pid exists (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def stale_session_dirs(tmpdir=None):
    """This user's `ompi.<pid>` directories in `tmpdir` (default: TMPDIR's) whose mpirun is gone."""
    base = tmpdir or tempfile.gettempdir()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    stale = []
    for e in entries:
        m = _SESSION.fullmatch(e.name)
        try:
            mine = e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == os.getuid()
        except OSError:
            continue
        if m and mine and not process_running(int(m.group(1))):
            stale.append(e.path)
    return stale


def remove_stale(tmpdir=None):
    """Removes the directories `stale_session_dirs` names; returns how many."""
    stale = stale_session_dirs(tmpdir)
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return len(stale)
