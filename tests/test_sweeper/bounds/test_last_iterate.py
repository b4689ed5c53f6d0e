"""The last iterate's heuristic ε (Steinke et al., ICLR 2025) against values derived apart from
the product code: the Gaussian mechanism's closed form at q = 1, the hockey-stick divergences
integrated numerically from the two densities at q < 1, and the orderings the paper states."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from sweeper.bounds import last_iterate_delta, last_iterate_epsilon


def gaussian_delta(eps, mu):
    """Balle & Wang's analytic Gaussian δ(ε) at μ, written out here."""
    return (stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def solve(delta_of, delta):
    """The least ε ≥ 0 with δ(ε) ≤ δ, by bisection of the given decreasing δ(ε)."""
    high = 1.0
    while delta_of(high) > delta:
        high *= 2.0
    return optimize.brentq(lambda e: delta_of(e) - delta, 0.0, high, xtol=1e-12, rtol=1e-13)


def integrated_delta(eps, sigma, q, steps):
    """max(∫(p − e^ε q)₊, ∫(q − e^ε p)₊) by adaptive quadrature of the densities themselves:
    p the mixture Σ_k Bin(k; T, q)·N(k, σ²T), q = N(0, σ²T).  No likelihood ratio: where each
    integrand changes sign is found on a grid and refined on the densities, and each piece
    between sign changes is integrated without a kink."""
    s, gamma = sigma * math.sqrt(steps), math.exp(eps)
    k = np.arange(steps + 1)
    weights = stats.binom.pmf(k, steps, q)

    norm = s * math.sqrt(2 * math.pi)

    def p(x):
        return float(np.exp(-((x - k) / s) ** 2 / 2) @ weights) / norm

    def q_(x):
        return math.exp(-(x / s) ** 2 / 2) / norm

    low, high = -15 * s, steps + 15 * s
    grid = np.linspace(low, high, 801)

    def positive_part(f):
        values = np.array([f(x) for x in grid])
        cuts = [optimize.brentq(f, a, b, xtol=1e-14) for a, b, fa, fb in
                zip(grid[:-1], grid[1:], values[:-1], values[1:]) if fa * fb < 0]
        edges = [low, *cuts, high]
        total = 0.0
        for a, b in zip(edges[:-1], edges[1:]):
            if f((a + b) / 2) > 0:
                total += integrate.quad(f, a, b, limit=500, epsabs=1e-16, epsrel=1e-12)[0]
        return total

    return max(positive_part(lambda x: p(x) - gamma * q_(x)),
               positive_part(lambda x: q_(x) - gamma * p(x)))


@pytest.mark.parametrize("sigma,steps", [(1.0, 100), (0.6, 30), (3.0, 1000)])
def test_full_batch_is_the_gaussian_mechanism(sigma, steps):
    mu = math.sqrt(steps) / sigma
    for delta in (1e-5, 1e-3):
        expected = solve(lambda e: gaussian_delta(e, mu), delta)
        assert last_iterate_epsilon(sigma, 1.0, steps, delta) == pytest.approx(expected,
                                                                                rel=1e-8)
    for eps in (0.5, 2.0):
        assert last_iterate_delta(eps, sigma, 1.0, steps) == pytest.approx(
            gaussian_delta(eps, mu), rel=1e-8)


def test_past_the_float_range_of_e_to_the_epsilon():
    """Issue 50: tiny noise drives ε past ≈ 709, where e^ε overflowed.  At q = 1 it is still
    the Gaussian mechanism's, solved here at 60 digits (mpmath); below, a finite number past
    709 where it raised OverflowError."""
    import mpmath

    mpmath.mp.dps = 60
    sigma, delta = 0.025, 1e-5
    mu = mpmath.mpf(1) / mpmath.mpf(sigma)

    def gaussian(eps):
        return (mpmath.ncdf(-eps / mu + mu / 2)
                - mpmath.exp(eps) * mpmath.ncdf(-eps / mu - mu / 2)) - delta

    expected = float(mpmath.findroot(gaussian, mu ** 2 / 2))
    assert expected > 709
    assert last_iterate_epsilon(sigma, 1.0, 1, delta) == pytest.approx(expected, rel=1e-8)
    assert 709 < last_iterate_epsilon(0.02, 0.5, 4, delta) < math.inf


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.1, 100), (0.7, 0.05, 40), (2.0, 0.3, 20)])
def test_subsampled_profile_matches_numerical_integration(sigma, q, steps):
    epsilons = np.array([0.25, 1.0, 2.5])
    profile = last_iterate_delta(epsilons, sigma, q, steps)
    for eps, value in zip(epsilons, profile):
        assert value == pytest.approx(integrated_delta(eps, sigma, q, steps), rel=1e-6)


def test_subsampled_epsilon_matches_numerical_integration():
    """The ε returned meets δ on the integrated profile, and a hair less does not."""
    sigma, q, steps, delta = 1.0, 0.1, 100, 1e-3
    eps = last_iterate_epsilon(sigma, q, steps, delta)
    assert integrated_delta(eps, sigma, q, steps) == pytest.approx(delta, rel=1e-6)
    assert integrated_delta(eps * (1 - 1e-5), sigma, q, steps) > delta


