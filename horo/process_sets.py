"""Process sets: collectives over a subset of the ranks, on a communicator of their own.

    evens = horo.add_process_set([0, 2])      # every rank calls it, in the same order
    horo.allreduce(x, process_set=evens)       # only ranks 0 and 2 call this
    horo.remove_process_set(evens)

Roots (`root_rank=`) are global ranks and must belong to the set.
"""
import itertools
import operator

import numpy as np

from horo import basics
from horo.errors import HoroValueError

_adds = itertools.count()
_TOKEN = np.zeros(0, dtype=np.uint8)


def _rank_list(ranks):
    """Sorted ints; int() would quietly take "1" or 1.5. (Ranks outside the world or named
    twice are refused by add_process_set, on every rank, by the core.)"""
    try:
        return sorted(operator.index(r) for r in ranks)
    except TypeError:
        raise TypeError(f"ProcessSet: ranks must be a list of integer ranks, got {ranks!r}") from None


class ProcessSet:
    """A fixed group of global ranks; `process_set_id` is set once every rank has added it."""

    def __init__(self, ranks):
        self.ranks = _rank_list(ranks)
        self.process_set_id = None

    def size(self):
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set."""
        return self.ranks.index(basics.rank())

    def included(self):
        return basics.rank() in self.ranks

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job; its ranks are known once horo is initialised."""

    def __init__(self):
        super().__init__([])
        self.process_set_id = 0

    @property
    def ranks(self):
        return list(range(basics.size()))

    @ranks.setter
    def ranks(self, _value):
        pass

    def rank(self):
        return basics.rank()

    def included(self):
        return True

    def __repr__(self):
        # Printable before init (in a default argument, a log line): no size asked of the core.
        return "ProcessSet(process_set_id=0, ranks=<every rank>)"


global_process_set = _GlobalProcessSet()


def _checked_set(process_set, what):
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a horo.ProcessSet (horo.add_process_set), "
                        f"got {type(process_set).__name__} ({process_set!r})")
    return process_set


def set_id(process_set, tensor_name):
    """The id every collective call passes to the core: the global set's without a lookup (a
    framework plugin passes `global_process_set` by default, and resolve() cost 0.7 us a call)."""
    if process_set is None or process_set is global_process_set:
        return 0
    return resolve(process_set, tensor_name)[0]


def set_size(process_set, tensor_name):
    """The set's size, the global set's without resolve()'s rank lookup (alltoall asks on every call)."""
    if process_set is None or process_set is global_process_set:
        return basics.size()
    return resolve(process_set, tensor_name)[2]


def resolve(process_set, tensor_name):
    """(set id, this rank's index in it, its size) or a ValueError naming the tensor."""
    if process_set is None:  # the global set, asked on every call: answered without building its rank list
        return 0, basics.rank(), basics.size()
    ps = _checked_set(process_set, f"'{tensor_name}'")
    if ps.process_set_id is None:
        raise HoroValueError(f"'{tensor_name}': {ps!r} has not been added (horo.add_process_set) or was removed")
    me = basics.rank()
    if ps.process_set_id != 0 and me not in ps.ranks:
        raise HoroValueError(f"'{tensor_name}': rank {me} is not in {ps!r}; only its members may call collectives on it")
    return ps.process_set_id, ps.rank(), ps.size()


_added = {}  # process_set_id -> ProcessSet, for lookups by id (Horovod's *_op(process_set_id=...))


def by_id(process_set_id):
    """The process set with this id (0: the global one), or None."""
    return global_process_set if process_set_id == 0 else _added.get(process_set_id)


def add_process_set(process_set):
    """Registers a set (a ProcessSet or a list of ranks) on every rank; collective over all ranks."""
    from horo.enqueue import enqueue
    from horo.handles import synchronize

    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise HoroValueError(f"{ps!r} has already been added")
    name = f"process_set.add.{next(_adds)}"
    handle = enqueue("add_process_set", name, _TOKEN, _TOKEN, lambda result: result[3], splits=ps.ranks)
    ps.process_set_id = synchronize(handle)
    _added[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a set on every rank; collective over all ranks. Its pending collectives fail."""
    from horo.enqueue import enqueue
    from horo.handles import synchronize

    _checked_set(process_set, "remove_process_set")
    if process_set.process_set_id in (None, 0):
        raise HoroValueError(f"{process_set!r} cannot be removed (not added, already removed, or the global set)")
    name = f"process_set.remove.{process_set.process_set_id}"
    synchronize(enqueue("remove_process_set", name, _TOKEN, _TOKEN, lambda result: None,
                        root=process_set.process_set_id))
    _added.pop(process_set.process_set_id, None)
    process_set.process_set_id = None


def forget_all():
    """At shutdown: the engine's sets are gone, so every added one reads as removed
    (a set kept across shutdown/init would otherwise name a set of the next engine)."""
    for ps in _added.values():
        ps.process_set_id = None
    _added.clear()
