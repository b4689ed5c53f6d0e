"""Checks of the attacks' side of a configuration: shadows, each attack's settings, what the
grid's attacks need of the shadows, the data and the model, the threshold policies and the
metrics.  A setting's own rule is declared beside its attack (`jobs.settings`); attacks are asked
what they need (`jobs.attacks.contract.Attack`), never told apart by name.  Part of
`sweeper.checks.sections`.
"""

from __future__ import annotations

from jobs.attacks.contract import ATTACKS
from jobs.datasets import DATASETS
from jobs.policies import CALIBRATED
from jobs.settings import problems as setting_problems
from sweeper.config.problems import Check, whole_pool
from sweeper.config.schema import SweepConfig, sampling_rates


def _fitting_per_record(cfg: SweepConfig) -> list[str]:
    """The grid's attacks that fit IN/OUT statistics per record on the shadows (LiRA, RMIA)."""
    return [a for a in cfg.grid.attack if a in ATTACKS and ATTACKS[a].fits_per_record]


def check_shadows_and_attacks(cfg: SweepConfig, check: Check) -> None:
    """`shadow` and `attack`: shadow pairs, each setting's rule, what the grid's attacks need."""
    if cfg.shadow.disjoint_data:
        check(cfg.dataset.members is not None or cfg.dataset.pool_size is not None,
              "shadow.disjoint_data=true: set dataset.members or dataset.pool_size, so that records "
              "remain past every target's pool for the shadows")
        lira = _fitting_per_record(cfg)
        check(not lira, f"shadow.disjoint_data=true: {lira} fit IN/OUT shadows on the target's own "
                        "records, which disjoint shadows never see; use shadow.disjoint_data=false")
    for problem in setting_problems(cfg.shadow, "shadow."):
        check(False, problem)
    problems = setting_problems(cfg.attack, "attack.")
    for problem in problems:
        check(False, problem)
    if not problems:  # the attacks' settings are built from valid values only
        _check_attack_needs(cfg, check)
    _check_canaries(cfg, check)


def _check_attack_needs(cfg: SweepConfig, check: Check) -> None:
    """What each of the grid's attacks needs with its settings: enough shadows, image records
    for a query that transforms images."""
    from jobs.attacks.queries import QUERIES

    for name in cfg.grid.attack:
        if name not in ATTACKS:
            continue  # the grid's check names it
        attack = ATTACKS[name]
        settings = attack.settings_from(cfg.attack)
        fewest, why = attack.fewest_shadows(settings)
        check(not attack.needs_shadows or fewest <= 2 or cfg.shadow.count >= fewest,
              f"{why}: {name} needs shadow.count ≥ {fewest} (got {cfg.shadow.count})")
        query = attack.query(settings)
        check(query is None or not QUERIES[query[0]].images_only
              or cfg.dataset.name in DATASETS and DATASETS[cfg.dataset.name].image,
              f"{name} asks {query and query[0]} (attack.augment_flip/augment_shift), which needs "
              f"an image dataset ({[n for n, spec in DATASETS.items() if spec.image]}); "
              f"dataset.name={cfg.dataset.name!r}")


