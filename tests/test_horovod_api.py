"""Every public name of Horovod 0.28's modules (tests/horovod_api_0_28.py) exists in horo's matching
module with a compatible signature, or says clearly that it is not implemented and what to use.

Compatible: Horovod's parameters come first, in Horovod's order, with Horovod's defaults (so every
positional and keyword call of a Horovod program binds the same way); horo may add parameters
after them, each with a default, and defaults where Horovod has none. A name horo does not implement is a callable (or a module) marked
`__horo_not_implemented__` whose call raises NotImplementedError naming what to use instead.
"""
import ast
import importlib
import inspect

import pytest
from horovod_api_0_28 import MODULES

NO_DEFAULT = object()


def horovod_parameters(signature_text):
    """[(name, default source text or NO_DEFAULT)] from Horovod's signature text."""
    args = ast.parse(f"def f({signature_text}): pass").body[0].args
    defaults = [NO_DEFAULT] * (len(args.args) - len(args.defaults)) + [ast.unparse(d) for d in args.defaults]
    return [(a.arg, d) for a, d in zip(args.args, defaults)]


def resolve(module, dotted):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def spelled_as_horovod(value, name, module):
    """horo's default value in Horovod's spelling (global_process_set, Compression.none, Average)."""
    import horo

    if value is horo.global_process_set:
        return "global_process_set"
    compression = getattr(module, "Compression", None)
    if compression is not None and value is getattr(compression, "none", object()):
        return "Compression.none"
    if name == "op" and value == horo.Average and value is not None and not isinstance(value, bool):
        return "Average"
    return repr(value)


def not_implemented_reason(obj):
    return getattr(obj, "__horo_not_implemented__", None)


def compare(module, name, signature_text):
    """('present' | 'not implemented' | 'missing' | 'differs', detail)."""
    try:
        obj = resolve(module, name)
    except AttributeError:
        return "missing", ""
    if not_implemented_reason(obj):
        return "not implemented", not_implemented_reason(obj)
    if signature_text is None:
        return "present", ""
    try:
        ours = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError) as e:
        return "differs", f"no signature: {e}"
    theirs = horovod_parameters(signature_text)
    positional = [p for p in ours if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, (their_name, their_default) in enumerate(theirs):
        if i >= len(positional) or positional[i].name != their_name:
            got = ", ".join(p.name for p in positional)
            return "differs", f"parameter {i} should be {their_name!r} (Horovod: {signature_text}); horo: ({got})"
        ours_default = positional[i].default
        if their_default is NO_DEFAULT:
            continue  # a default horo adds (e.g. root_rank=0) binds every Horovod call the same way
        if ours_default is inspect.Parameter.empty:
            return "differs", f"{their_name!r} has no default in horo (Horovod: {their_default})"
        spelled = spelled_as_horovod(ours_default, their_name, module)
        if spelled != their_default:
            try:
                same = ast.literal_eval(their_default) == ours_default
            except ValueError:
                same = False
            if not same:
                return "differs", f"{their_name}={spelled} in horo, {their_default} in Horovod"
    for extra in positional[len(theirs):]:
        if extra.default is inspect.Parameter.empty:
            return "differs", f"horo's extra parameter {extra.name!r} has no default"
    return "present", ""


def survey(module_name):
    module = importlib.import_module(module_name)
    return {name: compare(module, name, sig) for name, sig in MODULES[module_name].items()}


def _import_or_skip(module_name):
    framework = {"horo.torch": "torch", "horo.tensorflow": "tensorflow", "horo.tensorflow.keras": "keras"}
    if module_name in framework:
        pytest.importorskip(framework[module_name])


@pytest.mark.parametrize("module_name", list(MODULES))
def test_every_horovod_name_is_present_with_its_signature_or_says_not_implemented(module_name):
    _import_or_skip(module_name)
    results = survey(module_name)
    counts = {}
    for status, _ in results.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"\n{module_name}: {len(results)} Horovod names: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    for name, (status, detail) in sorted(results.items()):
        if status != "present":
            print(f"  {status:16s} {name}: {detail}")
    wrong = {n: r for n, r in results.items() if r[0] in ("missing", "differs")}
    assert not wrong, "\n".join(f"{n}: {s} {d}" for n, (s, d) in sorted(wrong.items()))


@pytest.mark.parametrize("module_name", list(MODULES))
def test_names_not_implemented_raise_and_say_what_to_use(module_name):
    _import_or_skip(module_name)
    module = importlib.import_module(module_name)
    for name in MODULES[module_name]:
        obj = resolve(module, name) if _has(module, name) else None
        reason = not_implemented_reason(obj)
        if not reason:
            continue
        if inspect.ismodule(obj):
            # A module stands in for Horovod's (e.g. elastic): each of its public names says it.
            members = [getattr(obj, n) for n in dir(obj) if not n.startswith("_")]
            assert members, f"{module_name}.{name} is empty"
        else:
            members = [obj]
        for member in members:
            with pytest.raises(NotImplementedError, match="horo"):
                member()


def _has(module, dotted):
    try:
        resolve(module, dotted)
        return True
    except AttributeError:
        return False
