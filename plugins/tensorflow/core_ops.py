"""The collectives as TensorFlow ops, without gradients (gradients.py adds them):
the native AsyncOpKernels where the op library builds (native.py), else the
blocking tf.numpy_function ops (numpy_ops.py). Both take resolved names and
return tensors with the same static shapes."""
from horo.tensorflow import native, numpy_ops
from horo.tensorflow.native_ops import NativeOps

_lib = native.library()
_impl = NativeOps(_lib) if _lib is not None else numpy_ops

uses_native_ops = _lib is not None
allreduce_group = _impl.allreduce_group
allgather_group = _impl.allgather_group
broadcast_group = _impl.broadcast_group
alltoall = _impl.alltoall
reducescatter_group = _impl.reducescatter_group
join = _impl.join
barrier = _impl.barrier
