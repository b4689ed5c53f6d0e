"""`python -m bench.train --routes`: the per-layer table behind `_cpu_method`'s and
`keeps_samples`' choices (its figures are the machine's, so only their presence and the picks
are checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_route_table_times_each_route_a_layer_takes_and_marks_the_engines_pick():
    done = subprocess.run([sys.executable, "-m", "bench.train", "--routes", "--models",
                           "mnist_cnn", "--batch-sizes", "16", "--rounds", "1", "--device", "cpu",
                           "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    # mnist_cnn's two convolutions; each takes every route but shifted products (stride 2).
    # By hand: 169 positions · 64 and 25 · 256 receptive-field floats a record, both under
    # 2^15, gathered as NHWC rows (runs of 8 and 64 floats against 1 at stride 2).
    assert [row["layer"] for row in rows] == ["1→16 k8 s2 on 28×28", "16→32 k4 s2 on 12×12"]
    # The first's norms per record (169·(16 + 64) ≥ 16·64), the second's of Gram form
    # (25·(32 + 256) < 32·256); both keep their per-record gradients on a CPU.
    assert [row["gram_norms"] for row in rows] == [False, True]
    for row in rows:
        assert row["picked"] == "rows" and row["keeps_samples"]
        assert {key for key in row if key.endswith("_ms")} == {
            "grouped_ms", "unfold_ms", "rows_ms", "keep_ms", "book_keep_ms"}
        assert all(row[key] > 0 for key in row if key.endswith("_ms"))
