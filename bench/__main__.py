"""`python -m bench`: how long attack scoring, the cell metrics and the audit take at paper scale.

Scoring runs on the driver's side of every cell, so it must stay in seconds even for CIFAR-size
pools: 50 000 records, 64 shadow models, 10 classes.  Each figure is the median of `--repeat`
runs in this one process (the machines are shared; compare ratios within one run, not across).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from typing import Callable

import numpy as np

from jobs.attacks.basic import loss_threshold

from jobs.attacks.contract import ATTACKS, AttackInputs

from jobs.attacks.lira import lira_offline, lira_online
from jobs.attacks.rmia import rmia_offline, rmia_online
from jobs.attacks.section import AttackSettings
from jobs.attacks.shokri import shokri
from jobs.attacks.signals import logit_confidence
from jobs.metrics import quantile_max, roc_auc, tpr_at_fpr
from sweeper.bounds import epsilon_one_run


def median_seconds(work: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def synthetic_inputs(records: int, shadows: int, classes: int, seed: int = 0) -> tuple[AttackInputs, np.ndarray]:
    """Logits where members are slightly more confident, with balanced shadow masks."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, records)
    members = rng.random(records) < 0.5
    shadow_members = rng.random((shadows, records)) < 0.5

    def logits(member_mask: np.ndarray) -> np.ndarray:
        out = rng.normal(0.0, 1.0, member_mask.shape + (classes,)).astype(np.float32)
        np.put_along_axis(out, np.broadcast_to(labels[..., None], member_mask.shape + (1,)),
                          (2.0 + 0.5 * member_mask)[..., None].astype(np.float32), axis=-1)
        return out

    inputs = AttackInputs(logits(members), labels, logits(shadow_members), shadow_members)
    return inputs, members


def with_augmentations(inputs: AttackInputs, count: int, seed: int = 1) -> AttackInputs:
    """The same inputs with `count` query augmentations: the logits plus small jitter per view."""
    if inputs.shadow_logits is None:
        raise ValueError("query augmentations need the shadows' logits")
    rng = np.random.default_rng(seed)

    def views(logits: np.ndarray, axis: int) -> np.ndarray:
        jitter = rng.normal(0.0, 0.1, (count,) + logits.shape).astype(np.float32)
        return np.moveaxis(logits[None] + jitter, 0, axis)

    return dataclasses.replace(inputs, target_query=views(inputs.target_logits, 0),
                               shadow_query=views(inputs.shadow_logits, 1))


def with_population(inputs: AttackInputs, records: int, seed: int = 2) -> AttackInputs:
    """The same inputs with `records` population records (RMIA's z), drawn as the others are."""
    if inputs.shadow_logits is None:
        raise ValueError("a population is drawn as the shadows are: it needs their logits")
    population, _ = synthetic_inputs(records, len(inputs.shadow_logits), inputs.target_logits.shape[1], seed)
    return dataclasses.replace(inputs, population_logits=population.target_logits,
                               population_labels=population.labels,
                               shadow_population_logits=population.shadow_logits,
                               shadow_population_members=population.shadow_members)


def last_axis_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """φ as `logit_confidence` computed it before it went class-first: reductions over the
    last, length-`classes` axis.  Kept here only to time the old layout beside the new one."""
    if np.ndim(logits) > 3:
        return np.stack([last_axis_confidence(part, labels) for part in logits])
    logits = np.asarray(logits, dtype=np.float32)
    index = np.broadcast_to(labels[:, None], logits.shape[:-1] + (1,))
    true_logit = np.take_along_axis(logits, index, axis=-1)[..., 0]
    others = np.where(np.arange(logits.shape[-1]) == labels[:, None], np.float32(-np.inf), logits)
    top = others.max(axis=-1, keepdims=True)
    others_lse = top[..., 0] + np.log(np.exp(others - top).sum(axis=-1))
    return true_logit.astype(np.float64) - others_lse.astype(np.float64)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000, help="evaluation records (default 50 000)")
    parser.add_argument("--shadows", type=int, default=64, help="shadow models (default 64)")
    parser.add_argument("--classes", type=int, default=10, help="classes (default 10)")
    parser.add_argument("--augmentations", type=int, default=2,
                        help="LiRA query augmentations (default 2: the record and its mirror, the "
                             "reference's default; 18 is mirror × the 3×3 shift grid)")
    parser.add_argument("--population", type=int, default=AttackSettings().rmia_population,
                        help="RMIA's population records z (default: attack.rmia_population)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is shown")
    args = parser.parse_args(argv)

    inputs, members = synthetic_inputs(args.records, args.shadows, args.classes)
    config = AttackSettings()

    def settings(attack: str, **changes):
        # Each attack receives only its own settings dataclass, as a sweep's attack task does.
        return ATTACKS[attack].settings_from(dataclasses.replace(config, **changes))

    scores = lira_online(inputs, settings("lira_online"))
    populated = with_population(inputs, args.population)
    augmented = with_augmentations(inputs, args.augmentations)
    shadow_query = augmented.shadow_query
    if shadow_query is None:
        raise ValueError("with_augmentations gave the shadows no query")
    cases = {
        f"lira_online, {args.augmentations} augmentations":
            lambda: lira_online(augmented, settings("lira_online")),
        "  φ of its shadows, class-first": lambda: logit_confidence(shadow_query, inputs.labels),
        "  φ of its shadows, last axis (old)": lambda: last_axis_confidence(shadow_query,
                                                                            inputs.labels),
        "lira_online (global variance)": lambda: lira_online(inputs, settings("lira_online",
                                                                               lira_variance="global")),
        "lira_online (per-record variance)": lambda: lira_online(inputs, settings("lira_online",
                                                                                   lira_variance="per_record")),
        "lira_offline": lambda: lira_offline(inputs, settings("lira_offline")),
        f"rmia ({args.population} z)": lambda: rmia_online(populated, settings("rmia")),
        f"rmia_offline ({args.population} z)": lambda: rmia_offline(populated, settings("rmia_offline")),
        "loss threshold": lambda: loss_threshold(inputs, settings("loss")),
        "shokri (per-class logistic regression)": lambda: shokri(inputs, settings("shokri")),
        "quantile_max (40 thresholds + CI)": lambda: quantile_max(scores, members),
        "tpr_at_fpr + roc_auc": lambda: (tpr_at_fpr(scores, members, 0.001), roc_auc(scores, members)),
        "epsilon_one_run (40 000 canaries)": lambda: epsilon_one_run(
            15_000, 20_000, 40_000, delta=1e-5),
    }
    print(f"{args.records} records, {args.shadows} shadows, {args.classes} classes; "
          f"median of {args.repeat} runs; load average {os.getloadavg()[0]:.2f}")
    medians = {}
    for name, work in cases.items():
        medians[name] = median_seconds(work, args.repeat)
        print(f"  {name:<40} {medians[name]:8.3f} s")
    old, new = medians["  φ of its shadows, last axis (old)"], medians["  φ of its shadows, class-first"]
    print(f"  class-first φ is {old / new:.1f}× faster than the last-axis layout in this run")


if __name__ == "__main__":
    main()
