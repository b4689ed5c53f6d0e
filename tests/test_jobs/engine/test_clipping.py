"""The per-sample clipping engine against Opacus's own answer, and its DP step against σ·C.

The reference for the clipped sum is Opacus's `GradSampleModule` (hooks mode): it materialises
every record's gradient, and Opacus's `DPOptimizer.clip_and_accumulate` rule is applied to
those, written out in `testkit.opacus_reference`.  The engine never materialises most of them,
so equality to 1e-5 is evidence that each layer's rule (ghost norms, grouped convolutions,
book-keeping) computes the same thing.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import chi2
from torch import nn

from jobs.datasets import load_dataset
from jobs.engine.accounting import PoissonSchedule
from jobs.engine.clipping import PerSampleClipper, check_supported
import jobs.engine.randomness as randomness
import jobs.engine.steps as steps
import jobs.engine.training as training
from jobs.engine.training import TrainSettings, train_model
from jobs.models import ARCHITECTURES, build_model
from testkit.opacus_reference import opacus_clipped_sum

CPU = torch.device("cpu")
SHAPES = {"mnist_cnn": (1, 28, 28), "mnist_cnn_small": (1, 28, 28), "cifar10_cnn": (3, 32, 32),
          "relu_mlp256x2": (60,), "tanh_mlp64": (107,), "logistic_regression": (107,)}


class _Toy(nn.Module):
    """conv → GroupNorm → a linear layer over a sequence → LayerNorm → linear: every rule,
    including the ghost-norm branch of sequences (T² ≤ the layer's parameters)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.seq = nn.Linear(8, 16)        # over 36 positions: T² = 1296 > 128 → materialised
        self.small = nn.Linear(16, 40)     # over 4 positions:  T² = 16 ≤ 640 → ghost
        self.layer_norm = nn.LayerNorm(40)
        self.head = nn.Linear(160, 5)

    def forward(self, x):
        h = torch.tanh(self.norm(self.conv(x)))                    # (B, 8, 6, 6)
        h = torch.tanh(self.seq(h.flatten(2).transpose(1, 2)))     # (B, 36, 16)
        h = h.reshape(len(x), 4, 9, 16).mean(2)                    # (B, 4, 16)
        h = self.layer_norm(torch.tanh(self.small(h)))             # (B, 4, 40)
        return self.head(h.flatten(1))


def _assert_matches_opacus(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    # A clip norm between the records' norms, so some are clipped and some are not.
    reference_norms, reference = opacus_clipped_sum(model, x, y, 1.0)
    max_grad_norm = float(reference_norms.median())
    _, reference = opacus_clipped_sum(model, x, y, max_grad_norm)

    clipper = PerSampleClipper(model, max_grad_norm)
    with clipper.watch():
        logits = model(x)
    norms = clipper.clip_and_sum(nn.functional.cross_entropy(logits, y, reduction="sum"))

    torch.testing.assert_close(norms, reference_norms, rtol=1e-5, atol=1e-6)
    clipped = (norms > max_grad_norm).sum().item()
    assert 0 < clipped < len(x)
    for parameter, expected in zip([p for p in model.parameters() if p.requires_grad], reference):
        scale = expected.abs().max().item()
        assert (parameter.grad - expected).abs().max().item() <= 1e-5 * max(scale, 1.0)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES) + ["toy"])
def test_clipped_sum_equals_opacus_per_sample_reference(name):
    torch.manual_seed(0)
    if name == "toy":
        model, x = _Toy(), torch.randn(9, 3, 6, 6)
    else:
        model, x = build_model(name, SHAPES[name], 10), torch.rand(9, *SHAPES[name])
    y = torch.randint(0, 5 if name == "toy" else 10, (len(x),))
    _assert_matches_opacus(model, x, y)


#: Linear stacks beside the shipped ones: no biases, a ReLU, and a `Flatten` over a 2-D record.
LINEAR_STACKS = {
    "no bias, relu, flatten": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(20, 16, bias=False),
                                                     nn.ReLU(), nn.Linear(16, 7, bias=False)),
                               (4, 5), 7),
    "one layer, no bias": (lambda: nn.Sequential(nn.Linear(12, 3, bias=False)), (12,), 3),
}


@pytest.mark.parametrize("name", ["logistic_regression", "relu_mlp256x2", "tanh_mlp64",
                                  *LINEAR_STACKS])
