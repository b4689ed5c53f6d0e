"""`python -m bench.accounting`: the PRV noise search and the audits' inner loops, each against
the reference it replaced (its figures are the machine's: only their presence is checked)."""

from __future__ import annotations

import pytest

from bench import accounting as bench_accounting

CHEAP = ["--epsilon", "1", "--sample-rate", "0.25", "--steps", "8", "--repeat", "1",
         "--calls", "10"]


def test_each_figure_is_printed_against_its_reference(capsys):
    assert bench_accounting.main(CHEAP) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("PRV noise search, ε=1 q=0.25 T=8 δ=1e-05 (same σ): Opacus ")
    assert [line.split(":")[0] for line in lines[1:]] == [
        "Gaussian profile at one ε", "Clopper–Pearson end", "log-sum-exp of 64"]


def test_a_search_that_disagrees_with_opacus_is_refused_not_timed(monkeypatch):
    """Plant a bug (a σ a tenth too large): the figure would time a different answer."""
    from jobs.engine import accounting

    real = accounting._search_noise.__wrapped__

    def wrong(*args):
        return 1.1 * real(*args)

    monkeypatch.setattr(accounting._search_noise, "__wrapped__", wrong)
    with pytest.raises(SystemExit, match="the searches disagree"):
        bench_accounting.main(CHEAP)
