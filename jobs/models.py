"""Model architectures by name, all Opacus-compatible (tanh, no BatchNorm).

The architectures are those of Tramèr & Boneh (2021), which the papers' DP-SGD seeds use.
"""

from __future__ import annotations

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


def _flat_size(features: nn.Module, input_shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *input_shape)).shape[1])


ARCHITECTURES: dict[str, Callable[[tuple[int, ...], int], nn.Module]] = {
    "mnist_cnn": mnist_cnn,
    "cifar10_cnn": cifar10_cnn,
}


#: Not a network: a mechanism with exactly known privacy that releases a noisy copy of each
#: record's membership bit (`jobs.mechanisms`), the "model" of the bound's self-check.
MEMBERSHIP_MECHANISM = "membership_mechanism"

MODEL_NAMES = (*ARCHITECTURES, MEMBERSHIP_MECHANISM)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return ARCHITECTURES[name](tuple(input_shape), num_classes)
