"""Rank 0's commits in memory the driver holds a reference to, when both run on one machine.

Rank 0 writes each commit into one of two anonymous memory files (memfd) and tells the driver
where it is (its pid, the file's descriptor, a random nonce the file begins with); the driver opens
/proc/<pid>/fd/<fd> and so holds the same pages. The state never crosses a socket, the driver
copies nothing, and the commit outlives rank 0: the driver's reference keeps it. The two files alternate,
so the one the driver holds is never written while a new commit is. Where the driver cannot open
the file (another machine, another pid namespace: the nonce does not match), rank 0 sends the bytes
over the socket instead (horo.elastic.driver_link).

A file's layout: the nonce, padded to HEADER_BYTES, then the commit's bytes.
"""
import mmap
import os
import secrets

import numpy as np

HEADER_BYTES = 64
NONCE_BYTES = 16
# A commit in parts whose tensors start on this boundary can be written in place (see Slot.view).
ALIGNMENT = 64


class Slot:
    """One memory file holding up to `capacity` bytes of a commit."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.fd = os.memfd_create("horo-elastic-commit", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, HEADER_BYTES + capacity)
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self._map = mmap.mmap(self.fd, HEADER_BYTES + capacity)
        self._map[:NONCE_BYTES] = self.nonce
        self._bytes = np.frombuffer(self._map, dtype=np.uint8)[HEADER_BYTES:]
        self.address = self._bytes.ctypes.data
        self.saved = None  # what a state keeps of its views of this slot (TorchState.committed_into)

    def view(self, offset, nbytes):
        """The slot's bytes [offset, offset + nbytes) of the commit, as a writable NumPy array: a state
        that saves into them has its next commit in place (write() then skips those parts)."""
        return self._bytes[offset:offset + nbytes]

    def write(self, parts):
        """Copies the commit's `parts` (bytes-like, one after the other) into the slot, except those already
        there; returns the commit's length."""
        arrays = [np.frombuffer(part, dtype=np.uint8) if not isinstance(part, np.ndarray)
                  else part.reshape(-1).view(np.uint8) for part in parts]
        placed, offset = [], 0
        for data in arrays:
            at = data.ctypes.data - self.address
            if data.size and at != offset and 0 <= at < self.capacity:
                # Saved here for another layout (the state gained a tensor): taken out before anything
                # is written over it.
                data = data.copy()
            placed.append((offset, data))
            offset += data.size
        for at, data in placed:
            if data.size and data.ctypes.data != self.address + at:
                self._bytes[at:at + data.size] = data
        return offset

    def describe(self, length):
        """What the driver needs to hold this slot's commit of `length` bytes (a commit message's fields)."""
        return {"pid": os.getpid(), "fd": self.fd, "nonce": self.nonce.hex(), "length": length}


class CommitSlots:
    """Rank 0's two slots; `next()` is the one the driver does not hold."""

    def __init__(self):
        self._slots = [None, None]
        self._held = None  # index of the slot whose commit the driver holds

    def next(self, capacity=0):
        """The slot the next commit goes into, replaced by a larger one when it holds less than `capacity`."""
        index = 1 if self._held == 0 else 0
        slot = self._slots[index]
        if slot is None or slot.capacity < capacity:
            if slot is not None:
                os.close(slot.fd)  # the driver keeps a descriptor of its own while it needs the old one
            # Room to grow: a state that gains a little (an optimizer's first step) keeps its slot.
            slot = self._slots[index] = Slot(max(capacity + capacity // 8, 1 << 16))
        return slot

    def held(self, slot):
        """The driver now holds `slot`'s commit."""
        self._held = self._slots.index(slot)


def open_held(pid, fd, nonce_hex, length):
    """The driver's side: a descriptor of its own for rank 0's slot (pid, fd), or OSError when the file
    is not reachable from here or is not the one rank 0 named."""
    own = os.open(f"/proc/{int(pid)}/fd/{int(fd)}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(own).st_size < HEADER_BYTES + length or \
                os.pread(own, NONCE_BYTES, 0) != bytes.fromhex(nonce_hex):
            raise OSError(f"/proc/{pid}/fd/{fd} is not the commit's memory (another machine or pid namespace)")
    except BaseException:
        os.close(own)
        raise
    return own


def read_held(fd, length):
    """The commit of `length` bytes in the driver's descriptor `fd`, mapped read-only (no copy)."""
    if length == 0:
        return b""
    return memoryview(mmap.mmap(fd, HEADER_BYTES + length, prot=mmap.PROT_READ))[HEADER_BYTES:]
