"""The preflight: a command line's configuration, composed and checked before Ray starts.

`python -m sweeper OVERRIDES` composes its configuration with Hydra and refuses it, exit code 2
and one `error:` message naming every problem (the field, the value given, what is allowed, the
close matches), before anything is written: overrides Hydra cannot parse or merge (types, unknown
keys, unknown config group options, numbers a float cannot hold, group options that are paths
out of `conf/`), then everything `sweeper.checks.validation.validate` checks at the configuration's
`scale`.  A `--multirun` is checked job by job.  What Hydra offers only privately (reading its
command line, expanding a sweep) is reached through `sweeper.checks.hydra_adapter`.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, ConfigTypeError,
                              OmegaConfBaseException, ValidationError)

from sweeper.config import ConfigError, SweepConfig, did_you_mean, register_schema, to_sweep_config
from sweeper.credentials import scrub, scrub_override
from sweeper.checks.hydra_adapter import (option_names, overrides_anywhere, parse_command_line,
                                          sweep_jobs)
from sweeper.paths import option_problem
from sweeper.grid.scale import scaled
from sweeper.checks.validation import validate

if TYPE_CHECKING:  # the planner imports the engine: loaded once a configuration is checked
    from sweeper.grid.plan import SweepPlan

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
CONFIG_NAME = "config"


#: sweeper's own flags, spelled as the overrides they stand for (Hydra's parser knows no others).
FLAGS = {"--replace": "store.replace=true", "--wait": "store.wait=true"}


def option_problems(argv: list[str]) -> list[str]:
    """The words of `argv` that look like options and are none: a typo (`--wiat`), a value
    given to one of sweeper's flags (`--replace=yes`).  Each named with what there is; checked
    before Hydra's parser, which would call every override after it "unrecognized"."""
    known = [*FLAGS, *option_names()]
    problems = []
    for word in argv:
        name, equals, _ = word.partition("=")
        if not word.startswith("-") or word == "-":
            continue
        if name in FLAGS and equals:
            problems.append(f"{word}: {name} takes no value; write {name} alone")
        elif name not in known:
            problems.append(f"{word}: no such option{did_you_mean(name, known)} (sweeper's own "
                            f"are {' and '.join(FLAGS)}; sweeper --help lists Hydra's)")
    return problems


def command_line(argv: list[str]) -> list[str]:
    """`argv` as Hydra's parser takes it: its options first, then the overrides, with the
    quickstart added when no experiment is named.  Hydra's own parser refuses an option between
    or after overrides (`grid.p=[0.5] --cfg job`); here an option may stand anywhere.  sweeper's
    own `FLAGS` (--replace, --wait) become their overrides."""
    if "--version" in argv:
        return argv
    argv = [FLAGS.get(token, token) for token in argv]
    try:
        overrides = overrides_anywhere(argv)
    except SystemExit:  # not Hydra's command line at all: Hydra says why, as it would
        return argv
    options, pending = [], list(overrides)
    for token in argv:
        if pending and token == pending[0]:
            pending.pop(0)
        else:
            options.append(token)
    return [*options, *_with_default_experiment(yaml_specials(overrides))]


def _with_default_experiment(argv: list[str]) -> list[str]:
    """Run the quickstart when the command line names no experiment; `--help` and `--cfg` then
    show the configuration that same command line runs, the quickstart's, not the bare base."""
    names_one = any(a.lstrip("+~").startswith("experiment=") for a in argv)
    return argv if names_one else [*argv, "+experiment=quickstart"]


def own_jobs(args: Any) -> Optional[list[list[str]]]:
    """The jobs this program runs itself, each as its overrides: the one job of a plain command
    line, or every job of a `--multirun` (Hydra's basic sweeper's cross product of lists and
    ranges); None for what Hydra's own entry point runs (help, --cfg, other config trees,
    `hydra.*` overrides).  A `--multirun` never goes to Hydra's launcher, which would write
    `multirun/<date>/<time>/multirun.yaml` and a folder per job into the working folder, every
    override in clear.  Raises ConfigError for a sweep only Hydra's sweeper expands (glob,
    interval): no file of its is wanted."""
    keys = {o.lstrip("+~").split("=", 1)[0].split(".", 1)[0].split("/", 1)[0] for o in args.overrides}
    if (_only_prints(args) or args.config_path or args.config_dir or args.config_name
            or "hydra" in keys):
        return None
    if not args.multirun:
        return [list(args.overrides)]
    try:
        _, jobs = sweep_jobs(args.overrides)
    except Exception as error:  # noqa: BLE001 - Hydra's parse errors and sweeps it cannot split
        raise ConfigError([f"--multirun: its sweep cannot be expanded ahead ({scrub(str(error))}); "
                           "list the values (key=a,b or key=range(1,4))"]) from None
    return [list(job) for job in jobs]


