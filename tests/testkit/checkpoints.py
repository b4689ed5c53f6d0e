"""What a model's training checkpoint in the store says, for tests that kill training midway
and check where it resumed."""

from __future__ import annotations

import io
from typing import Optional

import torch

from sweeper.store.artifacts import ArtifactStore


def saved_epoch(store: ArtifactStore, key: str) -> Optional[int]:
    """The last epoch model `key`'s checkpoint holds; None without a (readable) checkpoint."""
    payload = store.checkpoint(key).load()
    if payload is None:
        return None
    return int(torch.load(io.BytesIO(payload), weights_only=True)["epoch"])


def checkpoint_epoch(store: ArtifactStore, key: str) -> int:
    """`saved_epoch`, 0 before the first checkpoint: what a test polls while training runs."""
    return saved_epoch(store, key) or 0
