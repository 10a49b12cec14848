"""TensorFlow values <-> the NumPy arrays horo's core works on, eagerly or inside a graph.

Collectives normally run as native ops (native_ops.py); `run` below serves the
numpy_function fallback (numpy_ops.py). There, eagerly, a collective runs right away
on `tensor.numpy()`; inside `tf.function` it becomes one `tf.numpy_function` op whose
Python body runs at every execution.
tf.function's automatic control dependencies run stateful ops (numpy_function is
one) in program order, so each rank submits its blocking collectives in the order
the program states them, and a group is one op (all enqueued, then all awaited),
so the core can fuse it.
"""
import weakref

import tensorflow as tf

from horo.enqueue import tensor_name

SUPPORTED = (tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.bool)
_SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED)


def as_tensor(value, what="tensor"):
    """A tf.Tensor for a Tensor, Variable (its current value), Keras variable, array or list."""
    if isinstance(value, tf.Tensor):
        return value
    try:
        return tf.convert_to_tensor(value)
    except (TypeError, ValueError) as e:  # TF's own message names neither the argument nor horo
        raise TypeError(f"{what}: expected a tf.Tensor, tf.Variable or array, got {type(value).__name__} "
                        f"({str(e).splitlines()[0][:200]})") from None


# Unsigned types Horovod moves (broadcast, allgather, alltoall) but the core has no code for: they
# travel bitcast to the signed type of their width, which moves the same bytes.
MOVED_AS = {tf.uint16: tf.int16, tf.uint32: tf.int32, tf.uint64: tf.int64}


def to_wire(tensor):
    """(tensor as the core moves it, its own dtype to restore, or None)."""
    wire = MOVED_AS.get(tensor.dtype)
    return (tensor, None) if wire is None else (tf.bitcast(tensor, wire), tensor.dtype)


def from_wire(tensor, dtype):
    return tensor if dtype is None else tf.bitcast(tensor, dtype)


def check_dtype(tensor, name, moves=False):
    """Raises naming `name` for a dtype horo cannot reduce (or, `moves`, move), or for a tensor in GPU memory."""
    # The TF plugin moves host buffers (tensor.numpy()); taking a GPU tensor would be a
    # silent device-to-host copy, so it is refused until the TF native ops serve GPU memory.
    device = getattr(tensor, "device", "") or ""
    if ":GPU:" in device.upper():
        raise ValueError(
            f"'{name}': horo.tensorflow does not take GPU tensors yet ({device}); place the tensor on the CPU "
            "(with tf.device('/CPU:0')) or use horo.torch / CuPy for GPU collectives"
        )
    if moves and tensor.dtype in MOVED_AS:
        return
    if tensor.dtype in MOVED_AS:
        raise TypeError(f"'{name}': {tensor.dtype.name} tensors are moved (broadcast, allgather, alltoall) but not "
                        f"reduced, as in Horovod; cast to a signed or float dtype first")
    if tensor.dtype not in SUPPORTED:
        raise TypeError(f"'{name}': dtype {tensor.dtype.name} is not supported (supported: {_SUPPORTED_NAMES}; "
                        f"moved only: {', '.join(d.name for d in MOVED_AS)})")


def is_differentiable(dtype):
    return dtype.is_floating


def collective_name(name, collective, tensor=None, process_set=None):
    """The name ranks match this collective by, fixed when the op is built.

    Eagerly: the caller's name, else horo's call-order counter. In a graph the op's
    Python body runs at every execution, so the name is fixed at trace time: the
    caller's, else one derived from the input tensor's graph name (as Horovod's
    `HorovodAllreduce_<tensor name>`), which is the same on every rank running the
    same program, even when ranks trace at different times.
    """
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"{collective}: name must be a str, got {type(name).__name__} ({name!r})")
        return name
    if tf.executing_eagerly():
        return tensor_name(None, collective, process_set)
    set_id = 0 if process_set is None else process_set.process_set_id
    base = f"Horo{collective.title().replace('_', '')}"
    base += f"_{tensor.name}" if tensor is not None else ""
    return unique_in_graph(base + (f".set{set_id}" if set_id else ""))


def variable_label(variable, index):
    """`<index>.<short name>` for a variable's collective: the position keeps it unique, and
    only the last part of the name is used, because Keras numbers auto-named layers per
    process ("dense_3/kernel" on one rank can be "dense_4/kernel" on another)."""
    label = getattr(variable, "name", None)
    if not isinstance(label, str) or not label:
        return str(index)
    return f"{index}.{label.rsplit('/', 1)[-1].split(':', 1)[0]}"


def derived_name(name, suffix):
    """A name for a collective derived from another (e.g. its gradient), unique within a graph."""
    base = f"{name}.{suffix}"
    return base if tf.executing_eagerly() else unique_in_graph(base)


_names_used = weakref.WeakKeyDictionary()  # graph -> {base name: times used}


def unique_in_graph(base):
    # The same tensor may be reduced twice in one graph (or a gradient taken twice):
    # number repeats in build order, which every rank shares.
    used = _names_used.setdefault(tf.compat.v1.get_default_graph(), {})
    count = used.get(base, 0)
    used[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


def run(fn, inputs, out_dtypes, out_shapes, op_name="horo"):
    """fn(*numpy arrays) -> list of numpy arrays, as tensors of `out_dtypes` / `out_shapes`.

    Eagerly fn runs now; in a graph it becomes a tf.numpy_function op (stateful, so
    it always runs and keeps program order), with the static shapes known set.
    """
    if tf.executing_eagerly():
        outputs = fn(*[t.numpy() for t in inputs])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outputs, out_dtypes)]

    def body(*arrays):
        return [o.astype(d.as_numpy_dtype, copy=False) for o, d in zip(fn(*arrays), out_dtypes)]

    outputs = tf.numpy_function(body, list(inputs), list(out_dtypes), stateful=True, name=op_name)
    for output, shape in zip(outputs, out_shapes):
        output.set_shape(shape)
    return list(outputs)
