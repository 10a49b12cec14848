"""Elastic training with Horovod's API, framework-free: State, ObjectState, run.

The frameworks' modules (horo.torch.elastic, horo.tensorflow.elastic, horo.tensorflow.keras.elastic)
add their states on top. A job is elastic when launched by `horo-run --host-discovery-script ...`
(see docs/elastic.md); launched otherwise, `run` simply calls the function once.
"""
from horo.elastic.driver_link import generation, under_driver
from horo.elastic.run import run, run_fn
from horo.elastic.state import ObjectState, State
from horo.errors import HorovodInternalError, HostsUpdatedInterrupt

__all__ = ["State", "ObjectState", "run", "run_fn", "HorovodInternalError", "HostsUpdatedInterrupt",
           "generation", "under_driver"]
