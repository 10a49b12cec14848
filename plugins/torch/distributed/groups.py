"""torch subgroups on horo process sets.

horo adds a process set collectively over ALL ranks, but torch calls a backend's
creator only on the new group's members. torch.distributed routes every new_group,
new_subgroups and DeviceMesh dimension through `_new_process_group_helper` on every
rank, so `install()` wraps it: for a "horo" subgroup each rank adds the set there, and
the creator (members only) picks it up by the group's name.
"""
import functools
import sys

import torch.distributed.distributed_c10d as c10d

import horo
from horo.process_sets import global_process_set

_sets = {}  # torch group name -> horo ProcessSet, until its creator takes it


def process_set_for(group_name, global_ranks):
    """The horo set of a group being created (the global set for the default group)."""
    if not global_ranks or list(global_ranks) == list(range(horo.size())) and group_name not in _sets:
        return global_process_set
    try:
        return _sets.pop(group_name)
    except KeyError:
        raise RuntimeError(f"horo backend: no horo process set was made for group {group_name!r} "
                           f"(ranks {list(global_ranks)}); create horo groups with torch.distributed.new_group") from None


def _is_horo(backend):
    return str(backend).lower() == "horo" or str(backend).lower().endswith(":horo")


def install():
    original = c10d._new_process_group_helper
    if getattr(original, "_horo_wrapped", False):
        return

    @functools.wraps(original)
    def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                                  *args, **kwargs):
        ranks = list(global_ranks_in_group)
        if ranks and _is_horo(backend):
            from horo.torch.distributed.launch import ensure_horo

            ensure_horo()  # a horo group beside a default group of another backend: horo may not be up yet
        if ranks and _is_horo(backend) and ranks != list(range(horo.size())):
            caller = sys._getframe(1).f_locals
            if caller.get("use_local_synchronization"):
                raise NotImplementedError(
                    "horo backend: new_group(use_local_synchronization=True) is not supported: horo adds a process "
                    "set on every rank, and torch skips the ranks outside the group")
            if ranks != sorted(ranks):
                raise NotImplementedError(f"horo backend: a group whose ranks are not in ascending order ({ranks})")
            _sets[group_name] = horo.add_process_set(ranks)
        return original(group_size, group_rank, global_ranks_in_group, backend, store, group_name, *args, **kwargs)

    _new_process_group_helper._horo_wrapped = True
    c10d._new_process_group_helper = _new_process_group_helper
