"""horo-bench: nccl-tests style benchmarks of horo's collectives.

    mpirun -np 2 python -m horo.bench allreduce -b 8 -e 256M -f 2 --dtype float32 --op sum

prints, on rank 0, one row per message size: bytes, count, dtype, time (µs, median over
iterations of the slowest rank), algbw, busbw and #wrong (elements that differ from a NumPy
reference). See `horo.bench.cli` for the flags.
"""
