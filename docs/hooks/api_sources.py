"""MkDocs hook: lays out horo's sources as Python imports them, for the API reference.

setup.py installs plugins/torch as horo.torch and plugins/tensorflow as horo.tensorflow, so
no folder on disk is the package `horo` with its plugins inside. mkdocstrings reads code
statically (griffe), by folder: this builds build/api-sources/horo/ out of symbolic links
(horo/'s files, plus torch/ and tensorflow/ pointing into plugins/), so the reference covers
all three without importing torch or TensorFlow.
"""
import os
import shutil
from pathlib import Path

PLUGINS = {"torch": "plugins/torch", "tensorflow": "plugins/tensorflow"}


def lay_out(repo: Path) -> Path:
    root = repo / "build" / "api-sources"
    package = root / "horo"
    # rebuilt every time: a file added to horo/ or removed from it shows up at once
    shutil.rmtree(root, ignore_errors=True)
    package.mkdir(parents=True)
    for entry in sorted((repo / "horo").iterdir()):
        if entry.name == "__pycache__" or entry.suffix == ".so":
            continue
        os.symlink(entry, package / entry.name)
    for name, folder in PLUGINS.items():
        os.symlink(repo / folder, package / name)
    return root


def on_startup(command, dirty, **kwargs):
    # on_startup, not on_config: mkdocstrings settles its search paths in its own on_config,
    # and drops a path that does not exist yet.
    lay_out(Path(__file__).resolve().parents[2])
