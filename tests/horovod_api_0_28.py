"""Horovod 0.28's public surface, written down from its documentation and API reference
(horovod.torch, horovod.tensorflow, horovod.tensorflow.keras, and the framework-free basics of
horovod.common.basics / process_sets), as data for tests/test_horovod_api.py.

Each module maps a public name to its signature (the text between the parentheses, defaults as
Horovod writes them; `None` for a value or a class whose constructor is not compared). Names are
resolved against horo's matching module: `horo` for the basics, `horo.torch`, `horo.tensorflow`,
`horo.tensorflow.keras`; a dotted name (`callbacks.MetricAverageCallback`) is an attribute path.
"""

_PROCESS_MODEL = {
    "init": "comm=None, process_sets=None",
    "shutdown": "",
    "is_initialized": "",
    "start_timeline": "file_path, mark_cycles=False",
    "stop_timeline": "",
    "size": "",
    "local_size": "",
    "cross_size": "",
    "rank": "",
    "local_rank": "",
    "cross_rank": "",
    "is_homogeneous": "",
    "mpi_threads_supported": "",
    "mpi_enabled": "",
    "mpi_built": "",
    "gloo_enabled": "",
    "gloo_built": "",
    "nccl_built": "",
    "ddl_built": "",
    "ccl_built": "",
    "cuda_built": "",
    "rocm_built": "",
    "ProcessSet": None,
    "global_process_set": None,
    "add_process_set": "process_set",
    "remove_process_set": "process_set",
    "Average": None,
    "Sum": None,
    "Adasum": None,
    "Min": None,
    "Max": None,
    "Product": None,
}

BASICS = dict(_PROCESS_MODEL)

TORCH = dict(
    _PROCESS_MODEL,
    **{
        "HorovodInternalError": None,
        "HostsUpdatedInterrupt": None,
        "elastic": None,
        "Compression": None,
        "Compression.none": None,
        "Compression.fp16": None,
        "allreduce": "tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, "
                     "postscale_factor=1.0, process_set=global_process_set",
        "allreduce_async": "tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, "
                           "process_set=global_process_set",
        "allreduce_": "tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, "
                      "process_set=global_process_set",
        "allreduce_async_": "tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, "
                            "process_set=global_process_set",
        "sparse_allreduce_async": "tensor, name, op, process_set=global_process_set",
        "grouped_allreduce": "tensors, average=None, name=None, compression=Compression.none, op=None, "
                             "prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set",
        "grouped_allreduce_async": "tensors, average=None, name=None, op=None, prescale_factor=1.0, "
                                   "postscale_factor=1.0, process_set=global_process_set",
        "grouped_allreduce_": "tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, "
                              "process_set=global_process_set",
        "grouped_allreduce_async_": "tensors, average=None, name=None, op=None, prescale_factor=1.0, "
                                    "postscale_factor=1.0, process_set=global_process_set",
        "allgather": "tensor, name=None, process_set=global_process_set",
        "allgather_async": "tensor, name=None, process_set=global_process_set",
        "grouped_allgather": "tensors, name=None, process_set=global_process_set",
        "grouped_allgather_async": "tensors, name=None, process_set=global_process_set",
        "broadcast": "tensor, root_rank, name=None, process_set=global_process_set",
        "broadcast_async": "tensor, root_rank, name=None, process_set=global_process_set",
        "broadcast_": "tensor, root_rank, name=None, process_set=global_process_set",
        "broadcast_async_": "tensor, root_rank, name=None, process_set=global_process_set",
        "alltoall": "tensor, splits=None, name=None, process_set=global_process_set",
        "alltoall_async": "tensor, splits=None, name=None, process_set=global_process_set",
        "reducescatter": "tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set, "
                         "prescale_factor=1.0, postscale_factor=1.0",
        "reducescatter_async": "tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0, "
                               "postscale_factor=1.0",
        "grouped_reducescatter": "tensors, name=None, compression=Compression.none, op=Average, "
                                 "process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0",
        "grouped_reducescatter_async": "tensors, name=None, op=Average, process_set=global_process_set, "
                                       "prescale_factor=1.0, postscale_factor=1.0",
        "join": "device=-1",
        "barrier": "process_set=global_process_set",
        "poll": "handle",
        "synchronize": "handle",
        "broadcast_parameters": "params, root_rank",
        "broadcast_optimizer_state": "optimizer, root_rank, model=None",
        "broadcast_object": "obj, root_rank=0, name=None, process_set=global_process_set",
        "allgather_object": "obj, name=None, process_set=global_process_set",
        "DistributedOptimizer": "optimizer, named_parameters=None, compression=Compression.none, "
                                "backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0, "
                                "groups=None, sparse_as_dense=False, process_set=global_process_set",
        "SyncBatchNorm": None,
    },
)

