"""PDTP (Long et al.): binning and the metric on hand values, leave-one-out end to end on real
training (logistic regression through jobs.engine.training, with and without Opacus), and the
parameter counts of the architectures added for Long et al. and Jayaraman et al."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import jobs.attacks.pdtp as pdtp_module
from jobs.attacks.pdtp import DTP_THRESHOLD, PdtpResult, binned, leave_one_out, pdtp
from jobs.datasets import ArrayDataset
from jobs.engine.training import TrainSettings
from jobs.models import build_model

CPU = torch.device("cpu")


# --- architectures -------------------------------------------------------------------------

def parameters(name: str, input_shape: tuple[int, ...], classes: int) -> int:
    return sum(p.numel() for p in build_model(name, input_shape, classes).parameters())


def test_tanh_mlp64_has_one_hidden_layer_of_64():
    # 108 features → 64 tanh → 2: weights 108·64 + bias 64, then 64·2 + 2 = 6912 + 64 + 128 + 2.
    assert parameters("tanh_mlp64", (108,), 2) == 108 * 64 + 64 + 64 * 2 + 2 == 7106


def test_logistic_regression_is_one_linear_layer_on_the_flattened_input():
    # 1×28×28 flattens to 784; 784·10 weights + 10 biases.
    assert parameters("logistic_regression", (1, 28, 28), 10) == 784 * 10 + 10 == 7850
    assert parameters("logistic_regression", (108,), 2) == 108 * 2 + 2 == 218


def test_relu_mlp256x2_has_two_hidden_layers_of_256():
    # Purchase-100: 600 features → 256 → 256 → 100.
    # 600·256 + 256 = 153 856; 256·256 + 256 = 65 792; 256·100 + 100 = 25 700; sum 245 348.
    assert parameters("relu_mlp256x2", (600,), 100) == (
        600 * 256 + 256 + 256 * 256 + 256 + 256 * 100 + 100) == 245_348


def test_new_architectures_have_no_batchnorm_and_give_logits():
    for name in ("tanh_mlp64", "logistic_regression", "relu_mlp256x2"):
        model = build_model(name, (2, 3), 4)
        assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
        assert model(torch.zeros(5, 2, 3)).shape == (5, 4)


# --- binning and the metric on hand values --------------------------------------------------

def test_binned_returns_bin_centres():
    got = binned(np.array([0.0, 0.004, 0.01, 0.123, 0.29, 0.5, 0.9, 0.99, 0.9999, 1.0]))
    # 0 → first bin [0, .01) → .005; .01 starts the second bin → .015; .29 starts [.29, .30)
    # (not bin 28 although .29·100 = 28.999… in floating point); 1.0 lies in the last, closed bin
    # [.99, 1] → .995, as .99 and .9999 do.
    want = [0.005, 0.005, 0.015, 0.125, 0.295, 0.505, 0.905, 0.995, 0.995, 0.995]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_pdtp_on_hand_values():
    p_with = np.array([[0.9, 0.1], [0.3, 0.7], [0.0, 1.0]])
    p_without = np.array([[0.5, 0.5], [0.3, 0.7], [1.0, 0.0]])
    got = pdtp(p_with, p_without)
    # Row 0: binned [.905, .105] vs [.505, .505]; |ln .905 − ln .505| = ln(905/505) ≈ 0.5834,
    # |ln .105 − ln .505| = ln(505/105) = ln(101/21) ≈ ln 4.8095 ≈ 1.5706 → 1.5706.
    # Row 1: same bins → 0.  Row 2: [.005, .995] vs [.995, .005] → ln(.995/.005) = ln 199 ≈ 5.2933,
    # the largest value binning allows.
    np.testing.assert_allclose(got, [1.5706, 0.0, 5.2933], atol=1e-4)
    assert got[0] == pytest.approx(math.log(101 / 21), abs=1e-12)
    assert got[2] == pytest.approx(math.log(199), abs=1e-12)


def test_pdtp_is_symmetric_and_rejects_mismatched_shapes():
    a, b = np.array([[0.2, 0.8]]), np.array([[0.6, 0.4]])
    assert pdtp(a, b) == pdtp(b, a)
    with pytest.raises(ValueError):
        pdtp(np.ones((2, 2)) / 2, np.ones((2, 3)) / 3)


# --- leave-one-out end to end ---------------------------------------------------------------

OUTLIER = 1  # pool index of the planted outlier: the first member after the non-member at 0


def synthetic(pool: int = 60, test: int = 20) -> ArrayDataset:
    """Two Gaussian blobs on features 0–6 (class 1 shifted by +1.5); feature 7 is 0 everywhere
    except on the outlier, which sits in the class-0 blob with label 1 and feature 7 = 4. A
    linear model can fit it only through the weight on feature 7, which no other record trains:
    it memorizes the outlier, and without it the weight stays near its initialization."""
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(pool + test, 8)).astype(np.float32)
    y = (np.arange(pool + test) % 2).astype(np.int64)
    x[:, :7] += 1.5 * y[:, None]
    x[:, 7] = 0.0
    y[OUTLIER] = 1
    x[OUTLIER, :7] = -0.75  # deep in class 0's blob (its mean is 0, class 1's is 1.5)
    x[OUTLIER, 7] = 4.0
    return ArrayDataset("synthetic", x[:pool], y[:pool], x[pool:], y[pool:], num_classes=2)


def member_mask(pool: int = 60) -> np.ndarray:
    mask = np.ones(pool, dtype=bool)
    mask[::3] = False  # indices 0, 3, 6, … are non-members, so the first members are 1, 2, 4, 5, …
    return mask


def lr_settings(epsilon: float) -> TrainSettings:
    return TrainSettings(model="logistic_regression", epochs=30, batch_size=10, lr=0.2, momentum=0.9,
                         max_grad_norm=1.0, accountant="rdp", epsilon=epsilon,
                         delta=1e-5 if math.isfinite(epsilon) else None)


@pytest.fixture(scope="module")
def non_private():
    """leave_one_out on 8 members × 3 seeds, every train_model call recorded."""
    data, mask = synthetic(), member_mask()
    calls = []
    real = pdtp_module.train_model

    def spy(settings, data, train_mask, seed, device, checkpoint=None, public_size=None):
        calls.append((train_mask.copy(), seed, public_size))
        return real(settings, data, train_mask, seed, device, checkpoint, public_size=public_size)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pdtp_module, "train_model", spy)
        result = leave_one_out(lr_settings(math.inf), data, mask, records=8, seeds=[0, 1, 2],
                               device=CPU, public_size=PUBLIC_SIZE)
    return result, calls, mask


#: The target's public size, which every retrain must keep: one record fewer must not change
#: DP-SGD's rate or divisor (`jobs.engine.accounting.rate_size`).
PUBLIC_SIZE = 77


def test_every_retrain_keeps_the_targets_public_size(non_private):
    _, calls, _ = non_private
    assert {public for _, _, public in calls} == {PUBLIC_SIZE}


def test_leave_one_out_shapes_and_ranges(non_private):
    result, _, _ = non_private
    assert isinstance(result, PdtpResult)
    for field in (result.record_ids, result.single, result.averaged, result.seed_mean):
        assert field.shape == (8,)
    for values in (result.single, result.averaged):
        assert np.all(np.isfinite(values)) and np.all(values >= 0)
        assert np.all(values <= math.log(199) + 1e-12)


def test_only_members_are_left_out_and_full_models_are_trained_once_per_seed(non_private):
    result, calls, mask = non_private
    # The first 8 members in pool order, skipping the non-members 0, 3, 6, 9.
    assert result.record_ids.tolist() == [1, 2, 4, 5, 7, 8, 10, 11]
    assert mask[result.record_ids].all()
    full = [seed for train_mask, seed, _ in calls if (train_mask == mask).all()]
    assert sorted(full) == [0, 1, 2]  # one full model per seed, shared by all records
    left_out = []
    for train_mask, seed, _ in calls:
        if (train_mask == mask).all():
            continue
        removed = np.flatnonzero(mask & ~train_mask)
        assert not (train_mask & ~mask).any() and len(removed) == 1  # a member removed, nothing added
        left_out.append((int(removed[0]), seed))
    # 3 seeds × 8 members, each (member, seed) once, and no non-member ever "removed" (a no-op
    # that with the same seed would just retrain the full model).
    assert sorted(left_out) == sorted((r, s) for r in result.record_ids.tolist() for s in (0, 1, 2))
    assert len(calls) == 3 * (8 + 1)


def test_the_memorized_outlier_has_the_largest_pdtp(non_private):
    result, _, _ = non_private
    outlier = result.record_ids.tolist().index(OUTLIER)
    ordinary = np.delete(result.averaged, outlier)
    assert result.averaged[outlier] > np.median(result.averaged)
    # ≥, not >: on 40 training records an ordinary record can also reach the cap ln 199 (a tie).
    assert result.averaged[outlier] >= ordinary.max(), result.averaged
    assert result.averaged[outlier] > DTP_THRESHOLD and result.single[outlier] > DTP_THRESHOLD
    # Ordinary records may be flagged too (here three of seven, PDTP ≈ 2.5–3.3): on 40 training
    # records a confident model's minority-class probability moves between the first bins when
    # one record goes, and .005 → .025 is already ln 5 ≈ 1.6. The outlier's full model puts
    # ≥ .99 on its label and the leave-one-out model ≤ .01, near the cap ln 199 ≈ 5.29.
    assert result.averaged[outlier] > 5.0


def test_removing_a_non_member_would_retrain_the_same_model():
    # Why non-members are never candidates: with the same seed their "leave-one-out" training set
    # is the full one, training is deterministic on CPU, so the PDTP would be exactly 0.
    data, mask = synthetic(), member_mask()
    settings = dataclasses.replace(lr_settings(math.inf), epochs=3)
    without = mask.copy()
    without[0] = False  # pool record 0 is a non-member: nothing changes
    first = pdtp_module.train_model(settings, data, mask, 5, CPU).pool_logits
    again = pdtp_module.train_model(settings, data, without, 5, CPU).pool_logits
    np.testing.assert_array_equal(first, again)
    probs = torch.softmax(torch.as_tensor(first[:1], dtype=torch.float64), dim=1).numpy()
    assert pdtp(probs, probs)[0] == 0.0


def test_leave_one_out_runs_under_dp_sgd():
    data, mask = synthetic(), member_mask()
    result = leave_one_out(lr_settings(1.0), data, mask, records=2, seeds=[0, 1], device=CPU)
    assert result.record_ids.tolist() == [1, 2]
    assert np.all(np.isfinite(result.single)) and np.all(np.isfinite(result.averaged))
    assert np.all(result.single >= 0) and np.all(result.averaged >= 0)


def test_leave_one_out_refuses_more_records_than_members():
    mask = np.zeros(60, dtype=bool)
    mask[:3] = True
    with pytest.raises(ValueError, match="only 3 members"):
        leave_one_out(lr_settings(math.inf), synthetic(), mask, records=4, seeds=[0], device=CPU)


# --- the three estimates on a hand probability table (issue 12, item 6) ----------------------

#: (seeds, records, classes): two seeds, two measured records.  Record 0's seed noise swaps the
#: full and leave-one-out outputs between the seeds; record 1 moves a little, under seed 1 only.
FULL = np.array([[[0.9, 0.1], [0.3, 0.7]],
                 [[0.5, 0.5], [0.2, 0.8]]])
LOO = np.array([[[0.5, 0.5], [0.3, 0.7]],
                [[0.9, 0.1], [0.1, 0.9]]])


def hand_estimates():
    """By hand, on bin centres (0.9 → .905, 0.1 → .105, 0.5 → .505, 0.2 → .205, …).

    Record 0, seed 0: [.905, .105] vs [.505, .505]: max(ln 905/505, ln 505/105) = ln(101/21).
    Seed 1 is the same pair swapped: ln(101/21) again.  Mean over seeds (the paper's): ln(101/21)
    ≈ 1.571 > 1, flagged.  Seed-averaged probabilities: [0.7, 0.3] both → PDTP 0, not flagged.
    Record 1, seed 0: equal → 0.  Seed 1: [.205, .805] vs [.105, .905]: max(ln 205/105,
    ln 905/805) = ln(41/21) ≈ 0.669.  Mean over seeds: ln(41/21)/2 ≈ 0.334.  Seed-averaged:
    [0.25, 0.75] vs [0.2, 0.8] → [.255, .755] vs [.205, .805]: max(ln 255/205, ln 805/755) =
    ln(51/41) ≈ 0.218.  Single (seed 0): [ln(101/21), 0].
    """
    single = [math.log(101 / 21), 0.0]
    averaged = [0.0, math.log(51 / 41)]
    seed_mean = [math.log(101 / 21), math.log(41 / 21) / 2]
    return single, averaged, seed_mean


def test_estimates_on_a_hand_probability_table():
    single, averaged, seed_mean = pdtp_module.estimates(FULL, LOO)
    want_single, want_averaged, want_seed_mean = hand_estimates()
    np.testing.assert_allclose(single, want_single, rtol=0, atol=1e-12)
    np.testing.assert_allclose(averaged, want_averaged, rtol=0, atol=1e-12)
    np.testing.assert_allclose(seed_mean, want_seed_mean, rtol=0, atol=1e-12)
    # Before issue 12 only `averaged` existed: DTP-1 share 0 of 2 where the paper's estimator
    # flags 1 of 2 (the seed noise the paper's average keeps in).
    print(f"\nPDTP per record: seed-averaged (ours) {np.round(averaged, 3).tolist()}, "
          f"mean over seeds (Long et al.) {np.round(seed_mean, 3).tolist()}; DTP-1 share "
          f"{(averaged > 1).mean():.2f} vs {(seed_mean > 1).mean():.2f}")


def test_pdtp_row_reports_the_papers_estimator_beside_ours():
    from sweeper.grid.plan import AttackSpec, Cell
    from sweeper.grid.cells import pdtp_row

    want_single, want_averaged, want_seed_mean = hand_estimates()
    table = np.column_stack([[4, 7], want_single, want_averaged, want_seed_mean])
    spec = AttackSpec("pdtp", "target-key", (), 10, (), queries=("pdtp-query-key",))
    cell = Cell("adult", "tanh_mlp64", math.inf, 1e-5, 0.5, math.nan, "pdtp", "quantile_max", 0,
                spec, 0.01, "derived", 0.05, ())
    meta = dict(test_accuracy=0.8, best_test_accuracy=0.8, train_accuracy=0.9, epsilon_spent=math.inf,
                noise_multiplier=0.0, steps=10, train_size=5)
    row = pdtp_row(cell, table, meta)
    assert row["pdtp_seed_mean"] == pytest.approx((math.log(101 / 21) + math.log(41 / 21) / 2) / 2)
    assert row["dtp1_share_seed_mean"] == 0.5  # record 0 only (1.571 > 1; 0.334 is not)
    assert row["pdtp_mean_averaged"] == pytest.approx(math.log(51 / 41) / 2)
    assert row["dtp1_share_averaged"] == 0.0
    assert row["pdtp_query_key"] == "pdtp-query-key"


def test_pdtp_table_carries_the_three_estimates():
    # The query answer's layout, which pdtp_row and the PDTP report read by position.
    settings = dataclasses.replace(lr_settings(math.inf), epochs=3)
    data, mask = synthetic(), member_mask()
    table = pdtp_module.pdtp_table(settings, data, mask, records=2, seeds=2, device=CPU)
    result = leave_one_out(settings, data, mask, records=2, seeds=[0, 1], device=CPU)
    assert table.shape == (2, 4)
    np.testing.assert_array_equal(table[:, 0], result.record_ids)
    np.testing.assert_allclose(table[:, 1:], np.column_stack(
        [result.single, result.averaged, result.seed_mean]), rtol=0, atol=0)
