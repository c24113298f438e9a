"""The one module that imports torch, lazily: the rest of shardstream works without it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from shardstream._optional import require

__all__ = [
    "default_collate",
    "default_convert",
    "distributed_rank_and_size",
    "pin_memory",
    "require_torch",
    "torch_or_none",
    "worker_info",
]


def torch_or_none() -> ModuleType | None:
    """The torch module, or ``None`` when it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def require_torch(purpose: str = "StreamingDataset and StreamingDataLoader") -> ModuleType:
    """The torch module, or an error naming the extra that installs it."""
    return require("torch", extra="torch", purpose=purpose)


def default_collate() -> Callable[[Any], Any]:
    """Torch's ``default_collate``: what a DataLoader batches samples with by default."""
    collate: Callable[[Any], Any] = require_torch().utils.data.default_collate
    return collate


def default_convert() -> Callable[[Any], Any]:
    """Torch's ``default_convert``: what a DataLoader applies to each item without batching."""
    convert: Callable[[Any], Any] = require_torch().utils.data.default_convert
    return convert


def as_tensor() -> Callable[[Any], Any]:
    """``torch.as_tensor``: a numpy array as a tensor, sharing its memory."""
    convert: Callable[[Any], Any] = require_torch().as_tensor
    return convert


def pin_memory(batch: Any) -> Any:
    """``batch`` with its tensors in pinned memory, as torch's DataLoader pins a batch."""
    module = importlib.import_module("torch.utils.data._utils.pin_memory")
    return module.pin_memory(batch)


def distributed_rank_and_size() -> tuple[int, int] | None:
    """``(rank, world size)`` of torch.distributed's default group once it is initialised."""
    torch = torch_or_none()
    if torch is None:
        return None
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        return None
    return int(distributed.get_rank()), int(distributed.get_world_size())


def worker_info() -> tuple[int, int] | None:
    """``(worker id, workers)`` inside a DataLoader worker process, else ``None``."""
    torch = torch_or_none()
    if torch is None:
        return None
    info = torch.utils.data.get_worker_info()
    if info is None:
        return None
    return int(info.id), int(info.num_workers)
