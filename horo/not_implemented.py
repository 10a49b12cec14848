"""Horovod names horo does not implement: each is a callable that raises NotImplementedError saying
what to use instead, marked so tests/test_horovod_api.py can tell it from a missing name."""
import types


def not_implemented(horovod_name, instead):
    """A stand-in for Horovod's `horovod_name`; calling (or instantiating) it raises NotImplementedError."""
    message = f"{horovod_name} is not implemented in horo; {instead}"

    def stand_in(*args, **kwargs):
        raise NotImplementedError(message)

    stand_in.__name__ = horovod_name.rsplit(".", 1)[-1]
    stand_in.__qualname__ = stand_in.__name__
    stand_in.__doc__ = message
    stand_in.__horo_not_implemented__ = message
    return stand_in


def not_implemented_module(module_name, instead, names):
    """A module whose public names (Horovod's) all raise NotImplementedError, e.g. `hvd.elastic`."""
    module = types.ModuleType(module_name, f"{module_name} is not implemented in horo; {instead}")
    module.__horo_not_implemented__ = module.__doc__
    for name in names:
        setattr(module, name, not_implemented(f"{module_name}.{name}", instead))
    return module

