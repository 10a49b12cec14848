"""join: for ranks that ran out of data before the others.

A rank that calls join() keeps taking part in the other ranks' allreduces,
contributing the op's identity (zeros for Sum/Average; Average still divides
by the full size), until every rank has joined. Other collectives started
while some rank has joined fail on the ranks that started them.
"""
import numpy as np

from horo.enqueue import enqueue
from horo.handles import synchronize

_TOKEN = np.zeros(0, dtype=np.uint8)


def join():
    """Blocks until every rank has joined; returns the rank that joined last."""
    return int(synchronize(enqueue("join", "join", _TOKEN, _TOKEN, lambda result: result[3])))
