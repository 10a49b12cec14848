"""horo's exceptions, shaped so Horovod programs catch what they catch under Horovod.

    HoroError                 every error horo raises (a RuntimeError, as before)
    ├── HoroValueError        bad arguments, a name already in flight: also a ValueError
    └── HorovodInternalError  a collective that failed after submission, raised at synchronize
"""
from horo._native import _core

HoroError = _core.HoroError
HoroValueError = _core.HoroValueError
HorovodInternalError = _core.HorovodInternalError
