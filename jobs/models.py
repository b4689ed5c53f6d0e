"""Model architectures by name, all Opacus-compatible (tanh, no BatchNorm).

The architectures are those of Tramèr & Boneh (2021), which the papers' DP-SGD seeds use.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn


def mnist_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Tramèr–Boneh MNIST CNN: conv8×8(16,s2,p2) → pool(2,1) → conv4×4(32,s2) → pool(2,1) → fc32."""
    channels, height, width = input_shape
    features = nn.Sequential(
        nn.Conv2d(channels, 16, 8, stride=2, padding=2), nn.Tanh(), nn.MaxPool2d(2, 1),
        nn.Conv2d(16, 32, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1), nn.Flatten(),
    )
    flat = _flat_size(features, input_shape)
    return nn.Sequential(features, nn.Linear(flat, 32), nn.Tanh(), nn.Linear(32, num_classes))


def mnist_cnn_small(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Annamalai & De Cristofaro's MNIST CNN (their `SmallNetwork`, from Frisk's
    dp-not-all-noise-is-equal): conv5×5(16) → pool 2 → tanh → conv4×4(32) → pool 2 → tanh →
    fc32 → tanh → fc.  Not Tramèr–Boneh's `mnist_cnn` (8×8 stride-2 convolutions): the
    black-box audit's MNIST figures come from this one."""
    channels = input_shape[0]
    features = nn.Sequential(
        nn.Conv2d(channels, 16, 5), nn.MaxPool2d(2), nn.Tanh(),
        nn.Conv2d(16, 32, 4), nn.MaxPool2d(2), nn.Tanh(), nn.Flatten(),
    )
    flat = _flat_size(features, input_shape)
    return nn.Sequential(features, nn.Linear(flat, 32), nn.Tanh(), nn.Linear(32, num_classes))


def cifar10_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Tramèr–Boneh CIFAR-10 CNN: three blocks of two 3×3 convs (32, 64, 128) and a max-pool."""
    layers: list[nn.Module] = []
    channels = input_shape[0]
    for width in (32, 64, 128):
        layers += [
            nn.Conv2d(channels, width, 3, padding=1), nn.Tanh(),
            nn.Conv2d(width, width, 3, padding=1), nn.Tanh(), nn.MaxPool2d(2),
        ]
        channels = width
    features = nn.Sequential(*layers, nn.Flatten())
    flat = _flat_size(features, input_shape)
    return nn.Sequential(features, nn.Linear(flat, 128), nn.Tanh(), nn.Linear(128, num_classes))


def tanh_mlp64(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Long, Bindschaedler & Gunter's PDTP network: flatten → fc64 → tanh → fc."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 64), nn.Tanh(),
                         nn.Linear(64, num_classes))


def logistic_regression(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Long, Bindschaedler & Gunter's logistic regression: flatten → one linear layer."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def relu_mlp256x2(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Jayaraman et al.'s MLP: flatten → fc256 → ReLU → fc256 → ReLU → fc."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(math.prod(input_shape), 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, num_classes),
    )


def _flat_size(features: nn.Module, input_shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *input_shape)).shape[1])


ARCHITECTURES: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {
    "mnist_cnn": mnist_cnn,
    "mnist_cnn_small": mnist_cnn_small,
    "cifar10_cnn": cifar10_cnn,
    "tanh_mlp64": tanh_mlp64,
    "logistic_regression": logistic_regression,
    "relu_mlp256x2": relu_mlp256x2,
}


#: Not a network: a mechanism with exactly known privacy that releases a noisy copy of each
#: record's membership bit (`jobs.audits.mechanisms`), the "model" of the bound's self-check.
MEMBERSHIP_MECHANISM = "membership_mechanism"

MODEL_NAMES = (*ARCHITECTURES, MEMBERSHIP_MECHANISM)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return ARCHITECTURES[name](tuple(input_shape), num_classes)
