"""What an elastic job commits: Horovod's State and ObjectState, framework-free.

A state lives on every rank. `commit()` keeps a copy in memory (the point `restore()` goes back
to) and, in a job launched by an elastic horo-run, rank 0 also hands the serialised copy to the
driver, which holds it in memory (on its machine: it maps the memory rank 0 wrote the commit into,
horo.elastic.commit_slots): when ranks die or hosts change, the driver relaunches the job and the
new ranks start from it (see horo.elastic.run). Nothing is written to disk.
"""
import copy
import os
import pickle
import socket

import numpy as np

from horo import basics
from horo.broadcast import broadcast_
from horo.elastic import driver_link
from horo.errors import HostsUpdatedInterrupt


class State:
    """Horovod's elastic State: subclasses implement save, restore, sync and, to survive a
    relaunch, serialize/deserialize of what save() kept."""

    def __init__(self, bcast_object=None, get_rank=None):
        if bcast_object is None:
            from horo.objects import broadcast_object as bcast_object
        self._bcast_object = bcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Callables run (in order, on every rank) after the job was reset to a new set of ranks,
        before the state is synchronised: e.g. to scale the learning rate to the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's notification hook; horo's driver pushes its notice to rank 0 instead (HostWatch)."""

    def commit(self):
        """Keeps the current state as the point to go back to, then checks for host changes
        (raising HostsUpdatedInterrupt on every rank when the job should grow or shrink).

        In an elastic launch rank 0 also hands the serialised state to the driver before the ranks leave
        commit() together, so a commit any rank returned from is held by the driver (where the driver runs
        on another machine the transfer goes on from a thread instead: see docs/elastic.md)."""
        link = driver_link.link()
        handoff = driver_link.handoff() if link is not None and self._rank() == 0 else None
        if handoff is not None:
            handoff.wait()  # save() overwrites the snapshot a hand-off over the socket sends from
        self.save()
        if handoff is not None:
            self.committed_into(handoff.commit(self.serialize()))
        if self._hosts_updated_everywhere(link):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def committed_into(self, slot):
        """Rank 0, after each commit: it went into `slot` (horo.elastic.commit_slots; None: over the socket).
        A state that saves into the slot's memory (TorchState) keeps its views of it here."""

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the driver has a new set of hosts."""
        if self._hosts_updated_everywhere(driver_link.link()):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def _hosts_updated_everywhere(self, link):
        if link is None:
            return False  # not an elastic launch: hosts never change
        hosts_updated = self._rank() == 0 and driver_link.host_watch().updated.is_set()
        # Every rank must leave together, so rank 0's flag is everyone's: one small broadcast (not an
        # object's two), as it runs at every commit.
        flag = np.array([1 if hosts_updated else 0], dtype=np.int32)
        broadcast_(flag, 0, name="horo.elastic.hosts_updated")
        return bool(flag[0])

    def resume_from_driver(self):
        """At the start of an elastic launch: rank 0 fetches the last commit from the driver (none at the
        first launch), then, after a relaunch, the reset callbacks run, then every rank takes rank 0's state."""
        link = driver_link.link()
        # Every rank says hello and keeps the connection: the driver sees at once which rank died first.
        link.request("hello", rank=self._rank(), host=socket.gethostname(), pid=os.getpid())
        if self._rank() == 0:
            driver_link.host_watch()
            _, data = link.request("fetch")
            if data:
                self.deserialize(data)
                self.restore()
        if driver_link.generation() > 0:
            self.on_reset()
        self.sync()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        pass

    def serialize(self):
        """Bytes of what the last save() kept, or a list of bytes-like parts to send one after the other
        (called on rank 0 at each commit of an elastic launch)."""
        raise NotImplementedError

    def deserialize(self, data):
        """Makes `data` (from serialize()) what restore() goes back to."""
        raise NotImplementedError


class ObjectState(State):
    """Picklable values as attributes: `state = ObjectState(epoch=0, batch=0)`, then `state.epoch`.

    save() keeps a deep copy, so in-place changes after a commit do not leak into it."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: copy.deepcopy(getattr(self, attr)) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0)
            self._set_attrs()

    def serialize(self):
        return pickle.dumps(self._saved_state, protocol=pickle.HIGHEST_PROTOCOL)

    def deserialize(self, data):
        self._saved_state = pickle.loads(data)

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))
