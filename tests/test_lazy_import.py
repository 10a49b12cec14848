"""`import horo` loads the API on first use, so horo-run (inside the package) starts without NumPy,
the compiled core or a framework; every public name is still there, and is what it was.

Each check runs in a fresh interpreter: this test process has long imported everything.
"""
import ast
import json
import subprocess
import sys
import textwrap

import pytest

from launcher import REPO_ROOT

HEAVY = ("numpy", "horo._core", "horo._native", "torch", "tensorflow", "horo.run.check_build")


def run_python(code, *argv):
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *argv], cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def fake_mpirun(tmp_path):
    """Answers --version as Open MPI 5's mpirun does, and 'runs' any job by exiting 0."""
    path = tmp_path / "mpirun"
    path.write_text("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.3'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "launch"])
def test_horo_run_launches_without_numpy_the_core_or_a_framework(fake_mpirun, dry_run):
    out = run_python(
        """
        import json, runpy, sys
        sys.argv = ["horo-run", *sys.argv[1:]]
        try:
            runpy.run_module("horo.run", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            assert not e.code, e.code
        print(json.dumps(sorted(sys.modules)))
        """,
        "--mpirun", fake_mpirun, *(["--dry-run"] if dry_run else []), "-np", "2", "python", "train.py",
    )
    loaded = set(json.loads(out.splitlines()[-1]))
    assert "horo.run.launcher" in loaded
    heavy = sorted(loaded & set(HEAVY))
    assert not heavy, f"horo-run loaded {heavy}"


@pytest.mark.timeout(60)
def test_import_horo_gives_every_public_name_as_before():
    out = run_python(
        """
        import json, types
        import horo.barrier, horo.join  # as horo.torch does, before anything touches horo's names
        import horo
        import horo.allreduce as allreduce
        namespace = {}
        exec("from horo import *", namespace)
        print(json.dumps({
            "all": sorted(horo.__all__),
            "star": sorted(k for k in namespace if k != "__builtins__"),
            "modules": sorted(n for n in horo.__all__ if isinstance(getattr(horo, n), types.ModuleType)),
            "barrier": horo.barrier.__module__ + "." + horo.barrier.__name__,
            "allreduce_as": allreduce.__module__ + "." + allreduce.__name__,
            "in_dir": set(horo.__all__) <= set(dir(horo)),
            "error": issubclass(horo.HoroValueError, ValueError),
            "submodule": horo._native.__name__,  # reachable as an attribute, as when import horo loaded all
            "missing": hasattr(horo, "no_such_name"),
        }))
        """
    )
    got = json.loads(out)
    assert got["star"] == got["all"]
    assert got["modules"] == [], f"submodules where functions belong: {got['modules']}"
    assert got["barrier"] == "horo.barrier.barrier" and got["allreduce_as"] == "horo.allreduce.allreduce"
    assert got["in_dir"] and got["error"]
    assert got["submodule"] == "horo._native" and got["missing"] is False


def test_the_type_checking_imports_name_what_horo_loads():
    source = (REPO_ROOT / "horo" / "__init__.py").read_text()
    tree = ast.parse(source)
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {(node.module, alias.name) for node in guarded.body for alias in node.names}
    namespace = {}
    table = next(node for node in tree.body if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_API")
    exec(compile(ast.Module([table], []), "horo/__init__.py", "exec"), namespace)
    lazy = {(module, name) for module, names in namespace["_API"] for name in names}
    assert imported == lazy
    exported = next(node for node in tree.body if isinstance(node, ast.Assign)
                    and ast.unparse(node.targets[0]) == "__all__")
    assert {name for _, name in lazy} == set(ast.literal_eval(exported.value))