def test_not_monotone_in_the_steps_at_small_q_t():
    """docs/auditing.md's sentence: at σ = 0.5, q = 0.01 the heuristic falls from T = 1 to
    T = 20 (3.03 to 0.75) and rises after; the integrated profile agrees at both ends: the
    ε returned at T = 1 meets δ there, and at T = 20 δ is already met at 2·ε(20) < ε(1)."""
    sigma, q, delta = 0.5, 0.01, 1e-5
    one, twenty = (last_iterate_epsilon(sigma, q, steps, delta) for steps in (1, 20))
    assert twenty < one / 3 and last_iterate_epsilon(sigma, q, 100, delta) > twenty
    assert integrated_delta(one * (1 - 1e-4), sigma, q, 1) > delta
    assert integrated_delta(2 * twenty, sigma, q, 20) < delta


def test_orderings():
    """Less noise, more sampling, more steps and a smaller δ each raise the heuristic ε; it is
    under the q = 1 Gaussian's and under the accountant's (every iterate released) ε."""
    from opacus.accountants import PRVAccountant

    base = dict(noise_multiplier=1.0, sample_rate=0.1, steps=100, delta=1e-5)
    eps = last_iterate_epsilon(**base)
    assert last_iterate_epsilon(**{**base, "noise_multiplier": 1.2}) < eps
    assert last_iterate_epsilon(**{**base, "sample_rate": 0.2}) > eps
    assert last_iterate_epsilon(**{**base, "steps": 200}) > eps
    assert last_iterate_epsilon(**{**base, "delta": 1e-6}) > eps
    profile = last_iterate_delta(np.linspace(0.0, 8.0, 33), 1.0, 0.1, 100)
    assert np.all(np.diff(profile) < 0)
    for sigma, q, steps in [(1.0, 0.1, 100), (2.0, 0.3, 30)]:
        accountant = PRVAccountant()
        accountant.history = [(sigma, q, steps)]
        ceiling = min(accountant.get_epsilon(1e-5),
                      solve(lambda e, mu=math.sqrt(steps) / sigma: gaussian_delta(e, mu), 1e-5))
        assert 0 < last_iterate_epsilon(sigma, q, steps, 1e-5) < ceiling


def test_edges_and_bad_input():
    assert last_iterate_epsilon(1.0, 0.1, 100, 0.0) == math.inf
    assert last_iterate_epsilon(1.0, 0.1, 100, 0.9) == 0.0
    assert last_iterate_delta(math.inf, 1.0, 0.1, 100) == 0.0
    assert np.shape(last_iterate_epsilon([1.0, 2.0], 0.1, 100, 1e-5)) == (2,)
    for bad in (dict(noise_multiplier=0.0), dict(sample_rate=0.0), dict(steps=0),
                dict(delta=1.5)):
        args = {**dict(noise_multiplier=1.0, sample_rate=0.1, steps=100, delta=1e-5), **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            last_iterate_epsilon(**args)


def test_every_dp_cell_carries_it_and_the_views_show_it():
    """The cell's column from its training's (σ, q, T) and δ (NaN without DP-SGD), the
    frontier's table and the audit figure's ceiling line."""
    from sweeper.bounds.audit_columns import Training, last_iterate
    from sweeper.frontier import format_summary
    from sweeper.reports.engine_audit import audit_epsilon_figure
    from testkit import report_frames

    assert last_iterate(Training(1.0, 0.1, 100), 1e-5) == last_iterate_epsilon(1.0, 0.1, 100, 1e-5)
    assert math.isnan(last_iterate(Training(math.nan, math.nan, 0), 1e-5))  # ε = ∞
    frame = report_frames.lira_frame()
    ceiling = {1.0: 0.4321, 8.0: 5.6789}
    frame["epsilon_last_iterate"] = frame["epsilon"].map(ceiling)
    header, *lines = format_summary(frame).splitlines()
    assert "ε last iterate" in header
    assert sum("0.43" in line for line in lines) == sum("5.68" in line for line in lines) > 0
    assert "ε last iterate" not in format_summary(report_frames.lira_frame()).splitlines()[0]
    table = frame.drop_duplicates(["epsilon", "p", "attack"])[
        ["epsilon", "p", "attack", "epsilon_last_iterate"]].assign(
        valid="one_run", **{name: 0.1 for name in ("epsilon_audit_cp", "epsilon_audit_gdp",
                                                   "epsilon_audit_one_run",
                                                   "epsilon_audit_one_run_fdp",
                                                   "epsilon_audit_family",
                                                   "epsilon_audit_family_lr")})
    figure = audit_epsilon_figure(table)
    from matplotlib.collections import LineCollection

    drawn = [sorted(segment[0][1] for segment in bars.get_segments())
             for ax in figure.axes for bars in ax.collections if isinstance(bars, LineCollection)]
    assert drawn and all(levels == [0.4321, 5.6789] for levels in drawn)
    assert any("last-iterate" in text.get_text() for text in figure.legends[0].get_texts())


def test_the_threat_model_table_sets_each_best_audit_beside_both_ceilings():
    import pandas as pd

    from sweeper.reports.engine_audit import threat_model_table

    table = pd.DataFrame({
        "epsilon": [2.0] * 4, "delta": [1e-5] * 4, "p": [0.5] * 4,
        "attack": ["a", "b", "c", "d"],
        "threat_model": ["white_box_final", "white_box_final", "white_box_iterates",
                         "black_box_final"],
        "epsilon_audit_best": [0.7, 1.1, 1.6, float("nan")],
        "epsilon_spent_max": [2.0] * 4, "epsilon_last_iterate": [1.89] * 4})
    row = threat_model_table(table).iloc[0]
    assert (row["epsilon_spent_max"], row["epsilon_last_iterate"]) == (2.0, 1.89)
    assert (row["best_audit_white_box_final"], row["best_audit_white_box_iterates"]) == (1.1, 1.6)