def preflight(overrides: list[str], config_name: str = CONFIG_NAME) -> SweepConfig:
    """The configuration `python -m sweeper OVERRIDES` would run, composed and validated.

    Raises ConfigError naming every problem at once: overrides Hydra cannot parse or merge (types,
    unknown keys, unknown config group options), each with the field, the value given, what is
    allowed and the close matches; then everything `validate` checks on the configuration at its
    `scale`.  Composes in memory only: nothing is written, Ray is not started.  Returns the
    configuration at its scale (`sweeper.grid.scale.scaled`).
    """
    return composed(overrides, config_name)[0].config


def composed(overrides: list[str], config_name: str = CONFIG_NAME) -> tuple[SweepPlan, DictConfig]:
    """`preflight`'s plan, as validation built and checked it (its `config`: the configuration
    at its scale), and Hydra's own settings of the same composition (`hydra.*`: its logging), so
    that a plain run composes once and plans once."""
    overrides = _with_default_experiment(yaml_specials(overrides))
    problems = (_path_problems(overrides, config_name) + _number_problems(overrides)
                + _boolean_problems(overrides) + _output_subdir_problems(overrides))
    if any(problem.startswith("--config-name") for problem in problems):
        raise ConfigError(problems)
    # A boolean given a word is composed at its default: `store.adopt=yes` must not act as true.
    overrides = [o for o in overrides if (_option_override(o) is None or not _group_escapes(o))
                 and not _boolean_problems([o])]
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_schema()  # the schema conf/config.yaml names (`sweep_schema`), and --help's resolver
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="sweeper"):
        def attempt(candidate: list[str]) -> DictConfig:
            return compose(config_name=config_name, overrides=candidate, return_hydra_config=True)

        refused: set[str] = set()  # the keys whose given values Hydra refused
        try:
            raw = attempt(overrides)
        except Exception:  # noqa: BLE001 - Hydra raises many kinds; each override is retried below
            # Hydra stops at its first problem: add the overrides one at a time, so every bad one is
            # named and the good ones are still validated.  Experiments first: they set defaults.
            accepted: list[str] = []
            latest: Optional[DictConfig] = None  # the composition of `accepted`, once it has one
            named = {o for o in overrides if any(p.startswith(f"{scrub_override(o)}:") for p in problems)}
            ordered = sorted(overrides, key=lambda o: not o.lstrip("+~").startswith("experiment="))
            for override in ordered:
                try:
                    latest = attempt([*accepted, override])
                    accepted.append(override)
                except Exception as error:  # noqa: BLE001
                    refused.add(override.lstrip("+~").partition("=")[0])
                    if override not in named:  # a check above named it already: once is enough
                        problems.append(_describe(override, error))
            raw = latest if latest is not None else attempt([])

    data = OmegaConf.to_container(raw, resolve=False)
    if not isinstance(data, dict):  # Hydra composes a mapping
        raise TypeError(f"a composed configuration is a mapping, not {type(data).__name__}")
    hydra_cfg = raw.hydra
    del data["hydra"]
    problems += _strip_unknown_keys(data, SweepConfig, "")  # `+key=value` appends past the schema
    try:
        cfg = to_sweep_config(OmegaConf.create(data))
    except OmegaConfBaseException as error:  # e.g. an interpolation ${…} that resolves to nothing
        raise ConfigError([*problems, _omegaconf_problem(error, data)]) from None
    plan: Optional[SweepPlan] = None
    try:
        plan = validate(scaled(cfg))
    except ConfigError as invalid:
        # Not a refused key again, checked at the default its refusal left (public_size=None)
        problems += [problem for problem in invalid.problems
                     if not any(problem.startswith(f"{key}=") for key in refused)]
    if problems or plan is None:
        raise ConfigError(problems)
    return plan, hydra_cfg


def _output_subdir_problems(overrides: list[str]) -> list[str]:
    """`hydra.output_subdir=DIR`: Hydra would write the config and the overrides as typed, in
    clear text (runtime_env values included), into the working folder; sweeper keeps its
    config, redacted, in the sweep's `sweep.json` and on its MLflow run instead."""
    return [f"{scrub_override(o)}: refused; Hydra would write the configuration and the overrides "
            "as typed (runtime_env values included, unredacted) into the working folder. The "
            "sweep's configuration is kept, credentials masked, in <store.root>/sweeps/<name>/"
            "sweep.json and on its MLflow run"
            for o in overrides if o.lstrip("+~").partition("=")[0] == "hydra.output_subdir"
            and o.partition("=")[2].strip().lower() not in ("null", "none", "")]


def _option_override(override: str) -> Optional[tuple[str, str]]:
    """(group, value) when `override` picks an option of a config group (`+experiment=NAME`,
    `dataset=mnist`, `hydra/job_logging=…`), else None."""
    key, sep, value = override.lstrip("+~").partition("=")
    group = key.split("@", 1)[0]
    if sep and ((CONF_DIR / group).is_dir() or group.startswith("hydra/")):
        return group, value
    return None


def _group_escapes(override: str) -> bool:
    found = _option_override(override)
    return found is not None and any(
        option_problem(found[0], option) for option in _listed(found[1]))


def _listed(value: str) -> list[str]:
    """The options a group override names: one, a list [a,b] or a sweep a,b."""
    return [part.strip() for part in value.strip("[]").split(",") if part.strip()]


def _path_problems(overrides: list[str], config_name: str) -> list[str]:
    """Config group options and a config name that are paths: Hydra would load a YAML from
    outside `conf/` (`+experiment=../../../x`)."""
    problems = []
    for override in overrides:
        found = _option_override(override)
        if found is None:
            continue
        group, value = found
        for option in _listed(value):
            problem = option_problem(group, option)
            if problem:
                known = sorted(path.stem for path in (CONF_DIR / group).glob("*.yaml"))
                problems.append(f"{scrub_override(override)}: {problem}"
                                + (f"; known options are {known}" if known else ""))
                break
    if option_problem("--config-name", config_name):
        problems.append(f"--config-name={config_name}: names a config of the config folder, not "
                        "a path; give another folder with --config-dir")
    return problems


#: YAML's spellings of the float specials (.inf, -.inf, +.inf, .nan; any case), as conf/'s files
#: write them; Hydra's override grammar knows only inf and nan, and reads `.inf` as a string.
_YAML_SPECIAL = re.compile(r"(?<![\w.])([-+]?)\.(inf|nan)(?![\w.])", re.IGNORECASE)


def yaml_specials(overrides: list[str]) -> list[str]:
    """The overrides with YAML's `.inf`/`.nan` in a number field written as Hydra's `inf`/`nan`,
    so `grid.epsilon=[.inf]` means what it means in an experiment file (Hydra alone refuses it:
    "Value '.inf' of type 'str' could not be converted to Float").  A string field keeps them."""
    return [_YAML_SPECIAL.sub(r"\1\2", override) if _takes_numbers(override) else override
            for override in overrides]


def _takes_numbers(override: str) -> bool:
    """Whether the field `override` sets holds floats: a float, or a list of them."""
    key, sep, _ = override.lstrip("+~").partition("=")
    node: Any = SweepConfig
    for part in key.split("."):
        if not (sep and dataclasses.is_dataclass(node) and part in _fields(node)):
            return False
        node = _fields(node)[part]
    args = [a for a in typing.get_args(node) if a is not type(None)]  # Optional[…], list[…]
    return node is float or (len(args) == 1 and args[0] is float)


#: A number written with an exponent (1e400, 2.5E-7); bare digits cannot overflow a float here.
_EXPONENT_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+(?![\w.])")


def _number_problems(overrides: list[str]) -> list[str]:
    """Numbers a 64-bit float cannot hold: Hydra reads 1e400 as inf and 1e-400 as 0 without a
    word, so a typo would silently run a non-private or a δ = 0 sweep."""
    problems = []
    for override in overrides:
        for literal in _EXPONENT_NUMBER.findall(override.partition("=")[2]):
            value = float(literal)
            mantissa = float(re.split("[eE]", literal)[0])
            if math.isinf(value):
                problems.append(f"{scrub_override(override)}: {literal} overflows a 64-bit float "
                                "(largest ~1.8e308) and would be read as inf; write inf if "
                                "infinity is meant")
            elif value == 0 and mantissa != 0:
                problems.append(f"{scrub_override(override)}: {literal} underflows a 64-bit float "
                                "(smallest ~4.9e-324) and would be read as 0; write 0 if zero is "
                                "meant")
    return problems


def _schema_type(full_key: str) -> Any:
    """The schema's type at a dotted key ('train.secure_noise'), or None when it has none."""
    node: Any = SweepConfig
    for part in full_key.split("."):
        if not (dataclasses.is_dataclass(node) and part in _fields(node)):
            return None
        node = _fields(node)[part]
    return node


def _boolean_problems(overrides: list[str]) -> list[str]:
    """A boolean setting given anything but true or false: OmegaConf reads 2, yes or on as true,
    so `train.secure_noise=2` would run a whole sweep on a value nobody meant."""
    problems = []
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if override.startswith("~") or not value or _schema_type(key) is not bool:
            continue
        if value.strip().lower() not in ("true", "false"):
            problems.append(f"{scrub_override(override)}: {key} takes true or false")
    return problems


def _describe(override: str, error: BaseException) -> str:
    """One line for an override Hydra refused: the field, the value given, what is allowed.

    What the user typed and what Hydra says about it are echoed with URI passwords and
    credential-like values (…_KEY=, token=) masked: this line lands in terminals and CI logs.
    """
    from hydra.errors import MissingConfigException, OverrideParseException

    given = scrub_override(override)
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, option = error.missing_cfg_file.rpartition("/")
        options = sorted(error.options)
        return (f"{given}: {group} has no option {option!r}; known options are {options}"
                f"{did_you_mean(option, options)}")
    if isinstance(error, OverrideParseException):
        return (f"{given}: cannot be read ({scrub(error.message.splitlines()[0])}); write "
                "key=value, a list as key=[a,b], ∞ as inf, a value with spaces, commas or '=' "
                "in quotes: key='a=b'")
    cause = error.__cause__
    if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and getattr(cause, "full_key", None):
        return f"{given}: {_unknown_key(str(cause.full_key))}"
    if isinstance(cause, (ValidationError, ConfigTypeError)) and getattr(cause, "full_key", None):
        key = str(cause.full_key)
        reason = scrub(str(cause.msg).splitlines()[0])
        if isinstance(cause, ConfigTypeError):  # "Cannot merge DictConfig with ListConfig"
            reason = "the value's kind (a mapping, a list or a single value) does not fit"
        return f"{given}: {reason}; {key} takes {_expected(key)}"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{given}: " + scrub("; ".join(lines or [type(error).__name__]))


def _omegaconf_problem(error: OmegaConfBaseException, data: dict) -> str:
    """`name='${oops}': Interpolation key 'oops' not found` (the key, its raw value, why)."""
    key = str(getattr(error, "full_key", None) or "")
    value: Any = data
    for part in key.split(".") if key else []:
        value = value.get(part) if isinstance(value, dict) else None
    given = f"{key}={value!r}" if key and value is not None else (key or "configuration")
    return scrub(f"{given}: {str(getattr(error, 'msg', error)).splitlines()[0]}")


def _schema_node(path: list[str]) -> Optional[type]:
    """The dataclass at `path` (keys from the top) of the schema, or None if it is not one."""
    node: Any = SweepConfig
    for key in path:
        hints = _fields(node) if dataclasses.is_dataclass(node) else {}
        if key not in hints:
            return None
        node = hints[key]
    return node if isinstance(node, type) and dataclasses.is_dataclass(node) else None


def _is_mapping_field(path: list[str]) -> bool:
    owner = _schema_node(path[:-1]) if path else None
    kind = _fields(owner).get(path[-1]) if owner is not None else None
    return kind is dict or typing.get_origin(kind) is dict


