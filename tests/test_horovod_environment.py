"""Horovod's environment variables and horovodrun's flags: what a Horovod job script sets keeps
its meaning under horo, and a misspelt HORO_* name is reported instead of silently ignored."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from launcher import REPO_ROOT


def fresh_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PRTE_", "PMIX_", "PMI_", "HORO_", "HOROVOD_"))}
    env.update(extra)
    return env


def run_python(code, env, cwd, timeout=120):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.timeout(150)
def test_horovod_timeline_dynamic_starts_later_and_writes_no_file_named_dynamic(tmp_path):
    # Horovod's HOROVOD_TIMELINE=DYNAMIC: no timeline until start_timeline(path).
    code = """
        import json, numpy as np, horo
        horo.init()
        horo.allreduce(np.ones(4), name="before")
        horo.start_timeline("later.json", mark_cycles=True)
        horo.allreduce(np.ones(4), name="during")
        horo.stop_timeline()
        horo.shutdown()
    """
    proc = run_python(code, fresh_env(HOROVOD_TIMELINE="DYNAMIC", HOROVOD_TIMELINE_MARK_CYCLES="1"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["later.json"]
    names = {e.get("args", {}).get("name") for e in json.loads((tmp_path / "later.json").read_text())}
    assert "during" in names and "before" not in names


@pytest.mark.timeout(150)
def test_horovod_log_levels_and_tunables_are_accepted_under_their_horovod_names(tmp_path):
    code = "import horo; horo.init(); horo.shutdown(); print('ok')"
    for level in ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"):
        env = fresh_env(HOROVOD_LOG_LEVEL=level, HOROVOD_FUSION_THRESHOLD="33554432", HOROVOD_CYCLE_TIME="2",
                        HOROVOD_CACHE_CAPACITY="0", HOROVOD_STALL_CHECK_DISABLE="1",
                        HOROVOD_HIERARCHICAL_ALLREDUCE="0", HOROVOD_HIERARCHICAL_ALLGATHER="0")
        proc = run_python(code, env, tmp_path)
        assert proc.returncode == 0 and "ok" in proc.stdout, (level, proc.stderr)
    proc = run_python(code, fresh_env(HOROVOD_LOG_LEVEL="LOUD"), tmp_path)
    assert proc.returncode != 0 and "LOUD" in proc.stderr


@pytest.mark.timeout(150)
def test_a_misspelt_horo_variable_warns_naming_the_close_match(tmp_path):
    code = "import horo; horo.init(); horo.shutdown()"
    proc = run_python(code, fresh_env(HORO_FUSION_TRESHOLD="1", HOROVOD_AUTOTUNE="1"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HORO_FUSION_TRESHOLD is not a horo setting" in proc.stderr
    assert "did you mean HORO_FUSION_THRESHOLD?" in proc.stderr
    assert "HOROVOD_AUTOTUNE (a Horovod setting) has no effect in horo" in proc.stderr
    quiet = run_python(code, fresh_env(HORO_FUSION_THRESHOLD="1", HORO_TEST_ANYTHING="1"), tmp_path)
    assert quiet.returncode == 0 and "not a horo setting" not in quiet.stderr, quiet.stderr


@pytest.mark.timeout(60)
def test_horovodrun_flags_map_onto_the_variables(tmp_path):
    fake = tmp_path / "mpirun"
    fake.write_text("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.3'\n")
    fake.chmod(0o755)
    argv = ["--mpirun", str(fake), "-np", "2", "--dry-run", "--verbose", "--disable-cache", "--hierarchical-allreduce",
            "--hierarchical-allgather", "--no-stall-check", "--stall-check-warning-time-seconds", "5",
            "--stall-check-shutdown-time-seconds", "9", "--log-level", "TRACE", "--timeline-filename", "t.json",
            "--timeline-mark-cycles", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--start-timeout",
            "30", "--mpi", "python", "train.py"]
    proc = subprocess.run([sys.executable, "-m", "horo.run", *argv], cwd=str(REPO_ROOT), env=fresh_env(),
                          capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr
    for setting in ("HORO_CACHE_CAPACITY=0", "HORO_HIERARCHICAL_ALLREDUCE=1", "HORO_HIERARCHICAL_ALLGATHER=1",
                    "HORO_STALL_CHECK_DISABLE=1", "HORO_STALL_CHECK_TIME_SECONDS=5",
                    "HORO_STALL_SHUTDOWN_TIME_SECONDS=9", "HORO_LOG_LEVEL=trace", "HORO_TIMELINE=t.json",
                    "HORO_TIMELINE_MARK_CYCLES=1", "HORO_FUSION_THRESHOLD=33554432", "HORO_CYCLE_TIME=2.5"):
        assert setting in proc.stdout, (setting, proc.stdout)
