"""The papers' architectures, checked by their parameter counts worked out by hand."""

from __future__ import annotations

from torch import nn

from jobs.models import build_model


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_tramer_boneh_mnist_cnn_has_26_010_parameters():
    # conv 8×8, 1 → 16: 16·64 + 16 = 1 040; 28×28 → (28 + 4 − 8)/2 + 1 = 13, pool(2, 1) → 12.
    # conv 4×4, 16 → 32: 32·256 + 32 = 8 224; 12 → (12 − 4)/2 + 1 = 5, pool(2, 1) → 4: 512 features.
    # fc 512 → 32: 16 416; fc 32 → 10: 330.  Total 26 010.
    assert parameters(build_model("mnist_cnn", (1, 28, 28), 10)) == 1_040 + 8_224 + 16_416 + 330


def test_tramer_boneh_cifar10_cnn_has_550_570_parameters():
    # conv 3×3 pairs: 3→32 (896), 32→32 (9 248), 32→64 (18 496), 64→64 (36 928),
    # 64→128 (73 856), 128→128 (147 584); three pools take 32×32 to 4×4: 2 048 features.
    # fc 2 048 → 128: 262 272; fc 128 → 10: 1 290.  Total 550 570.
    convs = 896 + 9_248 + 18_496 + 36_928 + 73_856 + 147_584
    assert parameters(build_model("cifar10_cnn", (3, 32, 32), 10)) == convs + 262_272 + 1_290


def test_no_model_uses_batch_norm():
    # Opacus cannot compute per-sample gradients through BatchNorm.
    for name, shape, classes in [("mnist_cnn", (1, 28, 28), 10), ("cifar10_cnn", (3, 32, 32), 100),
                                 ("relu_mlp256x2", (600,), 100), ("tanh_mlp64", (107,), 2),
                                 ("logistic_regression", (107,), 2)]:
        model = build_model(name, shape, classes)
        assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
