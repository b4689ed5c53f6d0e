"""Questions an attack asks a stored model beyond its logits on the pool.

Why a separate step.  Some attacks need the model itself, not just its stored logits: LiRA with
query augmentations (the logits of flipped and shifted copies of each record) and Merlin (the
loss under random input perturbations).  Answering them from the stored weights, as their own
content-keyed artifacts, means adding such an attack to a finished sweep trains nothing: it only
loads each model once more and asks.  Queries cover the evaluation records only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from jobs.merlin import merlin_ratio
from jobs.training import predict_logits

#: "pdtp" retrains rather than loads the model, so `sweeper.tasks.query_task` answers it itself.
QUERY_KINDS = ("augmented_logits", "merlin", "pdtp")


def image_augmentations(x: np.ndarray, flip: bool, shift: int) -> list[np.ndarray]:
    """The record itself, then its mirror image, then shifts by ±`shift` pixels (zero fill).

    Carlini et al. query the mirror and small translations, the same augmentations the models
    could have been trained with; each shift is applied to the original and, with `flip`, to the
    mirror.  x is (n, channels, height, width).
    """
    if x.ndim != 4:
        raise ValueError(f"image augmentations need (n, channels, height, width) inputs; got {x.shape}")
    bases = [x, x[..., ::-1]] if flip else [x]
    views = list(bases)
    if shift > 0:
        for base in bases:
            for axis, step in ((-1, shift), (-1, -shift), (-2, shift), (-2, -shift)):
                views.append(_shifted(base, axis, step))
    return [np.ascontiguousarray(view) for view in views]


def _shifted(x: np.ndarray, axis: int, step: int) -> np.ndarray:
    out = np.zeros_like(x)
    source = [slice(None)] * x.ndim
    target = [slice(None)] * x.ndim
    source[axis] = slice(0, -step) if step > 0 else slice(-step, None)
    target[axis] = slice(step, None) if step > 0 else slice(0, step)
    out[tuple(target)] = x[tuple(source)]
    return out


def augmented_logits(model: torch.nn.Module, x: np.ndarray, flip: bool, shift: int,
                     device: torch.device) -> np.ndarray:
    """(augmentations, n, classes) logits; the first augmentation is the record itself."""
    return np.stack([predict_logits(model, view, device) for view in image_augmentations(x, flip, shift)])


def answer(kind: str, settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
           y: np.ndarray, device: torch.device) -> np.ndarray:
    """The answer of query `kind` for records (x, y), as one float32 array."""
    if kind == "augmented_logits":
        values = augmented_logits(model, x, settings["flip"], settings["shift"], device)
    elif kind == "merlin":
        values = merlin_ratio(model, x, y, perturbations=settings["perturbations"],
                              sigma=settings["sigma"], seed=settings["seed"], device=device)
    else:
        raise ValueError(f"unknown query kind {kind!r}; known: {list(QUERY_KINDS)}")
    return np.asarray(values, dtype=np.float32)
