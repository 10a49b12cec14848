"""The documentation site: `mkdocs build --strict` passes (a broken link, an anchor that is gone,
a page missing from the nav or an API name mkdocstrings cannot find fails it), the API reference
covers every public name, and the generated tunables table matches `horo.tunables()`.

Each runs in a subprocess: the pytest process never imports the core (it must stay MPI-free).
"""
import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import REPO_ROOT

pytestmark = pytest.mark.fast

GENERATOR = REPO_ROOT / "scripts" / "gen_tunables_doc.py"
TABLE = REPO_ROOT / "docs" / "_generated" / "tunables_table.md"


def mkdocs_build(config, site_dir):
    pytest.importorskip("mkdocs", reason="mkdocs is installed by scripts/setup.sh (the [docs] extra)")
    # Material prints a banner about MkDocs 2.0 on every build; it is not a warning of ours.
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site_dir)],
        cwd=str(Path(config).parent), env=env, capture_output=True, text=True, timeout=240,
    )


def exported_names(init_file):
    """`__all__` of a package, read from its source."""
    for node in ast.parse(Path(init_file).read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{init_file} has no __all__")


@pytest.mark.timeout(300)
def test_site_builds_strict_and_the_api_reference_has_every_public_name(tmp_path):
    proc = mkdocs_build(REPO_ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    ids = set(re.findall(r'id="([\w.]+)"', api))
    for package, init in [("horo", "horo/__init__.py"), ("horo.torch", "plugins/torch/__init__.py"),
                          ("horo.tensorflow", "plugins/tensorflow/__init__.py"),
                          ("horo.tensorflow.keras", "plugins/tensorflow/keras/__init__.py")]:
        missing = [n for n in exported_names(REPO_ROOT / init) if f"{package}.{n}" not in ids]
        assert not missing, f"the API reference lacks {package}: {missing}"
    # every guide in the nav was rendered
    for page in ["pytorch", "tensorflow", "launching", "gpu", "tunables", "reliability", "benchmarks",
                 "design", "horovod"]:
        assert (tmp_path / "site" / page / "index.html").exists(), page


@pytest.mark.timeout(300)
def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The build above would pass a site that checks nothing; this one must fail."""
    shutil.copy(REPO_ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("horo", "plugins"):  # what the API reference's hook lays out
        os.symlink(REPO_ROOT / folder, tmp_path / folder)
    with open(tmp_path / "docs" / "index.md", "a") as f:
        f.write("\nSee [the page that is not there](no-such-page.md).\n")
    proc = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0, proc.stderr[-4000:]
    assert "no-such-page.md" in proc.stderr, proc.stderr[-4000:]


def run_generator(*args):
    return subprocess.run([sys.executable, str(GENERATOR), *args], cwd=str(REPO_ROOT),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(150)
def test_the_tunables_page_matches_horo_tunables():
    proc = run_generator("--check")
    assert proc.returncode == 0, (
        "docs/_generated/tunables_table.md differs from horo.tunables(): run "
        f"python scripts/gen_tunables_doc.py\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}")


@pytest.mark.timeout(150)
def test_the_tunables_check_catches_a_changed_row(tmp_path):
    drifted = tmp_path / "table.md"
    drifted.write_text(TABLE.read_text().replace("| `67108864` |", "| `33554432` |"))
    assert drifted.read_text() != TABLE.read_text(), "the fusion threshold's row was not found"
    proc = run_generator("--check", "--table", str(drifted))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "HORO_FUSION_THRESHOLD" in proc.stdout