def _fields(schema: Any) -> dict[str, Any]:  # a dataclass type
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _unknown_key(full_key: str) -> str:
    """`grid.epsilonn is not a key of the configuration; did you mean 'grid.epsilon'? …`."""
    parts = full_key.replace("[", ".").replace("]", "").split(".")
    parent, key = parts[:-1], parts[-1]
    schema = _schema_node(parent)
    where = ".".join(parent) or "the top level"
    if schema is None:
        if _is_mapping_field(parent):  # a free mapping (cluster.runtime_env): Hydra wants a +
            return (f"{where} is a mapping without {key!r} yet: add the key with "
                    f"+{full_key}=…, or give the whole mapping with ++{where}={{…}}")
        return f"{full_key} is not a key of the configuration"
    known = list(_fields(schema))
    prefix = "".join(f"{p}." for p in parent)
    return (f"{full_key} is not a key of the configuration"
            f"{did_you_mean(key, known, prefix)}; {where} takes {known}")


def _expected(full_key: str) -> str:
    """What the schema takes at `full_key` ('grid.epsilon[0]'), in words."""
    parts = full_key.replace("[", ".[").split(".")
    node: Any = SweepConfig
    for part in parts:
        if part.startswith("["):
            args = typing.get_args(node)
            node = args[0] if args else Any
        elif dataclasses.is_dataclass(node) and part in _fields(node):
            node = _fields(node)[part]
        else:
            return "a value of the schema's type"
    return _type_words(node)


def _type_words(kind: Any) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return f"{_type_words(inner[0])} or null"
    if origin is list:
        element = _type_words(args[0]) if args else "values"
        plural = {"an integer": "integers", "a number": "numbers (inf allowed)",
                  "a string": "strings", "true or false": "booleans"}.get(element, element)
        return f"a list of {plural}, e.g. [a,b]"
    if origin is dict or kind is dict:
        return "a mapping, e.g. {key: value}"
    if dataclasses.is_dataclass(kind):
        return f"a mapping with keys {list(_fields(kind))}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        kind, getattr(kind, "__name__", str(kind)))


def _strip_unknown_keys(data: dict, schema: type, prefix: str) -> list[str]:
    """Remove keys the schema does not have (added with `+key=…`), one problem for each."""
    problems = []
    fields = _fields(schema)
    for key in list(data):
        kind = fields.get(str(key))
        if kind is None:
            problems.append(f"+{prefix}{key}={data.pop(key)!r}: {_unknown_key(prefix + str(key))}")
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind) and isinstance(data[key], dict):
            problems += _strip_unknown_keys(data[key], kind, f"{prefix}{key}.")
    return problems


def _only_prints(args: Any) -> bool:
    """Help, info, the config printed, shell completion: nothing runs, nothing to refuse."""
    return bool(args.help or args.hydra_help or args.info or args.cfg or args.shell_completion
                or args.experimental_rerun)


def _preflight_jobs(args: Any) -> list[str]:
    """Every problem of the command line: of its one run, or of each job of a --multirun."""
    if not args.multirun:
        try:
            preflight(args.overrides, args.config_name or CONFIG_NAME)
        except ConfigError as refused:
            return refused.problems
        return []
    # --multirun: each job of the sweep (a=1,2 b=x,y → four) is composed and checked here, so a bad
    # job is refused before the first one starts.  Sweeps the basic sweeper cannot expand (glob,
    # interval) are left to Hydra; run_sweep validates each job again before its Ray starts.
    from hydra.errors import OverrideParseException

    try:
        parsed, jobs = sweep_jobs(args.overrides)
    except OverrideParseException as error:
        return [_describe(error.override, error)]
    except Exception:  # noqa: BLE001
        return []
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    found: list[list[str]] = []
    for job in jobs:
        try:
            preflight(job, args.config_name or CONFIG_NAME)
            found.append([])
        except ConfigError as refused:
            found.append(refused.problems)
    everywhere = set.intersection(*(set(p) for p in found)) if found else set()
    problems = [p for p in found[0] if p in everywhere] if found else []
    for index, (job, job_problems) in enumerate(zip(jobs, found)):
        label = " ".join(o for o in job if o.split("=", 1)[0] in swept)
        problems += [f"job #{index} ({label}): {p}" for p in job_problems if p not in everywhere]
    return problems


def check_command_line(argv: list[str]) -> list[str]:
    """The problems of the configuration this command line would run ([] when there are none, or
    when it only prints: --help, --info, --cfg …; or names another config tree with -cp/-cd,
    which run_sweep still validates)."""
    if "--version" in argv:
        return []
    args = parse_command_line(argv)
    if _only_prints(args) or args.config_path or args.config_dir:
        return []
    return _preflight_jobs(args)