def _check_canaries(cfg: SweepConfig, check: Check) -> None:
    """The canary attacks' settings, and what planting their canaries needs (`jobs.engine.canaries`)."""
    from jobs.attacks.contract import GRADIENT_CANARIES, INPUT_CANARIES, RECORDS, TRAINING_RUNS
    from jobs.engine.canaries import first_linear
    from jobs.models import build_model

    attack = cfg.attack
    kinds = {ATTACKS[name].evaluates: name for name in cfg.grid.attack if name in ATTACKS}
    if INPUT_CANARIES in kinds:
        check(attack.canary_input_recipe != "mislabeled" or cfg.dataset.members is not None
              or cfg.dataset.pool_size is not None,
              f"{kinds[INPUT_CANARIES]}: mislabeled canaries are pool records past every "
              "model's pool: set dataset.members or dataset.pool_size")
    if INPUT_CANARIES in kinds:  # mislabeled ones are counted against the pool by the plan's check
        pool = whole_pool(cfg)
        check(pool is None or attack.canary_input_count <= pool,
              f"attack.canary_input_count={attack.canary_input_count}: more input canaries than "
              f"dataset.name={cfg.dataset.name!r} has pool records ({pool}); every model would "
              f"train on more canaries than records: use at most {pool}")
    if TRAINING_RUNS in kinds:
        check(cfg.dataset.members is not None or cfg.dataset.pool_size is not None,
              f"{kinds[TRAINING_RUNS]}: the crafted weights are pre-trained on pool records past "
              "every model's pool: set dataset.members or dataset.pool_size")
        classes = cfg.dataset.num_classes
        check(attack.canary_final_label < classes,
              f"attack.canary_final_label={attack.canary_final_label}: "
              f"dataset.name={cfg.dataset.name!r} has {classes} classes, labelled 0 … "
              f"{classes - 1}; use one of them")
    # A canary is left out of a model's training with probability 1 − p: at p = 1 every model (every
    # run) holds it, so the audit has no observation without it to tell from.
    audits = [name for name in cfg.grid.attack if name in ATTACKS
              and ATTACKS[name].evaluates != RECORDS]
    always_in = sorted({p for p in sampling_rates(cfg.grid) if p >= 1})
    check(not audits or not always_in,
          f"grid.p={always_in[0] if always_in else 1:g} with {audits}: an audit "
          "compares models (runs) holding its canaries with models without them, and at p = 1 "
          "every one holds them; use p < 1 (the audits' 1/2)")
    if GRADIENT_CANARIES not in kinds:
        return
    name = kinds[GRADIENT_CANARIES]
    check(cfg.train.optimizer == "sgd",
          f"{name}: the white-box adversary reads gradients through SGD's update rule; "
          f"train.optimizer={cfg.train.optimizer!r} is not supported")
    check(INPUT_CANARIES not in kinds or attack.canary_input_recipe != "noise",
          f"{name} with attack.canary_input_recipe=noise: noise canaries touch every input "
          "feature, leaving no weight for gradient canaries; use mislabeled input canaries")
    try:
        model = build_model(cfg.model.name, tuple(cfg.dataset.input_shape), cfg.dataset.num_classes)
    except (RuntimeError, ValueError, TypeError):
        return  # the model-fits-records check names that problem
    layer = first_linear(model)
    check(layer is not None,
          f"{name}: gradient canaries live in the first layer's weights, which must be linear over "
          f"the flattened input; model.name={cfg.model.name!r} is not (use tanh_mlp64, "
          "logistic_regression or relu_mlp256x2)")
    # Each canary is one weight of that layer: more than it has could never be planted (and their
    # masks alone would take memory in proportion), so the count is refused before any data loads.
    check(layer is None or attack.canary_gradient_count <= layer.weight.numel(),
          f"attack.canary_gradient_count={attack.canary_gradient_count}: each gradient canary is a "
          f"weight of {cfg.model.name}'s first layer, which has "
          f"{layer.weight.numel() if layer is not None else 0} on records of shape "
          f"{list(cfg.dataset.input_shape)} (fewer still are free: those of input features no "
          "record touches)")


def check_policies_and_metrics(cfg: SweepConfig, check: Check) -> None:
    """`calibration` and `metrics`: the threshold policy's objective and rates, the bound's form."""
    for section in ("calibration", "metrics"):  # each field's declared rule
        for problem in setting_problems(getattr(cfg, section), f"{section}."):
            check(False, problem)
    if CALIBRATED in cfg.grid.policy:
        lira = _fitting_per_record(cfg)
        check(not lira or cfg.shadow.count >= 4,
              f"shadow.count={cfg.shadow.count}: the calibrated policy scores each shadow against "
              f"the others, so {lira} need at least 4 shadows")