def test_closed_form_of_linear_stacks_equals_opacus(name):
    """A linear stack's DP step takes no autograd at all (`jobs.engine.linear_stack`): its norms and
    clipped sum in closed form are Opacus's per-sample reference, and the hooks' path's."""
    torch.manual_seed(0)
    if name in LINEAR_STACKS:
        make, shape, classes = LINEAR_STACKS[name]
        model = make()
    else:
        shape, classes = SHAPES[name], 10
        model = build_model(name, shape, classes)
    x, y = torch.rand(9, *shape), torch.randint(0, classes, (9,))
    reference_norms, _ = opacus_clipped_sum(model, x, y, 1.0)
    max_grad_norm = float(reference_norms.median())  # some records clipped, some not
    _, reference = opacus_clipped_sum(model, x, y, max_grad_norm)

    clipper = PerSampleClipper(model, max_grad_norm)
    assert clipper.closed_form
    norms = clipper.clip_and_sum_cross_entropy(x, y)
    torch.testing.assert_close(norms, reference_norms, rtol=1e-5, atol=1e-6)
    assert 0 < (norms > max_grad_norm).sum().item() < len(x)
    for parameter, expected in zip(model.parameters(), reference):
        scale = expected.abs().max().item()
        assert (parameter.grad - expected).abs().max().item() <= 1e-5 * max(scale, 1.0)
    _assert_matches_opacus(model, x, y)  # the general path (`watch`, `clip_and_sum`) agrees


def test_closed_form_only_for_linear_stacks_with_every_parameter_trainable():
    assert not PerSampleClipper(build_model("mnist_cnn", SHAPES["mnist_cnn"], 10), 1.0).closed_form
    frozen = build_model("tanh_mlp64", SHAPES["tanh_mlp64"], 2)
    frozen[1].bias.requires_grad_(False)
    assert not PerSampleClipper(frozen, 1.0).closed_form
    assert not PerSampleClipper(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), 1.0).closed_form


def test_closed_form_under_bf16_keeps_norms_and_sums_in_fp32():
    """Under bf16 autocast the closed form's passes run in bf16, its norms and sums in fp32,
    within bf16's precision of the fp32 ones (the bounds of the hooks' path's bf16 test)."""
    torch.manual_seed(0)
    model = build_model("relu_mlp256x2", (60,), 10)
    x, y = torch.rand(16, 60), torch.randint(0, 10, (16,))
    clipper = PerSampleClipper(model, 1.0)
    full = clipper.clip_and_sum_cross_entropy(x, y)
    full_sums = [p.grad.clone() for p in model.parameters()]
    half = clipper.clip_and_sum_cross_entropy(x, y, steps.autocast("bf16", CPU))
    assert half.dtype == torch.float32 and not torch.equal(half, full)
    torch.testing.assert_close(half, full, rtol=0.03, atol=0)
    for parameter, expected in zip(model.parameters(), full_sums):
        assert parameter.grad.dtype == torch.float32
        assert float((parameter.grad - expected).norm() / expected.norm()) < 0.15


class _Head(nn.Module):
    """`layer`, then a tanh and a linear head to 5 classes."""

    def __init__(self, layer: nn.Module, features: int):
        super().__init__()
        self.layer, self.head = layer, nn.Linear(features, 5)

    def forward(self, x):
        return self.head(torch.tanh(self.layer(x)).flatten(1))


