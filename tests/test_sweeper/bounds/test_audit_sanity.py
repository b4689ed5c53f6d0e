"""Audits that cannot fool themselves (issue 41, SPEC §4b): scores that know nothing of
membership must prove ε = 0, at every estimator the project has and in both directions.

Each simulated audit draws m canaries, each in with probability 1/2, and scores them i.i.d.
uniform whatever their membership: the mechanism is 0-DP, so any claim ε > 0 is false, and a
valid claim at level α is made in at most a fraction α of audits.  A released auditor once
proved 3.5–5.9 from random scores (jax_privacy #270); the planted bugs below (a point estimate
without an interval, guess counts searched without correction, a "split" that tests on the half
it picked on) are each caught by the same count.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

import sweeper.bounds.audit_columns as audits
import sweeper.bounds.family as family
from jobs.metrics import quantile_max
from sweeper.bounds.audit_columns import (AUDIT_COLUMNS, Training, audit_epsilons,
                                          final_law_claim, law_claim, threshold_counts)
from sweeper.bounds import best_one_run_epsilon, epsilon_clopper_pearson, epsilon_from_rates
from sweeper.grid.cells import audit_from_precision, audit_from_rates

ALPHA, DELTA, CANARIES, AUDITS = 0.2, 1e-5, 200, 50
#: Full-batch DP-SGD (the family audit's profile in closed form, so the test stays quick), plain
#: SGD (the final model's law audit reads it).
TRAINING = Training(1.0, 1.0, 30, final_sums_steps=True)


def random_audits(estimators, count=AUDITS, seed=0, canaries=CANARIES):
    """{name: how many of 2·count audits claimed ε > 0}: every estimator on the same random
    scores, with the members as drawn and swapped (in ↔ out)."""
    rng = np.random.default_rng(seed)
    claims: dict[str, int] = {}
    for _ in range(count):
        scores, members = rng.random(canaries), rng.random(canaries) < 0.5
        for labels in (members, ~members):
            for name, value in estimators(scores, labels).items():
                claims[name] = claims.get(name, 0) + int(value > 0)
    return claims


def limit(count=AUDITS):
    """The most false claims a valid estimator makes in 2·count audits but once in 10 000 runs
    (the two directions of one draw are dependent; each claim is still one at level α)."""
    return int(binom.ppf(1 - 1e-4, 2 * count, ALPHA))


def every_estimator(scores, members):
    found = {**audit_epsilons(scores, members, p=0.5, delta=DELTA, alpha=ALPHA,
                              family=TRAINING, likelihood_ratio=True, final_displacement=True),
             **{f"{name} (split)": value for name, value in audit_epsilons(
                 scores, members, p=0.5, delta=DELTA, alpha=ALPHA, family=TRAINING,
                 selection="split", likelihood_ratio=True, final_displacement=True).items()}}
    point = quantile_max(scores, members)  # the sweep's oracle policy, 40 thresholds searched
    found["precision"] = audit_from_precision(point, 0.5, ALPHA)
    found["rates"] = audit_from_rates(point, DELTA, ALPHA)
    return found


def test_random_scores_prove_nothing_at_any_estimator():
    claims = random_audits(every_estimator)
    expected = {*AUDIT_COLUMNS, *(f"{name} (split)" for name in AUDIT_COLUMNS), "precision",
                "rates"}
    assert set(claims) == expected
    assert {name: n for name, n in claims.items() if n > limit()} == {}


#: DP-SGD at q = 0.1, 100 steps, with the σ that spends ε = 8 at δ = 1e-5: where the family's
#: law audit has most to say (tests/test_sweeper/bounds/test_family_law.py).
SUBSAMPLED = Training(0.937, 0.1, 100)


@pytest.mark.parametrize("canaries", [100, 4_000])
def test_random_scores_prove_nothing_through_the_family_law(canaries):
    """The family's law audit as the sweep calls it for the training's own likelihood-ratio
    statistics, at q < 1 (at q = 1, `TRAINING`, it is NaN): random scores, on any scale, in
    both directions, at few canaries and many (reading values alone, it once fit an engine and
    claimed ε > 0 in 100 of 100 audits with 100 canaries)."""
    def law(scores, members):
        return {f"{scale:g}": law_claim(scale * scores, members, SUBSAMPLED, DELTA, ALPHA)
                for scale in (1.0, -1e6)}

    claims = random_audits(law, canaries=canaries)
    assert set(claims) == {"1", "-1e+06"}
    assert {name: n for name, n in claims.items() if n > limit()} == {}


@pytest.mark.parametrize("canaries", [100, 4_000])
def test_random_scores_prove_nothing_through_the_final_law(canaries):
    """The final model's law audit on random displacements centred on 0 (as the family's out
    law is: off centre it withdraws its claim, NaN), on any scale, in both directions, at
    q = 0.1 and q = 1."""
    def law(scores, members):
        return {f"{scale:g} q={training.sample_rate:g}": final_law_claim(
                    scale * (scores - 0.5), members, training, DELTA, ALPHA)
                for scale in (1.0, -1e6)
                for training in (TRAINING, Training(0.937, 0.1, 100, final_sums_steps=True))}

    claims = random_audits(law, canaries=canaries)
    assert len(claims) == 4
    assert {name: n for name, n in claims.items() if n > limit()} == {}


def test_the_final_law_taking_the_clip_as_claimed_is_caught(monkeypatch):
    """The final law with the clip norm taken as claimed (c = 1) and no separation test:
    random displacements' small spread reads as little noise, and it claims ε > 0 in every
    audit.  (Either guard alone holds them: the clip bound leaves c = 0 where the in canaries'
    sum is no larger than chance.)"""
    import sweeper.bounds.final_law as final_law

    monkeypatch.setattr(final_law, "canaries_separate", lambda *args: True)
    monkeypatch.setattr(final_law, "clip_lower", lambda *args: 1.0)
    claims = random_audits(lambda scores, members: {"law": final_law_claim(
        scores - 0.5, members, Training(0.937, 0.1, 100, True), DELTA, ALPHA)}, canaries=100)
    assert claims["law"] > limit()


def test_the_law_audit_as_it_was_is_caught(monkeypatch):
    """The law audit of issue 41, reading the out canaries' values alone: no separation test,
    and the clip norm taken as claimed rather than bounded by the in canaries (issue 50):
    random scores fit an engine and claim ε > 0 far beyond α at 100 canaries.  (Either guard
    alone now holds them: the clip bound leaves no claim where in and out do not differ.)"""
    monkeypatch.setattr(family, "canaries_separate", lambda *args: True)
    monkeypatch.setattr(family, "_in_thresholds", lambda *args: np.where(
        family.SIGNAL < 1.0, -np.inf, np.inf))
    claims = random_audits(lambda scores, members: {
        "law": law_claim(scores, members, SUBSAMPLED, DELTA, ALPHA)}, canaries=100)
    assert claims["law"] > limit()


def planted(scores, members):
    """Three auditors with the bugs that make audits fool themselves."""
    positives, negatives = int(members.sum()), int((~members).sum())
    tp, fp = threshold_counts(scores, members)
    return {
        # jax_privacy #270's kind: ε from the raw rates, no interval, best of the thresholds
        "point estimate": float(np.max(epsilon_from_rates(tp / positives, fp / negatives, DELTA))),
        # one run's six guess counts each tested at the full level, the best kept
        "one run, no Bonferroni": max(
            best_one_run_epsilon(scores, members, delta=DELTA, alpha=ALPHA, ks=[k])
            for k in audits._guesses(len(scores), 0.5)),
    }


def test_planted_bugs_are_caught():
    claims = random_audits(planted, count=400, canaries=100)
    assert claims["point estimate"] > limit(400)
    assert claims["one run, no Bonferroni"] > limit(400)


def test_a_split_that_tests_where_it_picked_is_caught(monkeypatch):
    """The split's validity is the held-out half: picking on the very canaries it tests on
    (both halves all of them) makes its one-run claims false far beyond α."""
    everything = lambda canaries: (np.arange(canaries), np.arange(canaries))  # noqa: E731
    monkeypatch.setattr(audits, "halves", everything)
    monkeypatch.setattr(audits, "_threshold_audits", lambda *args: {})  # one run's part only
    claims = random_audits(lambda scores, members: audit_epsilons(
        scores, members, p=0.5, delta=DELTA, alpha=ALPHA, selection="split"), count=200,
        canaries=100)
    assert claims["epsilon_audit_one_run"] > limit(200)


def test_the_split_halves_are_fixed_before_anything_is_observed():
    pick, test = audits.halves(11)
    assert sorted([*pick, *test]) == list(range(11)) and len(pick) == 5
    assert [list(half) for half in audits.halves(11)] == [list(pick), list(test)]
    with pytest.raises(ValueError, match="selection"):
        audit_epsilons(np.zeros(4), np.array([1, 0, 1, 0], bool), p=0.5, delta=DELTA,
                       alpha=ALPHA, selection="best")


def test_the_split_proves_what_the_held_out_half_shows():
    """Scores that do separate members: every split audit proves ε > 0, each from the threshold
    (or guess count) it picked on one half, tested once on the other: its Clopper–Pearson ε is
    that of the test half's counts at one threshold, at the full level."""
    rng = np.random.default_rng(2)
    members = rng.random(2_000) < 0.5
    scores = rng.normal(size=2_000) + 2.0 * members
    split = audit_epsilons(scores, members, p=0.5, delta=DELTA, alpha=0.05, family=TRAINING,
                           selection="split")
    law_audits = ("epsilon_audit_family_lr", "epsilon_audit_final_law")  # they pick no threshold
    assert all(split[name] > 0 for name in AUDIT_COLUMNS if name not in law_audits)
    pick, test = audits.halves(2_000)
    candidates = np.unique(audits.quantile_thresholds(scores[pick]))
    chosen = [split["epsilon_audit_cp"] == pytest.approx(float(epsilon_clopper_pearson(
        *(x[0] for x in threshold_counts(scores[test], members[test], [t])),
        members[test].sum(), (~members[test]).sum(), delta=DELTA, alpha=0.05)))
        for t in candidates]
    assert any(chosen)
