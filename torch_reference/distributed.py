"""The PyTorch reference on several GPUs, its own standard way: one process per GPU started by ``torchrun``,
``torch.distributed`` with NCCL (gloo on the CPU), the model wrapped in DistributedDataParallel or sharded with
FSDP2's ``fully_shard`` (each mixer block a unit, then the root: embedding, final norm and tied head).

Each process trains on its own rows of the global batch (rank r of W takes rows [r B / W, (r + 1) B / W)), so the
global batch and its data are the same at any process count, as on the JAX side."""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

PARALLEL_MODES = ("none", "ddp", "fsdp")


@dataclass(frozen=True)
class Process:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def leader(self) -> bool:
        return self.rank == 0


SINGLE = Process()  # one process, no group


def start(device: str, parallel: str) -> Process:
    """Join the process group that ``torchrun`` describes (RANK, WORLD_SIZE, LOCAL_RANK) and pin this process's GPU;
    a single process without ``parallel`` does nothing."""
    if parallel not in PARALLEL_MODES:
        raise ValueError(f"parallel must be one of {PARALLEL_MODES}, got {parallel!r}")
    if parallel == "none":
        return Process()
    if "RANK" not in os.environ:
        raise ValueError(f"--parallel={parallel} needs torchrun (RANK, WORLD_SIZE, LOCAL_RANK), e.g. torchrun "
                         "--nproc_per_node=2 -m torch_reference.train_bench ...")  # fmt: skip
    process = Process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))
    if device == "cuda":
        torch.cuda.set_device(process.local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", process.local_rank))
    else:
        dist.init_process_group("gloo")
    return process


def wrap(model: torch.nn.Module, parallel: str, process: Process) -> torch.nn.Module:
    """The module to call: ``model`` itself, its DDP wrapper, or ``model`` sharded in place by FSDP2 (its parameters
    become DTensors under the same names: build the optimizer after this)."""
    if parallel == "ddp":
        device_ids = [process.local_rank] if torch.cuda.is_available() and dist.get_backend() == "nccl" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in getattr(getattr(model, "backbone", None), "layers", []):
            fully_shard(block)
        fully_shard(model)
    return model


def my_rows(array, process: Process, axis: int = 0):
    """This process's rows (along ``axis``) of a global batch array; all of it with one process."""
    rows = array.shape[axis]
    if rows % process.world:
        raise ValueError(f"batch_size={rows} must be a multiple of the {process.world} processes")
    share = rows // process.world
    index = [slice(None)] * array.ndim
    index[axis] = slice(process.rank * share, (process.rank + 1) * share)
    return array[tuple(index)]


def _all_reduce(value: float, process: Process, op) -> float:
    if process.world == 1:
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=op)
    return float(tensor.item())


def all_max(value: float, process: Process) -> float:
    """The largest ``value`` over the processes (e.g. peak memory, step time)."""
    return _all_reduce(value, process, dist.ReduceOp.MAX)


def all_mean(value: float, process: Process) -> float:
    return _all_reduce(value, process, dist.ReduceOp.SUM) / process.world


def finish(process: Process) -> None:
    if process.world > 1 or dist.is_initialized():
        dist.destroy_process_group()
