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
    """Carlini et al.'s query views: the record (and, with `flip`, its mirror), each translated
    by every (dy, dx) in [−shift, shift]², the border filled by reflection.

    As the authors' inference script (tensorflow/privacy research/mi_lira_2021) does: each base
    image is padded by `shift` pixels on both sides of height and width in "reflect" mode (the
    edge pixel is not repeated) and every window of the original size is cut out, row offset
    outer, column offset inner — (1 + flip)·(2·shift + 1)² views, the record itself being the
    centre window of the first base (index shift·(2·shift + 1) + shift), not view 0.  The
    mirror flips the width axis.  x is (n, channels, height, width).
    """
    if x.ndim != 4:
        raise ValueError(f"image augmentations need (n, channels, height, width) inputs; got {x.shape}")
    height, width = x.shape[-2:]
    if shift < 0 or shift >= min(height, width):
        raise ValueError(f"augment shift {shift} must lie in [0, {min(height, width) - 1}] for "
                         f"{height}×{width} images (reflection padding needs shift < the image size)")
    bases = [x, x[..., ::-1]] if flip else [x]
    views = []
    for base in bases:
        padded = np.pad(base, ((0, 0), (0, 0), (shift, shift), (shift, shift)), mode="reflect")
        for row in range(2 * shift + 1):
            for column in range(2 * shift + 1):
                views.append(padded[..., row:row + height, column:column + width])
    return [np.ascontiguousarray(view) for view in views]


def augmented_logits(model: torch.nn.Module, x: np.ndarray, flip: bool, shift: int,
                     device: torch.device) -> np.ndarray:
    """(augmentations, n, classes) logits, in the order of `image_augmentations`."""
    return np.stack([predict_logits(model, view, device) for view in image_augmentations(x, flip, shift)])


def answer(kind: str, settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
           y: np.ndarray, device: torch.device) -> np.ndarray:
    """The answer of query `kind` for records (x, y), as one float32 array."""
    if kind == "augmented_logits":
        values = augmented_logits(model, x, settings["flip"], settings["shift"], device)
    elif kind == "merlin":
        values = merlin_ratio(model, x, y, perturbations=settings["perturbations"],
                              sigma=settings["sigma"], seed=settings["seed"],
                              loss_clamp=settings["loss_clamp"], device=device)
    else:
        raise ValueError(f"unknown query kind {kind!r}; known: {list(QUERY_KINDS)}")
    return np.asarray(values, dtype=np.float32)
