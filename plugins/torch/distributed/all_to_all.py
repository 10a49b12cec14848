"""The all-to-all operations of ProcessGroupHoro (a mixin: it uses the group's _run, _refusing
and process_set). horo's alltoall sends split[j] rows to rank j and reports what arrived
from each rank; torch's output split sizes are checked against that on every rank.
"""
import torch

import horo.torch as hvd


class AllToAll:
    """all_to_all_single (alltoall_base) and all_to_all (alltoall) for ProcessGroupHoro."""

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        size = self.getSize()
        output_split_sizes = list(output_split_sizes or [])
        input_split_sizes = list(input_split_sizes or [])

        def start(name):
            with self._refusing("alltoall", name):
                rows = input.shape[0] if input.dim() > 0 else 1
                splits = input_split_sizes or ([rows // size] * size if rows % size == 0 else None)
                if splits is None:
                    raise ValueError(f"horo backend: all_to_all_single: {rows} rows do not divide among {size} ranks; "
                                     f"pass input_split_sizes")
                if len(splits) != size or sum(splits) != rows:
                    raise ValueError(f"horo backend: all_to_all_single: input_split_sizes {splits} do not split "
                                     f"{rows} rows among {size} ranks")
            handle = hvd.alltoall_async(input, splits=splits, name=name, process_set=self.process_set)
            expected = output_split_sizes or None

            def finish(values):
                received, counts = values[0]
                counts = counts.tolist()
                problem = None
                if expected is not None and counts != expected:
                    problem = f"received {counts} rows from the ranks, output_split_sizes says {expected}"
                elif received.numel() != output.numel():
                    problem = f"received {received.numel()} elements, output holds {output.numel()}"
                # A mismatch shows on the receiving rank only: agree on it, so every rank raises.
                self._agree(f"{name}.check", problem, "all_to_all_single")
                output.copy_(received.reshape(output.shape))
                return [output]

            return [handle], finish, [output]

        return self._run("all_to_all_single", opts, start)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.all_to_all_single(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        """Tensors of any shapes: flattened, sent as one alltoall with a split per destination."""
        outputs, inputs = list(output_tensors), list(input_tensors)
        size = self.getSize()

        def start(name):
            with self._refusing("alltoall", name):
                if len(inputs) != size or len(outputs) != size:
                    raise ValueError(f"horo backend: all_to_all: {len(inputs)} inputs and {len(outputs)} outputs for a "
                                     f"group of {size}")
                dtypes = {t.dtype for t in inputs + outputs}
                if len(dtypes) != 1:
                    raise TypeError(f"horo backend: all_to_all: tensors of several dtypes {sorted(map(str, dtypes))}")
            flat = torch.cat([t.reshape(-1) for t in inputs])
            handle = hvd.alltoall_async(flat, splits=[t.numel() for t in inputs], name=name,
                                        process_set=self.process_set)

            def finish(values):
                received, counts = values[0]
                counts = counts.tolist()
                wanted = [o.numel() for o in outputs]
                problem = None if counts == wanted else f"received {counts} elements per rank, outputs hold {wanted}"
                self._agree(f"{name}.check", problem, "all_to_all")
                for o, part in zip(outputs, received.split(wanted)):
                    o.copy_(part.reshape(o.shape))
                return outputs

            return [handle], finish, outputs

        return self._run("alltoall", opts, start)

    def _agree(self, name, problem, what):
        """Raises on every rank of the group if `problem` is set on any (an allreduce of a flag)."""
        flag = torch.tensor([0 if problem is None else 1], dtype=torch.int32)
        hvd.allreduce_(flag, name=name, op=hvd.Max, process_set=self.process_set)
        if flag.item():
            raise ValueError(f"horo backend: {what}: " + (problem or "the split sizes disagree on another rank"))
