"""horo-bench: size parsing, correctness checking, and real 2-rank runs of every collective."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from horo.bench import collectives, data, sizes

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIVES = ("allreduce", "broadcast", "allgather", "alltoall", "reducescatter")


# --------------------------------------------------------------------------- units


@pytest.mark.timeout(120)
def test_parse_size_units():
    assert sizes.parse_size("8") == 8
    assert sizes.parse_size("1K") == 1024
    assert sizes.parse_size("1k") == 1024
    assert sizes.parse_size("64K") == 64 * 1024
    assert sizes.parse_size("256M") == 256 * 1024 * 1024
    assert sizes.parse_size("1G") == 1 << 30
    assert sizes.parse_size("4KiB") == 4096 and sizes.parse_size("4KB") == 4096
    for bad in ("", "abc", "1X", "-8", "0.3K"):
        with pytest.raises(ValueError):
            sizes.parse_size(bad)


@pytest.mark.timeout(120)
def test_size_sequence():
    assert sizes.size_sequence("8", "128", 2) == [8, 16, 32, 64, 128]
    assert sizes.size_sequence("1K", "64K", 4) == [1024, 4096, 16384, 65536]
    assert sizes.size_sequence("8", "256M", 2)[-1] == 256 << 20
    assert len(sizes.size_sequence("8", "256M", 2)) == 26
    assert sizes.size_sequence("8", "100", 2) == [8, 16, 32, 64]          # end not reached exactly
    assert sizes.size_sequence("1K", "4K", step="1K") == [1024, 2048, 3072, 4096]
    with pytest.raises(ValueError):
        sizes.size_sequence("1M", "1K")
    with pytest.raises(ValueError):
        sizes.size_sequence("8", "64", 1)


@pytest.mark.timeout(120)
def test_element_counts_round_to_elements_and_ranks():
    assert sizes.element_count(8, 4) == 2
    assert sizes.element_count(10, 4) == 2                    # whole elements
    assert sizes.element_count(8, 4, multiple=3) == 3          # at least one element per rank
    assert sizes.element_count(1024, 4, multiple=3) == 255     # multiple of the rank count
    # 8 B and 16 B of float64 on 2 ranks both round to 2 elements: listed once
    assert sizes.element_counts([8, 16, 32], 8, multiple=2) == [2, 4]
    for c in ("allgather", "alltoall", "reducescatter", "gather", "scatter"):
        assert collectives.count_multiple(c, 4) == 4
    assert collectives.count_multiple("allreduce", 4) == collectives.count_multiple("reduce", 4) == 1


@pytest.mark.timeout(120)
def test_busbw_factors():
    assert collectives.busbw_factor("allreduce", 4) == pytest.approx(1.5)
    for c in ("allgather", "alltoall", "reducescatter", "gather", "scatter"):
        assert collectives.busbw_factor(c, 4) == pytest.approx(0.75)
    assert collectives.busbw_factor("broadcast", 4) == collectives.busbw_factor("reduce", 4) == 1.0


@pytest.mark.timeout(120)
def test_reference_catches_wrong_elements():
    for dtype in (np.int8, np.float16, np.float32, np.int64):
        case = collectives.Case("allreduce", 100, np.dtype(dtype), "Sum", rank=0, n=2)
        good = case.expected.astype(dtype)
        assert case.wrong(good) == 0
        bad = good.copy()
        bad[[3, 50]] += 1
        assert case.wrong(bad) == 2
        assert case.wrong(good[:50]) == 100                    # wrong size: all wrong
    # each rank's expected alltoall output is rank r's share of every rank's input
    a = collectives.Case("alltoall", 8, np.dtype(np.float32), "Sum", rank=1, n=2)
    b0 = data.pattern(8, 0, np.float64)
    assert np.array_equal(a.expected[:4], b0[4:])
    # scatter: rank 1 of 2 receives the second half of the root's input
    s = collectives.Case("scatter", 8, np.dtype(np.float32), "Sum", rank=1, n=2, root=0)
    assert s.wrong(b0[4:].astype(np.float32)) == 0 and s.wrong(b0[:4].astype(np.float32)) > 0
    # gather and reduce: the root's result is checked; off the root there must be none (MPI's buffer is not read)
    for c in ("gather", "reduce"):
        root = collectives.Case(c, 8, np.dtype(np.float32), "Sum", rank=0, n=2, root=0)
        other = collectives.Case(c, 8, np.dtype(np.float32), "Sum", rank=1, n=2, root=0)
        assert root.wrong(root.expected.astype(np.float32)) == 0 and root.wrong(None) > 0
        assert other.wrong(None) == 0 and other.wrong(np.zeros(8, np.float32)) > 0
        assert other.wrong(np.zeros(8, np.float32), baseline=True) == 0


# --------------------------------------------------------------------------- real 2-rank runs


def _mpirun():
    mpirun = Path(sys.executable).parent / "mpirun"
    if not os.access(mpirun, os.X_OK):
        pytest.skip(f"no mpirun next to {sys.executable}")
    return str(mpirun)


def run_bench(*args, timeout=90):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1", PYTHONUNBUFFERED="1")
    for k in list(env):  # no settings from an outer MPI job or horo tunables of the caller
        if k.startswith(("OMPI_COMM_WORLD", "PMIX_RANK", "HORO_")):
            del env[k]
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    cmd = [_mpirun(), "-np", "2", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
           sys.executable, "-m", "horo.bench", *map(str, args)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def table_rows(stdout):
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective_two_ranks(collective, tmp_path):
    jpath, cpath = tmp_path / "r.json", tmp_path / "r.csv"
    proc = run_bench(collective, "-b", "1K", "-e", "64K", "-f", "4", "--iters", "5", "--warmup", "2",
                     "--json", jpath, "--csv", cpath)
    rows = table_rows(proc.stdout)
    assert [int(r[0]) for r in rows] == [1024, 4096, 16384, 65536]
    for r in rows:  # size count dtype op | time algbw busbw #wrong
        assert r[2] == "float32" and r[4] == "|"
        assert int(r[1]) * 4 == int(r[0])
        assert int(r[8]) == 0, proc.stdout
    assert "out of bounds values: 0 OK" in proc.stdout
    assert "horo-bench" in proc.stderr  # plain progress lines, or tqdm's bar, on stderr

    doc = json.loads(jpath.read_text())
    assert doc["collective"] == collective and doc["nranks"] == 2 and doc["total_wrong"] == 0
    assert len(doc["results"]) == 4
    factor = collectives.busbw_factor(collective, 2)
    for rec in doc["results"]:
        assert rec["wrong"] == 0 and rec["time_us"] > 0
        assert rec["busbw_GBps"] == pytest.approx(rec["algbw_GBps"] * factor)
        assert rec["algbw_GBps"] == pytest.approx(rec["bytes"] / (rec["time_us"] * 1e-6) / 1e9)

    with open(cpath, newline="") as f:
        recs = list(csv.DictReader(f))
    assert [int(r["bytes"]) for r in recs] == [1024, 4096, 16384, 65536]
    assert all(r["wrong"] == "0" and r["variant"] == "horo" and float(r["time_us"]) > 0 for r in recs)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective", ("gather", "scatter", "reduce"))
def test_rooted_collective_against_mpi_from_root_1(collective):
    proc = run_bench(collective, "-b", "1K", "-e", "64K", "-f", "8", "--iters", "5", "--warmup", "1", "-r", "1",
                     "--baseline", "--no-progress")
    assert "root 1" in proc.stdout.splitlines()[0]
    rows = table_rows(proc.stdout)
    assert [int(r[0]) for r in rows] == [1024, 8192, 65536]
    for r in rows:  # ... | horo: 4 cols | mpi: 4 cols | ratio
        assert int(r[8]) == 0 and int(r[13]) == 0 and float(r[15]) > 0, proc.stdout


@pytest.mark.timeout(120)
def test_baseline_adds_ratio_column(tmp_path):
    jpath = tmp_path / "r.json"
    proc = run_bench("allreduce", "-b", "1K", "-e", "16K", "-f", "4", "--iters", "5", "--warmup", "1",
                     "--baseline", "--algo", "ring", "--no-progress", "--json", jpath)
    assert "ratio" in proc.stdout and "horo-ring" in proc.stdout
    assert "[horo-bench" not in proc.stderr
    rows = table_rows(proc.stdout)
    assert len(rows) == 3
    for r in rows:  # ... | horo: 4 cols | mpi: 4 cols | ratio
        assert r[9] == "|" and r[14] == "|"
        assert int(r[8]) == 0 and int(r[13]) == 0
        assert float(r[15]) > 0
    doc = json.loads(jpath.read_text())
    assert doc["algo"] == "ring" and doc["variants"] == ["horo-ring", "mpi"]
    horo_recs = [r for r in doc["results"] if r["variant"] == "horo-ring"]
    mpi_recs = [r for r in doc["results"] if r["variant"] == "mpi"]
    assert len(horo_recs) == len(mpi_recs) == 3
    for h, m in zip(horo_recs, mpi_recs):
        assert h["ratio"] == pytest.approx(m["time_us"] / h["time_us"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective", ("broadcast", "alltoall"))
def test_fresh_inputs_rewrite_every_input_and_stay_right(collective, tmp_path):
    jpath = tmp_path / "r.json"
    proc = run_bench(collective, "-b", "4K", "-e", "64K", "-f", "4", "--iters", "5", "--warmup", "1",
                     "--baseline", "--fresh-inputs", "--no-progress", "--json", jpath)
    assert "inputs rewritten before each call" in proc.stdout.splitlines()[0]
    for r in table_rows(proc.stdout):
        assert int(r[8]) == 0 and int(r[13]) == 0, proc.stdout
    assert json.loads(jpath.read_text())["fresh_inputs"] is True


def test_rewriting_an_input_stores_every_byte_and_keeps_its_values():
    case = collectives.Case("broadcast", 1000, np.dtype("float32"), "Sum", 0, 2)
    before = case.input.copy()
    case.rewrite_input()
    assert np.array_equal(case.input, before)
    # The same values, but stored: a read-only input refuses it.
    case.input.flags.writeable = False
    with pytest.raises(ValueError):
        case.rewrite_input()


@pytest.mark.timeout(120)
def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "busbw.png"
    run_bench("allreduce", "-b", "1K", "-e", "16K", "-f", "4", "--iters", "3", "--warmup", "1",
              "--baseline", "--no-progress", "--plot", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- horo-bench fused

TINY_MODEL = """
import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
"""


@pytest.mark.timeout(120)
def test_resnet50_shape_table():
    import math

    from horo.bench import models

    assert len(models.RESNET50_SHAPES) == models.RESNET50_TENSORS == 161
    assert sum(math.prod(s) for s in models.RESNET50_SHAPES) == models.RESNET50_ELEMENTS == 25_557_032


@pytest.mark.timeout(120)
def test_fused_times_fusion_on_and_off_for_a_torch_model(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "tiny_model.py").write_text(TINY_MODEL)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    jpath = tmp_path / "fused.json"
    proc = run_bench("fused", "--model", "tiny_model:build", "--steps", "2", "--reps", "2", "--warmup", "1",
                     "--baseline", "--json", jpath)
    assert "4 float32 tensors, 172 elements" in proc.stdout, proc.stdout  # 16*8+8 + 8*4+4
    rows = {r[0]: r for r in table_rows(proc.stdout)}
    assert set(rows) == {"fused", "unfused", "mpi4py"}, proc.stdout  # "mpi4py loop" splits in two
    assert float(rows["fused"][3]) == pytest.approx(1.0)
    assert "wrong elements: 0 OK" in proc.stdout
    doc = json.loads(jpath.read_text())
    assert doc["tensors"] == 4 and doc["nranks"] == 2
    by_variant = {r["variant"]: r for r in doc["results"]}
    assert by_variant["unfused"]["fusion_threshold"] == 0 and by_variant["fused"]["fusion_threshold"] == 64 << 20
    for r in doc["results"]:
        assert r["wrong"] == 0 and len(r["samples_s"]) == 2 and r["ms_per_step"] > 0


@pytest.mark.timeout(60)
def test_fused_rejects_a_model_it_cannot_import():
    from horo.bench import fused

    with pytest.raises(SystemExit) as e:
        fused.parse_args(["--model", "no_such_module_here:build"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        fused.parse_args(["--model", "no-colon"])
