"""The DP-SGD family's audit through the law of the summed log-likelihood ratio (issues 41, 50):
its per-step moments against a numerical integration of the densities, its power against a
noise cut to 0.75σ and against engines clipping to another norm, its false flags at the claimed
σ, and that what it proves never exceeds the engine's own ε, each counted over simulated audits
(vectorised: every canary's T steps drawn as the engine's adversary sees them, the statistic's
known law rather than a trained model)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import sweeper.bounds.family as family
from sweeper.bounds import family_law_audit, law_departures

Q, STEPS, DELTA = 0.1, 100, 1e-5
#: σ that DP-SGD at q = 0.1, 100 steps calibrates to ε = 1 and 8 at δ = 1e-5 (PRV accountant,
#: `opacus.accountants.utils.get_noise_multiplier`): the ends of the audit experiments' grid.
SIGMAS = {1.0: 3.984, 8.0: 0.937}


def simulate(rng, canaries: int, sigma: float, noise: float, steps: int = STEPS,
             clip: float = 1.0):
    """(S, members) as `canary_gradient_iterates` scores them: per step z = clip·(drawn) +
    N(0, noise²) (`clip` the engine's clip norm over the claimed C, `noise` its noise over C),
    S = Σ_t log(1 − q + q·e^{(2z − 1)/(2σ²)}) at the claimed σ."""
    members = rng.random(canaries) < 0.5
    drawn = members[:, None] & (rng.random((canaries, steps)) < Q)
    z = clip * drawn + rng.normal(scale=noise, size=(canaries, steps))
    ratio = np.logaddexp(math.log1p(-Q), math.log(Q) + (2.0 * z - 1.0) / (2.0 * sigma ** 2))
    return ratio.sum(1), members


def test_step_moments_match_integration():
    sigma, noise = 1.3, 0.9

    def ell(z):
        return np.logaddexp(math.log1p(-Q), math.log(Q) + (2 * z - 1) / (2 * sigma ** 2))

    def moment(power, centre):
        density = lambda z: stats.norm.pdf(z, loc=centre, scale=noise)  # noqa: E731
        return integrate.quad(lambda z: ell(z) ** power * density(z), -np.inf, np.inf,
                              epsabs=1e-13, epsrel=1e-12)[0]

    out1, out2, in1 = moment(1, 0.0), moment(2, 0.0), moment(1, 1.0)
    mean_in = (1 - Q) * out1 + Q * in1
    var_in = (1 - Q) * out2 + Q * moment(2, 1.0) - mean_in ** 2
    found = [float(x[0]) for x in family._step_moments(sigma, Q, np.array([noise]))]
    assert found == pytest.approx([out1, out2 - out1 ** 2, mean_in, var_in], rel=1e-9)
    centred4 = integrate.quad(lambda z: (ell(z) - out1) ** 4 * stats.norm.pdf(z, scale=noise),
                              -np.inf, np.inf, epsabs=1e-13, epsrel=1e-12)[0]
    var = out2 - out1 ** 2
    law = [float(x[0]) for x in family._out_law(sigma, Q, STEPS, np.array([noise]))]
    assert law == pytest.approx([STEPS * out1, STEPS * var,
                                 STEPS * centred4 + 3 * STEPS * (STEPS - 1) * var ** 2], rel=1e-9)


def departures(scores, members, sigma, alpha):
    return law_departures(scores, members, noise_multiplier=sigma, sample_rate=Q, steps=STEPS,
                          alpha=alpha)


@pytest.mark.parametrize("epsilon", sorted(SIGMAS))
def test_a_noise_cut_to_three_quarters_is_flagged(epsilon):
    """≥ 90 % of audits with 4 000 canaries (the experiments' count) flag 0.75σ at the
    violation level (0.001), as a noise departure (issue 50: 0 of 40 at ε = 1 with Cantelli)."""
    rng, sigma = np.random.default_rng(int(epsilon)), SIGMAS[epsilon]
    found = [departures(*simulate(rng, 4_000, sigma, 0.75 * sigma), sigma, 0.001)
             for _ in range(10)]
    assert sum(bool(lines) and lines[0].startswith("noise") for lines in found) >= 9


#: The true ε of the engines below at δ = 1e-5, from issue 50's independent re-derivation: clip
#: C/2 with σ/2 noise is the claimed mechanism's; clip 2C with σ noise is DP-SGD at σ/2.
TRUE_EPSILON = {("half", 1.0): 1.0, ("half", 8.0): 8.0, ("double", 1.0): 2.37,
                ("double", 8.0): 36.6}
ENGINES = {"half": (0.5, 0.5, "noise"), "double": (1.0, 2.0, "clip")}


@pytest.mark.parametrize("epsilon", sorted(SIGMAS))
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_engine_clipping_to_another_norm_is_flagged_and_proves_no_more_than_it_spends(
        engine, epsilon):
    """Clip C/2 with σ/2 noise (as private as claimed, its out law σ/2's) and clip 2C with σ
    noise (the claimed out law, twice the signal): each flagged at the violation level with the
    evidence of its kind, at the experiments' 4 000 canaries, in every one of 3 audits; the ε
    proven at level 0.05 never above the engine's true ε (issue 50: the law audit claimed 2.05
    where the truth is 1.0, and flagged the 2C engine 0 of 40)."""
    noise, clip, kind = ENGINES[engine]
    rng, sigma = np.random.default_rng(17), SIGMAS[epsilon]
    for _ in range(3):
        scores, members = simulate(rng, 4_000, sigma, noise * sigma, clip=clip)
        lines = departures(scores, members, sigma, 0.001)
        assert [line.split(":")[0] for line in lines] == [kind], lines
        proven = family_law_audit(scores, members, noise_multiplier=sigma, sample_rate=Q,
                                  steps=STEPS, delta=DELTA, alpha=0.05)
        assert 0 < proven <= TRUE_EPSILON[engine, epsilon]


def test_the_rule_out_threshold_is_monotone_in_the_noise_at_few_canaries():
    """Issue 50: at n_out ≤ 2 000 and α = 0.001 a threshold can dip as the noise grows, and
    "every σ′ above σ* ruled out" then fails for the σ″ between; the running bound is monotone
    (and each of its values no larger than its own σ′'s, so each test stays at its level)."""
    dips = 0
    for sigma in SIGMAS.values():
        for outs in (20, 200, 2_000):
            raw = family._out_thresholds(sigma, Q, STEPS, sigma * np.asarray(family.GRID), outs,
                                         0.001)
            running = family._running_out_thresholds(sigma, Q, STEPS, outs, 0.001)
            assert np.all(np.diff(running) >= 0) and np.all(running <= raw)
            dips += int(np.any(np.diff(raw) < 0))
    assert dips > 0  # the raw thresholds do dip: the running bound is needed


AUDITS, LEVEL = 60, 0.05


def false_flags(rng, sigma):
    return sum(bool(departures(*simulate(rng, 2_000, sigma, sigma), sigma, LEVEL))
               for _ in range(AUDITS))


def test_the_claimed_noise_is_flagged_no_more_than_the_level():
    limit = stats.binom.ppf(1 - 1e-4, AUDITS, LEVEL)
    rng = np.random.default_rng(7)
    assert false_flags(rng, SIGMAS[8.0]) <= limit


def test_a_law_with_one_step_s_variance_is_caught(monkeypatch):
    """A ruling whose spread is one step's, not T steps' (its margin √T too narrow): false
    flags at the claimed σ in many audits."""
    real = family._lower_threshold

    def one_step(values, weights, terms, alpha):
        centre = terms * (values @ weights)
        return centre - (centre - real(values, weights, terms, alpha)) / math.sqrt(STEPS)

    monkeypatch.setattr(family, "_lower_threshold", one_step)
    monkeypatch.setattr(family, "_in_family", lambda *args: True)  # the ruling alone
    assert false_flags(np.random.default_rng(7), SIGMAS[8.0]) > stats.binom.ppf(
        1 - 1e-4, AUDITS, LEVEL)


def test_the_separation_is_the_auc_s_lower_end_above_one_half():
    """`canaries_separate` against the AUC counted pair by pair (ties 1/2) and Hoeffding's margin
    √(ln(1/α)/(2k)) written out, on draws either side of the line, ties included."""
    rng, alpha = np.random.default_rng(4), 0.05
    seen = set()
    for shift in np.linspace(0.0, 0.6, 13):
        members = rng.random(300) < 0.5
        scores = np.round(rng.normal(size=300) + shift * members, 1)  # ties
        ins, outs = scores[members], scores[~members]
        auc = np.mean((ins[:, None] > outs[None, :]) + 0.5 * (ins[:, None] == outs[None, :]))
        margin = math.sqrt(math.log(1 / alpha) / (2 * min(ins.size, outs.size)))
        expected = bool(auc - margin > 0.5)
        assert family.canaries_separate(scores, members, alpha) is expected
        seen.add(expected)
    assert seen == {True, False}


def test_a_weaker_canary_is_no_flag_and_random_scores_prove_nothing():
    """Canaries trained on at half their norm (an engine more private than claimed) leave the
    out canaries' law alone: no flag.  Uniform random scores do not separate members: ε = 0
    (tests/test_sweeper/bounds/test_audit_sanity.py counts them over many audits, at 100 canaries too)."""
    rng, sigma = np.random.default_rng(5), SIGMAS[8.0]
    scores, members = simulate(rng, 4_000, sigma, sigma)
    weaker = np.where(members, scores - 3.0, scores)  # the in canaries' statistics lowered
    assert not departures(weaker, members, sigma, LEVEL)
    for labels in (members, ~members):
        assert not departures(rng.random(4_000), labels, sigma, LEVEL)
        assert family_law_audit(rng.random(4_000), labels, noise_multiplier=sigma,
                                sample_rate=Q, steps=STEPS, delta=DELTA, alpha=LEVEL) == 0


def test_what_it_proves():
    """At the claimed σ it proves most of ε (the grid's step 2^(1/8) caps it), never more than
    the ε the noise was calibrated to; at q = 1, where ℓ is linear, it cannot speak (NaN)."""
    rng, sigma = np.random.default_rng(3), SIGMAS[8.0]
    claimed = family_law_audit(*simulate(rng, 20_000, sigma, sigma), noise_multiplier=sigma,
                               sample_rate=Q, steps=STEPS, delta=DELTA, alpha=0.05)
    assert 0.7 * 8.0 < claimed <= 8.0
    assert math.isnan(family_law_audit(*simulate(rng, 100, sigma, sigma), noise_multiplier=sigma,
                                       sample_rate=1.0, steps=STEPS, delta=DELTA, alpha=0.05))


def test_a_cell_names_the_law_audit_when_it_flags():
    """Through a results row: `canary_gradient_iterates` (which declares its scores the summed
    log-likelihood ratio) at a noise cut to 0.75σ is flagged `audit_family_lr`; at the claimed
    σ it is not, and its column holds what the law proves."""
    from jobs.metrics import quantile_max
    from sweeper.grid.cells import audited
    from sweeper.grid.plan import AttackSpec, Cell

    sigma, steps = 0.8, 20
    spec = AttackSpec(attack="canary_gradient_iterates", target="t", shadows=(),
                      eval_records=4000, settings=())
    cell = Cell(dataset="d", model="m", epsilon=1e6, delta=DELTA, p=0.5,
                target_precision=math.nan, attack="canary_gradient_iterates",
                policy="quantile_max", trial=0, scores=spec, tpr_floor=0.01,
                bound_form="derived", violation_alpha=0.001, calibration=())
    meta = {"noise_multiplier": sigma, "dp_sample_rate": Q, "steps": steps,
            "epsilon_spent": 1.0}
    rng, found = np.random.default_rng(11), {}
    for share in (1.0, 0.75):
        scores, members = simulate(rng, 4_000, sigma, share * sigma, steps)
        row = audited(quantile_max(scores, members), scores, members, cell, meta)
        found[share] = (row["violation_reason"].split("+"), row["epsilon_audit_family_lr"])
    assert "audit_family_lr" not in found[1.0][0] and found[1.0][1] > 0
    assert "audit_family_lr" in found[0.75][0]
