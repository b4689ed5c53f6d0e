"""Questions an attack asks a stored model beyond its logits on the pool.

Why a separate step.  Some attacks need the model itself, not just its stored logits: LiRA with
query augmentations (the logits of flipped and shifted copies of each record), Merlin (the loss
under random input perturbations), RMIA (the logits of held-out records, its population z,
beside the evaluation records' in the same views) and QMIA (held-out records' logits and inputs,
its regressor's public non-members).  Answering them from the stored weights, as
their own content-keyed artifacts, means adding such an attack to a finished sweep trains
nothing: it only loads each model once more and asks.  Queries cover the evaluation records, except those whose
kind says `whole_pool` (PDTP's leave-one-out, over the training set) or `held_out` (the
held-out records after them).

Each kind registers itself in `QUERIES` where its answer is defined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

from jobs.attacks.merlin import merlin_ratio
from jobs.engine.training import predict_logits
from jobs.registry import Registry

#: (settings, model, x, y, device) → the answer for records (x, y), from the stored weights.
Answer = Callable[[dict[str, Any], torch.nn.Module, np.ndarray, np.ndarray, torch.device], np.ndarray]


@dataclass(frozen=True)
class QueryKind:
    """A registered kind of question put to a stored model."""

    # How it is answered from the model's weights; None for a kind answered by retraining
    # (PDTP: `sweeper.cluster.tasks.query_task` answers it with `jobs.attacks.pdtp.pdtp_table`).
    answer: Optional[Answer]
    # Asked about the model's whole training pool, not the evaluation records: the number of
    # evaluation records, which it does not read, then stays out of its key.
    whole_pool: bool = False
    # Transforms images (flips, shifts): records of shape (channels, height, width) only.
    images_only: bool = False
    # Asked about the evaluation records followed by the first `settings["held_out"]` records of
    # the dataset's held-out (test) split, which no model trains on: RMIA's population z.
    held_out: bool = False


#: Every query kind, by the name attacks ask it by (`jobs.attacks.contract.Attack.asks`).
QUERIES: Registry[QueryKind] = Registry("query kind")

#: PDTP's leave-one-out table: retrains rather than loads the model, over its whole pool.
PDTP_QUERY = "pdtp"
QUERIES.add(PDTP_QUERY, QueryKind(answer=None, whole_pool=True))


def register_query(name: str, images_only: bool = False,
                   held_out: bool = False) -> Callable[[Answer], Answer]:
    """Decorator: register the answering function as query kind `name` (evaluation records,
    and with `held_out` the held-out records after them)."""
    def register(answer_fn: Answer) -> Answer:
        QUERIES.add(name, QueryKind(answer_fn, images_only=images_only, held_out=held_out))
        return answer_fn
    return register


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


@register_query("augmented_logits", images_only=True)
def _answer_augmented_logits(settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
                             y: np.ndarray, device: torch.device) -> np.ndarray:
    return augmented_logits(model, x, settings["flip"], settings["shift"], device)


@register_query("held_out_logits", held_out=True)
def _answer_held_out_logits(settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
                            y: np.ndarray, device: torch.device) -> np.ndarray:
    """(1, records, classes): the logits of the evaluation and held-out records, one view."""
    return predict_logits(model, x, device)[None]


@register_query("held_out_logits_and_inputs", held_out=True)
def _answer_held_out_logits_and_inputs(settings: dict[str, Any], model: torch.nn.Module,
                                       x: np.ndarray, y: np.ndarray, device: torch.device) -> np.ndarray:
    """(1, records, classes + features): each record's logits, then its flattened input (what
    QMIA's regressor reads, `jobs.attacks.qmia`), for the evaluation and held-out records."""
    return np.hstack([predict_logits(model, x, device), x.reshape(len(x), -1)])[None]


@register_query("held_out_augmented_logits", images_only=True, held_out=True)
def _answer_held_out_augmented_logits(settings: dict[str, Any], model: torch.nn.Module,
                                      x: np.ndarray, y: np.ndarray, device: torch.device) -> np.ndarray:
    """(views, records, classes): every augmented view of the evaluation and held-out records."""
    return augmented_logits(model, x, settings["flip"], settings["shift"], device)


@register_query("merlin")
def _answer_merlin(settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
                   y: np.ndarray, device: torch.device) -> np.ndarray:
    return merlin_ratio(model, x, y, perturbations=settings["perturbations"],
                        sigma=settings["sigma"], seed=settings["seed"],
                        loss_clamp=settings["loss_clamp"], device=device)


def answer(kind: str, settings: dict[str, Any], model: torch.nn.Module, x: np.ndarray,
           y: np.ndarray, device: torch.device) -> np.ndarray:
    """The answer of query `kind` for records (x, y), as one float32 array."""
    answer_fn = QUERIES[kind].answer
    if answer_fn is None:
        raise ValueError(f"query kind {kind!r} is answered by retraining, not from a model's weights")
    return np.asarray(answer_fn(settings, model, x, y, device), dtype=np.float32)
