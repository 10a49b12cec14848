"""Gradient shapes of models, for `horo-bench fused` and benchmarks/resnet50_allreduce.py.

ResNet-50's table is built in (no torch needed); `--model module:attr` takes any torch model's
parameter shapes instead.
"""
import importlib
import math

import numpy as np

# torchvision resnet50() parameter shapes, in model.parameters() order: conv weights, BatchNorm
# gamma and beta, fc weight and bias (BN running statistics are buffers, not gradients).
RESNET50_SHAPES = [
    # stem: conv1, bn1 (gamma, beta)
    (64, 3, 7, 7), (64,), (64,),
    # layer1.0: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3 + downsample conv, bn
    (64, 64, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    (256, 64, 1, 1), (256,), (256,),
    # layer1.1: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (64, 256, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    # layer1.2: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (64, 256, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    # layer2.0: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3 + downsample conv, bn
    (128, 256, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    (512, 256, 1, 1), (512,), (512,),
    # layer2.1: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    # layer2.2: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    # layer2.3: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    # layer3.0: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3 + downsample conv, bn
    (256, 512, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    (1024, 512, 1, 1), (1024,), (1024,),
    # layer3.1: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer3.2: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer3.3: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer3.4: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer3.5: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer4.0: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3 + downsample conv, bn
    (512, 1024, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,), (2048,),
    (2048, 1024, 1, 1), (2048,), (2048,),
    # layer4.1: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (512, 2048, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,), (2048,),
    # layer4.2: conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1, bn3
    (512, 2048, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,), (2048,),
    # fc: weight, bias
    (1000, 2048), (1000,),
]
RESNET50_TENSORS = 161
RESNET50_ELEMENTS = 25_557_032
assert len(RESNET50_SHAPES) == RESNET50_TENSORS, len(RESNET50_SHAPES)
assert sum(math.prod(s) for s in RESNET50_SHAPES) == RESNET50_ELEMENTS


def shapes_of(spec):
    """Parameter shapes (in model.parameters() order) of the torch model `module:attr`.

    attr may be an nn.Module instance, or a callable (class or factory) called with no arguments.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model takes module:attr (e.g. torchvision.models:resnet18), not {spec!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    model = obj if hasattr(obj, "parameters") else obj()
    shapes = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    if not shapes:
        raise ValueError(f"{spec}: the model has no trainable parameters")
    return shapes


def gradient_steps(shapes, name_prefix, horo, comm):
    """Zeroed float32 gradients of `shapes` and two ways to allreduce them as one training step
    does (Sum, in place, last layer first, as backward produces them):
    (grads, horo_step, mpi_loop_step). horo_step enqueues every gradient under a fixed name (the
    response cache path), then synchronises; mpi_loop_step runs comm.Allreduce per tensor."""
    grads = [np.zeros(s, dtype=np.float32) for s in shapes]
    order = list(range(len(grads)))[::-1]
    names = [f"{name_prefix}.{i}" for i in range(len(grads))]

    def horo_step():
        handles = [horo.allreduce_async_(grads[i], name=names[i], op=horo.Sum) for i in order]
        for h in handles:
            horo.synchronize(h)

    def mpi_loop_step():
        from mpi4py import MPI

        for i in order:
            comm.Allreduce(MPI.IN_PLACE, grads[i], op=MPI.SUM)

    return grads, horo_step, mpi_loop_step
