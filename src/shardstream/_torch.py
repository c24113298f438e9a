"""The one module that imports torch, lazily: the rest of shardstream works without it."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["distributed_rank_and_size", "torch_or_none"]


def torch_or_none() -> ModuleType | None:
    """The torch module, or ``None`` when it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def distributed_rank_and_size() -> tuple[int, int] | None:
    """``(rank, world size)`` of torch.distributed's default group once it is initialised."""
    torch = torch_or_none()
    if torch is None:
        return None
    distributed = torch.distributed
    if not distributed.is_available() or not distributed.is_initialized():
        return None
    return int(distributed.get_rank()), int(distributed.get_world_size())
