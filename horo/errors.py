"""horo's exceptions, shaped so Horovod programs catch what they catch under Horovod.

    HoroError                 every error horo raises (a RuntimeError, as before)
    ├── HoroValueError        bad arguments, a name already in flight: also a ValueError
    └── HorovodInternalError  a collective that failed after submission, raised at synchronize
"""
from horo._native import _core

HoroError = _core.HoroError
HoroValueError = _core.HoroValueError
HorovodInternalError = _core.HorovodInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's elastic-mode signal that hosts changed: raised on every rank by `state.commit()` or
    `state.check_host_updates()` in a job launched by an elastic horo-run (see horo.elastic)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync
