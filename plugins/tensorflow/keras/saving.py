"""load_model: a saved model whose optimizer comes back as a DistributedOptimizer.

`model.save("m.keras")` with a DistributedOptimizer records the wrapped optimizer's own
class and config (e.g. `SGD`), so the file also loads without horo, as plain Keras.
horo's settings (compression, op, ...) are not in the file: pass them to load_model.
"""
import keras

import horo.tensorflow as htf
from horo.tensorflow.keras.optimizer import is_distributed, make_distributed


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=htf.Compression.none,
               **distributed_kwargs):
    """`keras.models.load_model(filepath)`, its optimizer (with its restored state: slots,
    iterations, accumulators) turned into a DistributedOptimizer.

    custom_optimizers: optimizer classes the file refers to that Keras does not know.
    custom_objects: passed to Keras as usual.
    compression and **distributed_kwargs (op, gradient_predivide_factor, sparse_as_dense,
    average_aggregated_gradients, groups, process_set, name): as for DistributedOptimizer.
    """
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or ():
        objects.setdefault(cls.__name__, cls)
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not is_distributed(optimizer):
        make_distributed(optimizer, compression=compression, **distributed_kwargs)
    return model