# Each layer's clipped sum comes from its per-record gradients when those are no larger than its
# output gradient and input together (per record, against its trainable parameters), or, for a
# convolution on a CPU, when its norms would not take the Gram form or a record's receptive
# fields are at most 2^15 floats (`_cpu_method` gathers them); else from book-keeping.  The
# sizes, per record, worked out by hand:
PATHS = {
    # 3·8·9 + 8 = 224 parameters ≤ 8·36 output gradient + 3·36 input = 396: per-record gradients.
    "conv, per record": (lambda: nn.Conv2d(3, 8, 3, padding=1), (3, 6, 6), 8 * 36, True),
    # 16·16·9 + 16 = 2320 > 16·16 + 16·16 = 512, but its fields are 16 positions · 144 = 2304
    # floats: per-record gradients, gathered.
    "conv, small fields, per record": (lambda: nn.Conv2d(16, 16, 3, padding=1), (16, 4, 4),
                                       16 * 16, True),
    # 64·64·9 + 64 = 36 928 > 64·64 + 64·64 = 8192 and fields 64·576 = 36 864 floats, but 64
    # positions·(64 + 576) = 40 960 ≥ 64·576 = 36 864: its norms would be each record's weight
    # gradient (grouped convolution), so it keeps them.
    "conv, per record for the norms": (lambda: nn.Conv2d(64, 64, 3, padding=1), (64, 8, 8),
                                       64 * 64, True),
    # 256·32·9 + 32 = 73 760 > 32·16 + 256·36 = 9728 and fields 16·2304 = 36 864 floats:
    # book-keeping; 16 positions·(32 + 2304) = 37 376 < 32·2304 = 73 728, so its norms take the
    # Gram (ghost) form.
    "conv, book-keeping, Gram norms": (lambda: nn.Conv2d(256, 32, 3), (256, 6, 6), 32 * 16, False),
    # A linear layer on vectors: 20·30 + 30 = 630 > 20 + 30: book-keeping, ghost norms.
    "linear, book-keeping": (lambda: nn.Linear(20, 30), (20,), 30, False),
    # Over 12 positions: 4·6 + 6 = 30 ≤ 12·(4 + 6) = 120: per-record gradients.
    "linear sequence, per record": (lambda: nn.Linear(4, 6), (12, 4), 12 * 6, True),
    # Over 3 positions: 20·30 + 30 = 630 > 3·50 = 150: book-keeping, Gram norms (T² = 9 ≤ 600).
    "linear sequence, book-keeping": (lambda: nn.Linear(20, 30), (3, 20), 3 * 30, False),
    # GroupNorm's 2·6 affine parameters: always per record.
    "group norm, per record": (lambda: nn.GroupNorm(2, 6), (6, 3, 3), 6 * 9, True),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_per_layer_path_equals_opacus(path):
    """Each way a layer's clipped sum is taken, alone in front of a linear head, against
    Opacus's per-sample reference — and it is the path the sizes above say it is."""
    from jobs.engine.layer_rules import RULES
    from jobs.engine.layer_rules.base import Seen

    make, shape, features, keeps = PATHS[path]
    torch.manual_seed(1)
    layer = make()
    x = torch.randn(9, *shape)
    seen = Seen(layer, x)
    parameters = sum(p.numel() for p in layer.parameters())
    assert RULES[type(layer)].keeps_samples(seen, layer(x).detach(), parameters) is keeps
    _assert_matches_opacus(_Head(layer, features), x, torch.randint(0, 5, (9,)))


def test_a_book_keeping_convolution_without_gram_norms_equals_opacus(monkeypatch):
    """A GPU's path past `GPU_CHUNK_FLOATS` for a layer whose norms are not of Gram form: each
    record's weight gradient for its norm, slice by slice, then one weighted weight gradient
    for the sum (a CPU keeps such a layer's per-record gradients instead)."""
    from jobs.engine.layer_rules.conv2d import _Conv2dRule

    monkeypatch.setattr(_Conv2dRule, "keeps_samples", lambda self, seen, grad, parameters: False)
    monkeypatch.setattr("jobs.engine.layer_rules.conv2d.CHUNK_FLOATS", 40_000)  # a few records a slice
    torch.manual_seed(1)
    x = torch.randn(9, 64, 8, 8)
    _assert_matches_opacus(_Head(nn.Conv2d(64, 64, 3, padding=1), 64 * 64), x,
                           torch.randint(0, 5, (9,)))


@pytest.mark.parametrize("method", ["grouped", "unfold", "rows", "shifted"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_each_per_record_route_equals_opacus_in_either_layout(monkeypatch, method, layout):
    """A GPU's choices on this CPU — every convolution keeps per-record gradients, taken by
    each route `_fastest` can pick — with weights and activations stored NCHW or NHWC
    (`train.channels_last`): `cifar10_cnn`'s clipped sum and norms against Opacus's
    per-sample reference, computed on a contiguous copy of the same model."""
    import copy

    from jobs.engine.layer_rules.conv2d import METHODS, _Conv2dRule

    monkeypatch.setattr(_Conv2dRule, "keeps_samples", lambda self, seen, grad, parameters: True)
    taken = []
    monkeypatch.setattr(_Conv2dRule, "_weights", classmethod(
        lambda cls, module, a, g: (taken.append(module), METHODS[method](module, a, g))[1]))
    torch.manual_seed(0)
    model = build_model("cifar10_cnn", (3, 16, 16), 10)
    x, y = torch.rand(6, 3, 16, 16), torch.randint(0, 10, (6,))
    reference_norms, _ = opacus_clipped_sum(copy.deepcopy(model), x, y, 1.0)
    clip = float(reference_norms.median())
    _, reference = opacus_clipped_sum(copy.deepcopy(model), x, y, clip)
    if layout == "nhwc":
        model = model.to(memory_format=torch.channels_last)
    clipper = PerSampleClipper(model, clip)
    with clipper.watch():
        logits = model(x)
    norms = clipper.clip_and_sum(nn.functional.cross_entropy(logits, y, reduction="sum"))
    assert len(taken) == 6  # each convolution, by this route
    torch.testing.assert_close(norms, reference_norms, rtol=1e-5, atol=1e-6)
    for parameter, expected in zip(model.parameters(), reference):
        torch.testing.assert_close(parameter.grad, expected, rtol=1e-5, atol=1e-6)


GEOMETRIES = [  # (kernel, stride, padding, dilation, input H × W): non-square, lopsided,
    # padding ≥ kernel, dilated
    (3, 1, 1, 1, (7, 7)), ((2, 5), 1, (0, 2), 1, (6, 9)), ((5, 1), 1, (3, 0), 1, (5, 4)),
    ((4, 2), 1, (1, 3), 1, (8, 5)), (3, 1, 4, 1, (3, 3)), (3, 2, 1, 1, (7, 8)),
    ((4, 3), (2, 1), 0, 1, (9, 7)), (3, 1, 2, (2, 1), (9, 8)),
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("kernel, stride, padding, dilation, size", GEOMETRIES)
def test_every_per_record_route_is_each_records_own_gradient(kernel, stride, padding, dilation,
                                                             size, layout):
    """Each route `_fastest` or `_cpu_method` may pick, on geometries the shipped models do not
    have, against torch's own convolution backward run on one record at a time; a route
    refuses a geometry it cannot take (shifted products a stride, rows a dilation) rather than
    answer wrongly, and a CPU never picks one that refuses."""
    from jobs.engine.layer_rules.conv2d import METHODS, _cpu_method, takes

    torch.manual_seed(3)
    conv = nn.Conv2d(4, 6, kernel, stride=stride, padding=padding, dilation=dilation).double()
    a = torch.randn(3, 4, *size, dtype=torch.double)
    g = torch.randn_like(conv(a)).detach()
    expected = torch.stack([torch.autograd.grad((conv(a[i:i + 1]) * g[i:i + 1]).sum(), conv.weight)[0]
                            for i in range(len(a))])
    if layout == "nhwc":
        a, g = a.contiguous(memory_format=torch.channels_last), g.contiguous(memory_format=torch.channels_last)
    assert takes(_cpu_method(conv, g), conv)
    for method, take in METHODS.items():
        if not takes(method, conv):
            with pytest.raises(ValueError, match="no dilation"):
                take(conv, a, g)
            continue
        torch.testing.assert_close(take(conv, a, g), expected, rtol=1e-10, atol=1e-10, msg=method)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("kernel, stride, padding, dilation, size", GEOMETRIES)
def test_gram_norms_are_each_records_own_squared_norm(kernel, stride, padding, dilation, size,
                                                      layout):
    """The Gram form of the norms (`jobs.engine.layer_rules.conv2d.field_grams`: the input pixels'
    Gram phase by phase, summed over the kernel's offsets; the unfolded fields' when dilated) on
    the same geometries, against the squared norm of torch's own per-record weight gradient."""
    from jobs.engine.layer_rules.conv2d import _Conv2dRule

    torch.manual_seed(4)
    conv = nn.Conv2d(4, 6, kernel, stride=stride, padding=padding, dilation=dilation).double()
    a = torch.randn(3, 4, *size, dtype=torch.double)
    g = torch.randn_like(conv(a)).detach()
    expected = torch.stack([torch.autograd.grad((conv(a[i:i + 1]) * g[i:i + 1]).sum(),
                                                conv.weight)[0].square().sum() for i in range(len(a))])
    if layout == "nhwc":
        a, g = a.contiguous(memory_format=torch.channels_last), g.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(_Conv2dRule._gram_norms(conv, a, g), expected, rtol=1e-10, atol=1e-10)


def _graph_nodes(tensor: torch.Tensor) -> list[str]:
    """The names of every autograd node behind `tensor`."""
    names, stack, visited = [], [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        names.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.mark.parametrize("name, taps", [("logistic_regression", 0), ("tanh_mlp64", 0),
                                         ("relu_mlp256x2", 0), ("mnist_cnn", 2)])
def test_only_layers_that_keep_per_record_gradients_get_a_tap(name, taps):
    """A tap (an autograd node after the layer) only where the layer keeps per-record gradients:
    `mnist_cnn`'s first convolution by the sizes per record (16·1·8·8 + 16 = 1040 parameters ≤
    16·13·13 output gradient + 28·28 input = 3488), its second on a CPU by its small receptive
    fields (25 positions · 256 floats ≤ 2^15, gathered); every linear layer on vectors
    book-keeps (in·out + out > in + out), and its output gradient is asked of autograd by its
    gradient edge.  The clipped sum on both paths is Opacus's."""
    torch.manual_seed(0)
    model = build_model(name, SHAPES[name], 10)
    x, y = torch.rand(9, *SHAPES[name]), torch.randint(0, 10, (9,))
    clipper = PerSampleClipper(model, 1.0)
    with clipper.watch():
        logits = model(x)
    assert _graph_nodes(logits).count("_TapBackward") == taps
    clipper.clip_and_sum(nn.functional.cross_entropy(logits, y, reduction="sum"))
    _assert_matches_opacus(model, x, y)


def test_layer_outputs_are_not_held_after_the_forward_pass():
    """Each layer's output (which a tanh after it does not save) is freed during the forward
    pass, as in a plain one: the engine keeps nothing of it, only its gradient later."""
    import weakref

    model = build_model("mnist_cnn", SHAPES["mnist_cnn"], 10)
    outputs = []
    for layer in (model[0][0], model[0][3]):  # the two convolutions, each followed by a tanh
        layer.register_forward_hook(lambda m, i, out: outputs.append(weakref.ref(out)))
    clipper = PerSampleClipper(model, 1.0)
    x, y = torch.rand(6, *SHAPES["mnist_cnn"]), torch.randint(0, 10, (6,))
    with clipper.watch():
        logits = model(x)
    assert len(outputs) == 2 and all(ref() is None for ref in outputs)
    clipper.clip_and_sum(nn.functional.cross_entropy(logits, y, reduction="sum"))
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("kernel, stride, padding", [(3, 1, 1), (4, 2, 0), (8, 2, 2), ((3, 2), (1, 2), (2, 0))])
def test_fast_unfold_is_torch_unfold(kernel, stride, padding):
    """The Gram form's strided-view unfold against torch's own im2col (`F.unfold`)."""
    from jobs.engine.layer_rules.conv2d import _Conv2dRule

    conv = nn.Conv2d(3, 4, kernel, stride=stride, padding=padding)
    x = torch.randn(5, 3, 11, 9)
    expected = nn.functional.unfold(x, conv.kernel_size, padding=conv.padding, stride=conv.stride)
    torch.testing.assert_close(_Conv2dRule._unfold(conv, x), expected, rtol=0, atol=0)


def test_layers_without_a_rule_are_refused_by_name():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.PReLU())
    problems = check_supported(model)
    assert len(problems) == 2
    assert "BatchNorm1d" in problems[0] and "PReLU" in problems[1]
    with pytest.raises(ValueError, match="no per-sample rule"):
        PerSampleClipper(model, 1.0)
    frozen = nn.Sequential(nn.Linear(4, 4), nn.PReLU())
    frozen[1].weight.requires_grad_(False)  # a frozen layer needs no rule
    assert check_supported(frozen) == []


def test_noise_has_standard_deviation_sigma_times_c():
    """An empty Poisson batch leaves only the noise: with plain SGD at lr 1, each weight moves
    by −N(0, σ²C²)/B_expected.  The sample variance of the n coordinates is tested against
    σ²C² with a two-sided χ² interval whose false-failure rate is 1e-6."""
    torch.manual_seed(0)
    model = build_model("mnist_cnn", (1, 28, 28), 10)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    sigma, clip, expected_batch = 1.3, 0.7, 37
    rng = randomness.TrainingRng(seed=5, device=CPU)
    empty_x, empty_y = torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long)
    steps.clipped_sum(model, PerSampleClipper(model, clip), empty_x, empty_y)
    steps.noisy_step(model, optimizer, sigma * clip, expected_batch, rng)
    noise = torch.cat([((b - p.detach()) * expected_batch).flatten()
                       for b, p in zip(before, model.parameters())]).double().numpy()
    n = noise.size
    statistic = (noise ** 2).sum() / (sigma * clip) ** 2  # mean is 0 by construction: n d.o.f.
    assert chi2.ppf(5e-7, n) < statistic < chi2.ppf(1 - 5e-7, n)
    assert abs(noise.mean()) < 5.3 * sigma * clip / math.sqrt(n)  # |z| < 5.3: p ≈ 1e-7


def test_poisson_batches_follow_opacus_schedule():
    """q = 1/⌈|D|/batch⌉, 1/q steps an epoch, divisor int(|D|·q) (Opacus's make_private), and
    each record in each batch independently with probability q."""
    schedule = PoissonSchedule(size=1000, batch_size=128)
    assert schedule.steps_per_epoch == 8 and schedule.sample_rate == 1 / 8
    assert schedule.expected_batch_size == 125
    rng = randomness.TrainingRng(seed=1, device=CPU)
    counts = np.zeros(1000)
    epochs = 50
    for _ in range(epochs):
        for batch in randomness.epoch_batches(rng, 1000, 128, schedule):
            counts[batch.numpy()] += 1
    draws = epochs * schedule.steps_per_epoch  # each record's count is Binomial(400, 1/8)
    assert abs(counts.mean() - draws / 8) < 5 * math.sqrt(draws / 8 * 7 / 8 / 1000)
    assert counts.var() == pytest.approx(draws / 8 * 7 / 8, rel=0.15)


def test_noise_calibration_is_cached_and_read_back():
    class Cache(dict):
        def put(self, key, value):
            self[key] = value

    settings = TrainSettings(model="tanh_mlp64", epochs=3, batch_size=50, lr=0.1, momentum=0.0,
                             max_grad_norm=1.0, accountant="rdp", epsilon=2.0, delta=1e-5)
    cache = Cache()
    sigma = training.calibrate_noise(settings, 0.1, cache)
    assert list(cache.values()) == [sigma]
    key = next(iter(cache))
    cache[key] = 123.0  # a stored answer wins over searching again
    assert training.calibrate_noise(settings, 0.1, cache) == 123.0


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return load_dataset("digits", tmp_path_factory.mktemp("data"), False, test_size=400)


def _opacus_accuracy(settings: TrainSettings, data, mask, seed: int) -> float:
    """The same recipe trained by Opacus's own PrivacyEngine (Poisson loader, hooks mode)."""
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(seed)
    model = build_model(settings.model, data.input_shape, data.num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum)
    loader = DataLoader(TensorDataset(torch.tensor(data.pool_x[mask]), torch.tensor(data.pool_y[mask])),
                        batch_size=settings.batch_size)
    sigma = training.calibrate_noise(settings, 1 / len(loader))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = PrivacyEngine(accountant="rdp").make_private(
            module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
            max_grad_norm=settings.max_grad_norm, poisson_sampling=True)
        for _ in range(settings.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
    with torch.no_grad():
        predicted = model(torch.tensor(data.test_x)).argmax(1).numpy()
    return float((predicted == data.test_y).mean())


def test_engine_and_opacus_reach_the_same_accuracy(digits):
    """Six seeds each on scikit-learn's digits at ε = 2: the two mean test accuracies differ by
    less than 4 standard errors of their difference (plus 1 point for the finite seeds)."""
    settings = TrainSettings(model="tanh_mlp64", epochs=8, batch_size=64, lr=0.5, momentum=0.9,
                             max_grad_norm=1.0, accountant="rdp", epsilon=2.0, delta=1e-5,
                             eval_every=0)
    mask = np.random.default_rng(0).random(len(digits.pool_y)) < 0.8
    ours = [train_model(settings, digits, mask, seed, CPU).test_accuracy for seed in range(6)]
    theirs = [_opacus_accuracy(settings, digits, mask, seed) for seed in range(6)]
    assert min(ours) > 0.5 and min(theirs) > 0.5  # both learn (chance is 0.1)
    spread = math.sqrt(np.var(ours, ddof=1) / 6 + np.var(theirs, ddof=1) / 6)
    assert abs(np.mean(ours) - np.mean(theirs)) < 4 * spread + 0.01