TENSORFLOW = dict(
    _PROCESS_MODEL,
    **{
        "HorovodInternalError": None,
        "HostsUpdatedInterrupt": None,
        "elastic": None,
        "Compression": None,
        "Compression.none": None,
        "Compression.fp16": None,
        "allreduce": "tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None, "
                     "prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set, "
                     "ignore_name_scope=False",
        "grouped_allreduce": "tensors, average=None, device_dense='', device_sparse='', compression=Compression.none, "
                             "op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set, "
                             "ignore_name_scope=False",
        "allgather": "tensor, name=None, ignore_name_scope=False, process_set=global_process_set",
        "grouped_allgather": "tensors, name=None, ignore_name_scope=False, process_set=global_process_set",
        "broadcast": "tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set",
        "broadcast_": "variables, root_rank, name=None, process_set=global_process_set",
        "alltoall": "tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set",
        "reducescatter": "tensor, device_dense='', compression=Compression.none, op=Average, name=None, "
                         "process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0, "
                         "postscale_factor=1.0",
        "grouped_reducescatter": "tensors, device_dense='', compression=Compression.none, op=Average, "
                                 "process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0",
        "join": "",
        "barrier": "process_set=global_process_set",
        "size_op": "process_set_id=0, name=None",
        "local_size_op": "name=None",
        "rank_op": "name=None",
        "local_rank_op": "name=None",
        "process_set_included_op": "process_set_id=0, name=None",
        "broadcast_variables": "variables, root_rank, process_set=global_process_set, inplace=False",
        "broadcast_global_variables": "root_rank",
        "broadcast_object": "obj, root_rank=0, session=None, name=None, process_set=global_process_set",
        "broadcast_object_fn": "root_rank=0, session=None, name=None, process_set=global_process_set",
        "allgather_object": "obj, session=None, name=None, process_set=global_process_set",
        "DistributedOptimizer": "optimizer, name=None, use_locking=False, device_dense='', device_sparse='', "
                                "compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1, "
                                "op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False, "
                                "num_groups=0, groups=None, process_set=global_process_set, "
                                "scale_local_gradients=True",
        "DistributedGradientTape": "gradtape, device_dense='', device_sparse='', compression=Compression.none, "
                                   "sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, "
                                   "groups=None, process_set=global_process_set, scale_local_gradients=True",
        "PartialDistributedGradientTape": "gradtape, device_dense='', device_sparse='', "
                                          "compression=Compression.none, sparse_as_dense=False, op=Average, "
                                          "gradient_predivide_factor=1.0, num_groups=0, groups=None, "
                                          "process_set=global_process_set, local_layers=None, "
                                          "scale_local_gradients=True",
        "BroadcastGlobalVariablesHook": "root_rank, device='', process_set=global_process_set",
        "SyncBatchNormalization": None,
        "LocalGradientAggregationHelper": "backward_passes_per_step, allreduce_func, sparse_as_dense, "
                                          "average_aggregated_gradients, rank, optimizer_type, "
                                          "process_set=global_process_set, scale_local_gradients=True",
        "gpu_available": "ext_base_name, verbose=False",
    },
)

KERAS = {
    **{k: v for k, v in _PROCESS_MODEL.items() if k != "is_homogeneous"},
    "Compression": None,
    "Compression.none": None,
    "Compression.fp16": None,
    "elastic": None,
    "callbacks": None,
    "callbacks.BroadcastGlobalVariablesCallback": "root_rank, device='', local_variables=None",
    "callbacks.MetricAverageCallback": "device=''",
    "callbacks.LearningRateScheduleCallback": "initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True, "
                                              "momentum_correction=True, steps_per_epoch=None",
    "callbacks.LearningRateWarmupCallback": "initial_lr, warmup_epochs=5, momentum_correction=True, "
                                            "steps_per_epoch=None, verbose=0",
    "callbacks.BestModelCheckpoint": "monitor='val_loss', verbose=0, mode='auto', save_freq='epoch'",
    "DistributedOptimizer": "optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none, "
                            "sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, "
                            "backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0, "
                            "groups=None, process_set=global_process_set, scale_local_gradients=True",
    "PartialDistributedOptimizer": "optimizer, name=None, device_dense='', device_sparse='', "
                                   "compression=Compression.none, sparse_as_dense=False, "
                                   "gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1, "
                                   "average_aggregated_gradients=False, groups=None, process_set=global_process_set, "
                                   "local_layers=None, scale_local_gradients=True",
    "broadcast_global_variables": "root_rank",
    "allreduce": "value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None, "
                 "compression=Compression.none",
    "allgather": "value, name=None",
    "broadcast": "value, root_rank, name=None",
    "reducescatter": "value, name=None, op=Average",
    "load_model": "filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none",
}

MODULES = {
    "horo": BASICS,
    "horo.torch": TORCH,
    "horo.tensorflow": TENSORFLOW,
    "horo.tensorflow.keras": KERAS,
}
