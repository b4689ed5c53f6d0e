"""What a cell's scores prove about its training's privacy: the audit columns of a results row.

Why.  A cell's precision speaks of one threshold; an audit asks the strongest claim the scores
support about ε.  Every audit here searches the same candidates whatever the cell's policy —
the 40 top-quantile thresholds (`jobs.metrics.quantile_thresholds`) — with each interval end at
alpha/(2·candidates) (Bonferroni over both ends and every threshold), so the best of them is
a claim at confidence 1 − alpha; the one-run audit searches its own guess counts likewise
(`sweeper.bounds.best_one_run_epsilon`).

Contract: `audit_epsilons(scores, members, p, δ, alpha)` gives the columns; `valid_audits`
which of them are proofs for the cell; `violations(...)` which valid ones prove the claimed ε
wrong at `violation_alpha`.  Only an estimator valid for the mechanism and the observations may
flag: one run (Steinke et al.'s, and its f-DP reading) always; Clopper–Pearson only for gradient
canaries (independent observations);
Gaussian DP only for those, and only where training is exactly a Gaussian mechanism (q = 1);
the DP-SGD family's audits for those on DP-SGD, its law audit only where the scores are the
training's summed log-likelihood ratios (`Attack.scores_likelihood_ratio`), the final model's law
audit only where they are final displacements of SGD without momentum
(`Attack.scores_final_displacement`, `Training.final_sums_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from jobs.metrics import quantile_thresholds
from sweeper.bounds import (best_one_run_epsilon, bound_profile, epsilon_clopper_pearson,
                            epsilon_gaussian_dp, epsilon_one_run_fdp, family_audit,
                            family_law_audit, last_iterate_epsilon, law_departures,
                            noise_ruled_out)
from sweeper.bounds.final_law import final_law_audit, final_law_departures
from sweeper.bounds.proven import ONE_RUN_SHARES


@dataclass(frozen=True)
class Training:
    """What the target's training publishes about its privacy: DP-SGD's σ, q and steps
    (NaN σ or q: not DP-SGD, e.g. ε = ∞ or an exact mechanism's release), and whether its final
    weights move by the plain sum of the steps' noisy gradients (SGD without momentum), which
    the final model's law audit reads (`sweeper.bounds.final_law`)."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    final_sums_steps: bool = False

    @staticmethod
    def sums_steps(optimizer: object, momentum: object) -> bool:
        """Plain SGD, momentum 0: the final displacement is the sum of the steps (anything
        unknown, as rows from before these columns: not)."""
        try:
            return optimizer == "sgd" and float(momentum) == 0.0  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    @property
    def is_dpsgd(self) -> bool:
        return (self.noise_multiplier > 0 and self.steps > 0
                and not math.isnan(self.sample_rate) and not math.isnan(self.noise_multiplier))

    @property
    def gaussian(self) -> bool:
        """Exactly a Gaussian mechanism: full-batch DP-SGD (every record in every step)."""
        return self.is_dpsgd and self.sample_rate == 1.0


#: The audit columns, each named in `violation_reason` without its `epsilon_` (audit_cp …).
AUDIT_COLUMNS = ("epsilon_audit_cp", "epsilon_audit_gdp", "epsilon_audit_one_run",
                 "epsilon_audit_one_run_fdp", "epsilon_audit_family", "epsilon_audit_family_lr",
                 "epsilon_audit_final_law")


#: How an audit picks its threshold (or one run its number of guesses): "bonferroni" searches
#: them all on every canary and corrects the level for the search; "split" picks on one half of
#: the canaries and tests that one choice on the other half at the full level (jax_privacy's
#: `Split` strategy).
SELECTIONS = ("bonferroni", "split")
#: The seed of the split's permutation of the canaries: fixed before anything is observed, so the
#: halves are independent of which canaries were trained on.
SPLIT_SEED = 0


def threshold_counts(scores: np.ndarray, members: np.ndarray,
                     thresholds: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(TP, FP) of "member iff score ≥ t" at each top-quantile threshold t, or at each of
    `thresholds` (NaN never accepted)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    if thresholds is None:
        thresholds = np.unique(quantile_thresholds(scores))
    accepted = scores[None, :] >= np.asarray(thresholds, dtype=np.float64)[:, None]
    return (accepted & members).sum(1), (accepted & ~members).sum(1)


def audit_epsilons(scores: np.ndarray, members: np.ndarray, *, p: float, delta: float,
                   alpha: float, family: Optional["Training"] = None,
                   selection: str = "bonferroni",
                   likelihood_ratio: bool = False,
                   final_displacement: bool = False) -> dict[str, float]:
    """The ε each audit proves with confidence 1 − alpha (NaN where it cannot speak: no
    members or non-members; the Gaussian-DP one at δ = 0, where μ-GDP proves no finite ε; the
    family audits without `family`, the DP-SGD training whose family they test; the family's
    law audit unless the scores are that training's summed log-likelihood ratios,
    `likelihood_ratio`; the final model's law audit unless they are its gradient canaries'
    final displacements, `final_displacement`, under SGD without momentum).  `selection`: one
    of `SELECTIONS` (`split_audits` for "split"; the law audits search no threshold, so they
    read every canary either way)."""
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {', '.join(SELECTIONS)}; got {selection!r}")
    laws = {"epsilon_audit_family_lr": law_claim(scores, members,
                                                 family if likelihood_ratio else None, delta,
                                                 alpha),
            "epsilon_audit_final_law": final_law_claim(scores, members,
                                                       family if final_displacement else None,
                                                       delta, alpha)}
    if selection == "split":
        return {**split_audits(scores, members, p=p, delta=delta, alpha=alpha, family=family),
                **laws}
    members = np.asarray(members, dtype=bool)
    positives, negatives = int(members.sum()), int((~members).sum())
    if positives == 0 or negatives == 0 or len(scores) == 0:
        return dict.fromkeys(AUDIT_COLUMNS, math.nan)
    tp, fp = threshold_counts(scores, members)
    searched = max(1, len(tp))
    cp = np.asarray(epsilon_clopper_pearson(tp, fp, positives, negatives, delta=delta,
                                            alpha=alpha, thresholds=searched))
    gdp = (np.asarray(epsilon_gaussian_dp(tp, fp, positives, negatives, delta=delta, alpha=alpha,
                                          thresholds=searched)) if delta > 0 else np.nan)
    # At p ≠ 1/2 with δ > 0 the one-run δ-term is unproven: NaN (sweeper.bounds.epsilon_one_run).
    one_run = best_one_run_epsilon(scores, members, delta=delta, alpha=alpha, p=p)
    # The f-DP reading of the same guesses (NaN at p ≠ 1/2 and at δ = 0).
    one_run_fdp = best_one_run_epsilon(scores, members, delta=delta, alpha=alpha, p=p,
                                       rule=epsilon_one_run_fdp)
    return {"epsilon_audit_cp": _best(cp), "epsilon_audit_gdp": _best(gdp),
            "epsilon_audit_one_run": float(one_run), "epsilon_audit_one_run_fdp": one_run_fdp,
            "epsilon_audit_family": family_claim(tp, fp, positives, negatives, family, delta,
                                                 alpha),
            **laws}


#: The level of Annamalai & De Cristofaro's estimate: each rate's exact interval end at 0.05
#: (their two-sided 90 % interval).
PAPER_ALPHA = 0.05


def gdp_estimate_uncorrected(scores: np.ndarray, members: np.ndarray, *, delta: float,
                             alpha: float = PAPER_ALPHA) -> float:
    """Annamalai & De Cristofaro's ε_emp: the Gaussian-DP ε of "member iff score ≥ t" at every
    distinct score t, each rate's exact end at `alpha` (one-sided), the best t taken with no
    correction for the search.  An estimate to compare with their figures, never a proof:
    the search over thresholds is not paid for (NaN without members or non-members, or at
    δ = 0)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    positives, negatives = int(members.sum()), int((~members).sum())
    if positives == 0 or negatives == 0 or delta <= 0:
        return math.nan
    tp, fp = threshold_counts(scores, members, np.unique(scores))
    # `epsilon_gaussian_dp` puts alpha/2 on each end: 2·alpha puts alpha there.
    return _best(epsilon_gaussian_dp(tp, fp, positives, negatives, delta=delta,
                                     alpha=min(2 * alpha, 1.0)))


def split_audits(scores: np.ndarray, members: np.ndarray, *, p: float, delta: float,
                 alpha: float, family: Optional["Training"] = None) -> dict[str, float]:
    """`audit_epsilons` with the threshold held out: each audit picks its best threshold (one
    run: its best number of guesses) on a random half of the canaries, uncorrected, and proves
    with that one choice on the other half at the full level alpha.

    Why beside Bonferroni.  A correction over 40 thresholds costs each end a factor 40 in level;
    a held-out choice costs half the canaries instead, and is valid whatever the search on the
    first half did (jax_privacy's `Split`; SPEC §4b).  The halves come from a permutation fixed
    by `SPLIT_SEED` before anything is observed, so each half's canaries are still in
    independently with probability p, the other half's held fixed like any other record.
    """
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    pick, test = halves(len(scores))
    picked = {name: math.nan for name in AUDIT_COLUMNS}
    if min(members[pick].sum(), (~members[pick]).sum(), members[test].sum(),
           (~members[test]).sum()) == 0:
        return picked

    def counted(part, thresholds=None):
        tp, fp = threshold_counts(scores[part], members[part], thresholds)
        return tp, fp, int(members[part].sum()), int((~members[part]).sum())

    candidates = np.unique(quantile_thresholds(scores[pick]))
    for name, per_threshold in _threshold_audits(p, delta, alpha, family).items():
        found = np.asarray(per_threshold(*counted(pick, candidates)), float)
        if np.isnan(found).all():
            continue
        best = candidates[int(np.nanargmax(found))]
        picked[name] = float(per_threshold(*counted(test, [best]))[0])
    for name, rule in (("epsilon_audit_one_run", None),
                       ("epsilon_audit_one_run_fdp", epsilon_one_run_fdp)):
        shares = [best_one_run_epsilon(scores[pick], members[pick], delta=delta, alpha=alpha,
                                       p=p, rule=rule, ks=[k]) for k in _guesses(len(pick), p)]
        if np.isnan(shares).any():
            continue
        share = ONE_RUN_SHARES[int(np.argmax(shares))]
        picked[name] = best_one_run_epsilon(scores[test], members[test], delta=delta,
                                            alpha=alpha, p=p, rule=rule,
                                            ks=[_guesses(len(test), p, (share,))[0]])
    return picked


def halves(canaries: int) -> tuple[np.ndarray, np.ndarray]:
    """The split's two halves of the canaries' indices (pick, test): a permutation by
    `SPLIT_SEED`, fixed before anything is observed."""
    order = np.random.default_rng(SPLIT_SEED).permutation(canaries)
    return order[: canaries // 2], order[canaries // 2:]


def _guesses(canaries: int, p: float, shares=None) -> list:
    """`best_one_run_epsilon`'s default guess counts, one per share of the canaries."""
    totals = [max(1, round(share * canaries)) for share in (shares or ONE_RUN_SHARES)]
    return [(r // 2, r - r // 2) if p == 0.5 else (r, 0) for r in totals]


def _threshold_audits(p: float, delta: float, alpha: float,
                      family: Optional["Training"]) -> dict:
    """The threshold audits, each at every one of the thresholds counted alone (no correction),
    as functions of (TP, FP, positives, negatives) giving one ε per threshold."""
    def cp(tp, fp, positives, negatives):
        return epsilon_clopper_pearson(tp, fp, positives, negatives, delta=delta, alpha=alpha)

    def gdp(tp, fp, positives, negatives):
        return np.full(len(tp), math.nan) if delta <= 0 else epsilon_gaussian_dp(
            tp, fp, positives, negatives, delta=delta, alpha=alpha)

    def in_family(tp, fp, positives, negatives):
        return [family_claim(tp[i:i + 1], fp[i:i + 1], positives, negatives, family, delta,
                             alpha) for i in range(len(tp))]

    return {"epsilon_audit_cp": cp, "epsilon_audit_gdp": gdp, "epsilon_audit_family": in_family}


def law_claim(scores: np.ndarray, members: np.ndarray, training: Optional["Training"],
              delta: float, alpha: float) -> float:
    """`sweeper.bounds.family_law_audit` for a DP-SGD training's summed log-likelihood ratios
    (NaN for anything else, and without members or non-members)."""
    members = np.asarray(members, dtype=bool)
    if (training is None or not training.is_dpsgd or delta <= 0 or members.all()
            or not members.any()):
        return math.nan
    return family_law_audit(scores, members, noise_multiplier=training.noise_multiplier,
                            sample_rate=training.sample_rate, steps=training.steps, delta=delta,
                            alpha=alpha)


def _final_sums_steps(training: "Training", members: np.ndarray) -> bool:
    return (training.is_dpsgd and training.final_sums_steps and bool(members.any())
            and not bool(members.all()))


def final_law_claim(scores: np.ndarray, members: np.ndarray, training: Optional["Training"],
                    delta: float, alpha: float) -> float:
    """`sweeper.bounds.final_law_audit` for gradient canaries' final displacements under a
    DP-SGD training whose final weights sum its steps (NaN for anything else, and without
    members or non-members)."""
    members = np.asarray(members, dtype=bool)
    if training is None or not _final_sums_steps(training, members) or delta <= 0:
        return math.nan
    return final_law_audit(scores, members, noise_multiplier=training.noise_multiplier,
                           sample_rate=training.sample_rate, steps=training.steps, delta=delta,
                           alpha=alpha)


def final_law_departures_of(scores: np.ndarray, members: np.ndarray,
                            training: Optional["Training"], alpha: float) -> list[str]:
    """How gradient canaries' final displacements depart from the claimed engine at `alpha`
    (`sweeper.bounds.final_law_departures`): none where they fit or cannot be read."""
    members = np.asarray(members, dtype=bool)
    if training is None or not _final_sums_steps(training, members):
        return []
    return final_law_departures(scores, members, noise_multiplier=training.noise_multiplier,
                                sample_rate=training.sample_rate, steps=training.steps,
                                alpha=alpha)


def family_claim(tp: np.ndarray, fp: np.ndarray, positives: int, negatives: int,
                 training: Optional["Training"], delta: float, alpha: float) -> float:
    """`sweeper.bounds.family_audit` for a DP-SGD training (NaN for anything else)."""
    if training is None or not training.is_dpsgd or delta <= 0:
        return math.nan
    return family_audit(tp, fp, positives, negatives, noise_multiplier=training.noise_multiplier,
                        sample_rate=training.sample_rate, steps=training.steps, delta=delta,
                        alpha=alpha)


def law_departures_of(scores: np.ndarray, members: np.ndarray, training: Optional["Training"],
                      alpha: float) -> list[str]:
    """How the canaries' summed log-likelihood ratios depart from the mechanism a DP-SGD
    training claims, at `alpha`, through their law (`sweeper.bounds.law_departures`): one line
    of evidence per departure, none when they fit or cannot be read."""
    members = np.asarray(members, dtype=bool)
    if training is None or not training.is_dpsgd or members.all() or not members.any():
        return []
    return law_departures(scores, members, noise_multiplier=training.noise_multiplier,
                          sample_rate=training.sample_rate, steps=training.steps, alpha=alpha)


def claimed_noise_ruled_out(scores: np.ndarray, members: np.ndarray,
                            training: Optional["Training"], alpha: float) -> bool:
    """Whether the canaries rule out the noise a DP-SGD training claims, at `alpha`
    (`sweeper.bounds.noise_ruled_out`)."""
    if training is None or not training.is_dpsgd:
        return False
    members = np.asarray(members, dtype=bool)
    tp, fp = threshold_counts(scores, members)
    return noise_ruled_out(tp, fp, int(members.sum()), int((~members).sum()),
                           noise_multiplier=training.noise_multiplier,
                           sample_rate=training.sample_rate, steps=training.steps, alpha=alpha)


def _best(values) -> float:
    values = np.asarray(values, dtype=np.float64)
    return float(np.nanmax(values)) if values.size and not np.isnan(values).all() else math.nan


def profile_bound(training: Training, p: float, tpr: float, form: str) -> float:
    """`bound_profile`: the least Thudi bound over the training's whole privacy profile (NaN
    when the training is not DP-SGD)."""
    if not training.is_dpsgd:
        return math.nan
    return float(bound_profile(training.noise_multiplier, training.sample_rate, training.steps,
                               p, tpr, form=form))


def last_iterate(training: Training, delta: float) -> float:
    """`last_iterate_epsilon`: the final model's heuristic ε at δ, the ceiling of final-model
    audits (NaN when the training is not DP-SGD, as for ε = ∞)."""
    if not training.is_dpsgd:
        return math.nan
    return float(last_iterate_epsilon(training.noise_multiplier, training.sample_rate,
                                      training.steps, delta))


def valid_audits(training: Training, independent: bool,
                 likelihood_ratio: bool = False,
                 final_displacement: bool = False) -> tuple[str, ...]:
    """The audit columns that are proofs for this cell.

    One run (Steinke et al., and Mahloujifar et al.'s f-DP reading of the same guesses) always:
    each is proven for many canaries of one training.  Clopper–
    Pearson and Gaussian DP count each observation as an independent trial, which holds for
    gradient canaries (`independent`: each its own weight, its own noise and its own Poisson
    draws) and not for records or input canaries of one model, where they are estimates; the
    Gaussian-DP one moreover only where training is exactly a Gaussian mechanism (q = 1).  The
    family's audits read gradient canaries of DP-SGD; its law audit moreover scores that are
    the training's summed log-likelihood ratios (`likelihood_ratio`), whose law it knows, and the
    final model's law audit final displacements (`final_displacement`) of a training whose
    final weights sum its steps (`Training.final_sums_steps`).
    """
    names = ["epsilon_audit_one_run", "epsilon_audit_one_run_fdp"]
    if independent:
        names.append("epsilon_audit_cp")
        if training.is_dpsgd:
            names.append("epsilon_audit_family")
            if likelihood_ratio:
                names.append("epsilon_audit_family_lr")
            if final_displacement and training.final_sums_steps:
                names.append("epsilon_audit_final_law")
        if training.gaussian:
            names.append("epsilon_audit_gdp")
    return tuple(names)


def best_valid(proven: dict[str, float], valid: tuple[str, ...]) -> float:
    """The largest ε the valid audits prove (NaN when none speaks)."""
    return max((proven[name] for name in valid if not math.isnan(proven[name])),
               default=math.nan)


def violations(proven: dict[str, float], epsilon: float, valid: tuple[str, ...]) -> list[str]:
    """Which valid audits (`audit_epsilons` at the violation level) prove the claimed ε wrong,
    named as `violation_reason` names them (audit_cp, audit_gdp, audit_one_run)."""
    return [name.replace("epsilon_", "") for name in AUDIT_COLUMNS
            if name in valid and proven.get(name, math.nan) > epsilon]
