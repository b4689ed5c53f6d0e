"""Ray's GPU scheduling of training tasks, on a machine without a GPU: a real Ray told it has
one GPU (Ray schedules declared resources and sets CUDA_VISIBLE_DEVICES whatever the hardware),
the sweep's own submission (`sweeper.cluster.submission.submit_training`), real training tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]

#: Its own Ray with a dashboard and four trainings (30 s): `make test-slow`; the request's
#: arithmetic (`group_resources`) is in tests/test_jobs/engine/test_stacked.py, run by `make test`.
pytestmark = pytest.mark.slow

DRIVER = textwrap.dedent('''
    import json, sys
    from pathlib import Path

    import ray
    from ray.util.state import list_tasks

    from conftest import build_tiny_config
    from sweeper.grid.plan import build_plan
    from sweeper.cluster.submission import submit_training
    from sweeper.store.artifacts import ArtifactStore
    from sweeper.grid.sweep_data import sweep_data

    root = Path(sys.argv[1])
    context = ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=True,
                       dashboard_host="127.0.0.1", dashboard_port=0, configure_logging=False)
    cfg = build_tiny_config(root)
    cfg.model.name = "logistic_regression"
    cfg.grid.epsilon, cfg.grid.p, cfg.shadow.count = [4.0], [0.3, 0.7], 2
    cfg.train.models_per_task, cfg.train.device = 2, "cpu"
    cfg.resources.train.num_gpus = 0.25
    plan = build_plan(cfg)
    ArtifactStore(cfg.store.root).mark()  # a store, as a sweep's driver makes it before any task
    data_ref = ray.put(sweep_data(plan, Path(cfg.dataset.data_dir)))
    refs = submit_training(plan, list(plan.models.values()), data_ref, cfg.store.root,
                           dict(num_cpus=1, num_gpus=0.25, max_retries=0, retry_exceptions=[]))
    ray.get(list(refs.values()))
    store = ArtifactStore(cfg.store.root)
    tasks = [t for t in list_tasks(address=f"http://{context.dashboard_url}", detail=True,
                                   limit=1000) if t.name.startswith("train")]
    print(json.dumps({
        "models": len(plan.models),
        "visible": [store.read_model_meta(key)["visible_gpus"] for key in plan.models],
        "asked": sorted(t.required_resources.get("GPU", 0.0) for t in tasks),
    }))
    ray.shutdown()
''')


def test_each_training_task_gets_its_models_share_of_a_gpu_and_the_gpu_itself(tmp_path):
    """Four models, K = 2 per task at 0.25 GPU a model: two tasks, each asking Ray for 0.5 of
    the one GPU (K × the model's share), each run with CUDA_VISIBLE_DEVICES naming it, which
    every model's metadata records."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=240, cwd=TESTS,
                          env={**os.environ, "PYTHONPATH": str(TESTS)})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["models"] == 4
    assert report["visible"] == ["0"] * 4
    assert report["asked"] == [0.5, 0.5]
