"""What the private Hydra functions behind `sweeper.checks.hydra_adapter` give, pinned on concrete inputs.

The preflight reads Hydra's command line and expands `--multirun` sweeps through two private
Hydra functions; a Hydra release that changes either fails here, in one place.
"""

from __future__ import annotations

import pytest
from hydra.errors import HydraException, OverrideParseException

from sweeper.checks.hydra_adapter import overrides_anywhere, parse_command_line, sweep_jobs


def test_a_bare_command_line_has_every_field_the_preflight_reads_unset():
    args = parse_command_line([])
    assert args.overrides == []
    for flag in ("multirun", "help", "hydra_help", "shell_completion"):
        assert getattr(args, flag) is False, flag
    for option in ("cfg", "info", "experimental_rerun", "config_path", "config_dir", "config_name"):
        assert getattr(args, option) is None, option


def test_options_come_first_and_overrides_keep_their_prefixes():
    args = parse_command_line(["--multirun", "--cfg", "job", "-cn", "other", "-cp", "path",
                               "-cd", "folder", "grid.p=[0.5]", "+experiment=quickstart", "~seed"])
    assert args.multirun is True and args.cfg == "job"
    assert (args.config_name, args.config_path, args.config_dir) == ("other", "path", "folder")
    assert args.overrides == ["grid.p=[0.5]", "+experiment=quickstart", "~seed"]
    assert parse_command_line(["--info"]).info == "all"
    assert parse_command_line(["--help"]).help is True
    assert parse_command_line(["--hydra-help"]).hydra_help is True


def test_an_option_after_the_overrides_is_refused_by_the_plain_parser():
    with pytest.raises(SystemExit) as refused:
        parse_command_line(["grid.p=[0.5]", "--cfg", "job", "seed=1"])
    assert refused.value.code == 2


def test_overrides_are_found_around_options():
    assert overrides_anywhere(["grid.p=[0.5]", "--cfg", "job", "seed=1"]) == ["grid.p=[0.5]", "seed=1"]
    assert overrides_anywhere(["--multirun", "a=1,2"]) == ["a=1,2"]
    assert overrides_anywhere([]) == []
    with pytest.raises(SystemExit) as refused:
        overrides_anywhere(["--no-such-option"])
    assert refused.value.code == 2


def test_a_sweep_expands_into_the_cross_product_last_key_fastest():
    parsed, jobs = sweep_jobs(["a=1,2", "b=x,y", "+c=3", "d=[1,2]"])
    assert jobs == [["a=1", "b=x", "+c=3", "d=[1,2]"], ["a=1", "b=y", "+c=3", "d=[1,2]"],
                    ["a=2", "b=x", "+c=3", "d=[1,2]"], ["a=2", "b=y", "+c=3", "d=[1,2]"]]
    assert [o.get_key_element() for o in parsed if o.is_sweep_override()] == ["a", "b"]
    assert [o.get_key_element() for o in parsed] == ["a", "b", "+c", "d"]


def test_range_and_choice_sweeps_expand_and_a_deletion_is_spelled_out():
    assert sweep_jobs(["a=range(1,3)"])[1] == [["a=1"], ["a=2"]]
    assert sweep_jobs(["~e", "f=choice(1,2)"])[1] == [["~e=null", "f=1"], ["~e=null", "f=2"]]
    assert sweep_jobs([])[1] == [[]]


def test_an_unreadable_override_names_itself_and_an_interval_is_not_expanded():
    with pytest.raises(OverrideParseException) as unreadable:
        sweep_jobs(["seed=1", "a=[1"])
    assert unreadable.value.override == "a=[1"
    with pytest.raises(HydraException, match="does not support sweep type"):
        sweep_jobs(["a=interval(0,1)"])
