"""Made-up data: stand-ins of any shape for smoke runs, and the featureless membership bits."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from jobs.datasets.core import ArrayDataset
from jobs.datasets.dataset_registry import register_dataset

#: Per-class prototypes plus noise, as far apart whatever the shape: two classes' means are
#: 2·SEPARATION noise standard deviations apart, so the true means would (almost) never confuse
#: two classes; what is left to learn is the means themselves from few records in many
#: dimensions (nearest class mean from 20 records per class: ~100 % for 10 classes of 1×28×28
#: or 3×32×32, ~96 % for 100 classes of 600 features, ~70 % for 100 classes of 6 169).
#: Images (any shape of two or more axes): a blocky prototype (BLOCK×BLOCK-pixel blocks of unit
#: variance) around grey 0.5 plus Gaussian noise of NOISE per pixel, clipped to [0, 1].
#: Tabular shapes (d,): binary features, each class favouring a FAVOURED share of them (on with a
#: higher probability than the others' OFF), like the purchase histories of Purchase-100 or the
#: binary attributes of Texas-100.
SEPARATION, NOISE, BLOCK = 6.0, 0.25, 4
FAVOURED, OFF = 0.1, 0.05
#: Records generated per draw (bounds the memory of a draw; prefixes do not depend on it).
CHUNK = 1024


def synthetic_dataset(name: str, input_shape: Sequence[int], num_classes: int, pool_size: int,
                      test_size: int, seed: int = 0) -> ArrayDataset:
    """Deterministic, learnable data of exactly `input_shape`, float32, labels int64.

    The same arguments give the same arrays; the pool of a smaller `pool_size` is a prefix of a
    larger one's, and the test set does not depend on `pool_size`, so a grid that needs fewer
    records sees the same ones.  Labels are balanced: each run of `num_classes` consecutive
    records holds every class once.  Classes differ by their prototype, so a classifier (even
    the nearest class mean) does far better than chance.
    """
    shape = tuple(int(size) for size in input_shape)
    if not shape or min(shape) < 1 or num_classes < 1 or pool_size < 1 or test_size < 0:
        raise ValueError(f"synthetic data needs a non-empty input_shape of positive sizes, classes "
                         f"and a pool: input_shape={list(shape)}, num_classes={num_classes}, "
                         f"pool_size={pool_size}, test_size={test_size}")
    root = np.random.SeedSequence([int(seed) % 2**64, zlib.crc32(name.encode()), num_classes, *shape])
    prototype_seed, pool_seed, test_seed = root.spawn(3)
    prototypes = _prototypes(np.random.default_rng(prototype_seed), shape, num_classes)
    pool_x, pool_y = _records(pool_seed, prototypes, pool_size)
    test_x, test_y = _records(test_seed, prototypes, test_size)
    return ArrayDataset(name, pool_x, pool_y, test_x, test_y, num_classes=num_classes)


def _prototypes(rng: np.random.Generator, shape: tuple[int, ...], num_classes: int) -> np.ndarray:
    size = int(np.prod(shape))
    if len(shape) == 1:  # tabular: each class's probability of each feature being on
        # Two classes differ on about 2·FAVOURED·(1 − FAVOURED)·d features, each by `lift`.
        differing = 2 * FAVOURED * (1 - FAVOURED) * size
        lift = min(1 - OFF, 2 * SEPARATION * np.sqrt(OFF * (1 - OFF) / differing))
        favoured = rng.random((num_classes, *shape)) < FAVOURED
        return np.where(favoured, OFF + lift, OFF).astype(np.float32)
    *outer, height, width = shape
    coarse = rng.standard_normal((num_classes, *outer, -(-height // BLOCK), -(-width // BLOCK)))
    fine = coarse.repeat(BLOCK, axis=-2).repeat(BLOCK, axis=-1)[..., :height, :width]
    # Two prototypes differ by about amplitude·√(2·size) in Euclidean distance.
    amplitude = 2 * SEPARATION * NOISE / np.sqrt(2 * size)
    return (0.5 + amplitude * fine).astype(np.float32)


def _records(seed: np.random.SeedSequence, prototypes: np.ndarray, count: int):
    label_rng, noise_rng = (np.random.default_rng(child) for child in seed.spawn(2))
    num_classes, *shape = prototypes.shape
    blocks = -(-count // num_classes)
    y = np.concatenate([label_rng.permutation(num_classes) for _ in range(blocks)])[:count]
    x = np.empty((count, *shape), np.float32)
    for start in range(0, count, CHUNK):
        labels = y[start:start + CHUNK]
        if len(shape) == 1:
            x[start:start + CHUNK] = noise_rng.random((len(labels), *shape), np.float32) < prototypes[labels]
        else:
            noise = noise_rng.standard_normal((len(labels), *shape), np.float32)
            np.clip(prototypes[labels] + NOISE * noise, 0.0, 1.0, out=x[start:start + CHUNK])
    return x, y.astype(np.int64)


#: `dataset.name=synthetic` without `dataset.synthetic=true`: MNIST-shaped, 10 classes.
SYNTHETIC_SHAPE, SYNTHETIC_CLASSES, SYNTHETIC_POOL = (1, 28, 28), 10, 10_000


@register_dataset("synthetic", input_shape=SYNTHETIC_SHAPE, num_classes=SYNTHETIC_CLASSES,
                  fixed_pool=SYNTHETIC_POOL)
def load_synthetic(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """The `synthetic` dataset: `synthetic_dataset` of SYNTHETIC_SHAPE, seed 0.

    A sweep with `dataset.synthetic=true` does not come here: it passes its own
    `dataset.input_shape` and `dataset.num_classes` to `synthetic_dataset`.
    """
    return synthetic_dataset("synthetic", SYNTHETIC_SHAPE, SYNTHETIC_CLASSES, SYNTHETIC_POOL, test_size)


# --- membership bits: records that carry nothing but whether they were drawn -----------------

#: Pool size of `membership_bits` before `dataset.pool_size` cuts it.
MEMBERSHIP_POOL = 100_000


@register_dataset("membership_bits", input_shape=(1,), num_classes=1, fixed_pool=MEMBERSHIP_POOL)
def load_membership_bits(data_dir: Path, download: bool, test_size: int) -> ArrayDataset:
    """Featureless records for the bound's self-check (`+experiment=bound_check`).

    A mechanism whose privacy is known exactly sees only each record's membership bit, so the
    records need no content: one constant feature keeps the arrays' shapes uniform.
    """
    return ArrayDataset("membership_bits", np.zeros((MEMBERSHIP_POOL, 1), np.float32),
                        np.zeros(MEMBERSHIP_POOL, np.int64), np.zeros((test_size, 1), np.float32),
                        np.zeros(test_size, np.int64), num_classes=1)
