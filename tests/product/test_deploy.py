"""deploy/: the image, the cluster definitions and the service stack keep their promises.

Nothing here needs Docker, a cloud account or Kubernetes: every file is parsed and checked for
what matters to a sweep run beyond one machine: the Ray cluster launcher config against Ray's own
schema, GPUs where the trainers go, the dashboard on loopback, token auth on every Ray process,
credentials only ever from Secrets or the environment, ports published on 127.0.0.1 only, and
every `python -m sweeper` command (the RayJob's entrypoint, deploy/README.md's examples) composing
with Hydra against conf/ into a configuration that validates.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERAY = DEPLOY / "kuberay"
#: An environment variable whose name holds one of these carries a credential.
CREDENTIAL_WORDS = ("KEY", "SECRET", "PASSWORD", "TOKEN")
#: The image placeholder that deploy/README.md's `sed` commands replace.
IMAGE_PLACEHOLDER = "REGISTRY/sweeper:latest"
TOKEN_SECRET = ("sweeper-ray-token", "auth_token")


def looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in CREDENTIAL_WORDS)


def load(path: Path):
    return yaml.safe_load(path.read_text())


# --- shell command lines -------------------------------------------------------------------------

SEPARATORS = {";", "&&", "||", "|", "&", "(", ")"}


def simple_commands(line: str) -> list[tuple[dict[str, str], list[str]]]:
    """The simple commands of one shell line: (VAR=value prefixes, argv), split at ; && || |."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    for token in [*lexer, ";"]:
        if token in SEPARATORS:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    parsed = []
    for argv in commands:
        env = {}
        while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            name, value = argv.pop(0).split("=", 1)
            env[name] = value
        parsed.append((env, argv))
    return parsed


def flag(argv: list[str], name: str) -> str | None:
    """The value of --name=value or --name value in argv, None when absent."""
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def shell_lines(text: str) -> list[str]:
    """Logical lines: backslash continuations joined, blank lines and whole-line comments dropped."""
    lines, pending = [], ""
    for raw in text.splitlines():
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = (pending + stripped).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def ray_starts(commands: list[str]) -> list[tuple[dict[str, str], list[str]]]:
    return [(env, argv) for line in commands for env, argv in simple_commands(line)
            if argv[:2] == ["ray", "start"]]


def sweeper_argv(argv: list[str]) -> list[str] | None:
    """The Hydra arguments of `[…/]python -m sweeper ARGS`, None when argv runs something else."""
    for i in range(len(argv) - 2):
        if (argv[i] == "python" or argv[i].endswith("/python")) and argv[i + 1:i + 3] == ["-m", "sweeper"]:
            return argv[i + 3:]
    return None


@pytest.fixture(scope="module")
def validated(compose_config):
    """Compose `python -m sweeper ARGS` as the entry point would, then validate it as a sweep does."""
    from sweeper.checks.validation import validate
    from sweeper.grid.scale import scaled

    def run(args: list[str]):
        experiments = [a for a in args if re.match(r"^[+~]?experiment=", a)]
        assert len(experiments) <= 1, args
        name = experiments[0].split("=", 1)[1] if experiments else "quickstart"  # as __main__ does
        cfg = compose_config(name, [a for a in args if a not in experiments])
        with contextlib.chdir(ROOT):  # a relative store.root is checked where the README runs it
            validate(scaled(cfg))
        return cfg

    return run


# --- the Ray cluster launcher --------------------------------------------------------------------

@pytest.fixture(scope="module")
def launcher():
    return load(DEPLOY / "cluster.yaml")


def test_cluster_yaml_validates_against_rays_own_schema(launcher):
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.commands import prepare_config
    from ray.autoscaler._private.util import validate_config

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(launcher, schema)
    validate_config(launcher)  # the schema again, plus the head type and the worker counts
    validate_config(prepare_config(launcher))  # what `ray up` checks after filling in defaults


def test_cluster_has_a_cpu_head_and_gpu_workers(launcher):
    types = launcher["available_node_types"]
    head = types[launcher["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu_types = [name for name, spec in types.items()
                 if name != launcher["head_node_type"] and spec["resources"].get("GPU", 0) >= 1]
    assert gpu_types, "no worker type offers a GPU"
    for name in gpu_types:
        spec = types[name]
        assert spec.get("max_workers", 0) >= 1 and launcher["max_workers"] >= 1
        assert spec["node_config"]["InstanceType"].startswith(("g", "p")), spec["node_config"]


def test_head_binds_the_dashboard_to_loopback_and_starts_with_token_auth(launcher):
    heads = ray_starts(launcher["head_start_ray_commands"])
    assert len(heads) == 1 and "--head" in heads[0][1]
    env, argv = heads[0]
    assert flag(argv, "--dashboard-host") == "127.0.0.1"
    assert flag(argv, "--port") == "6379"
    assert env.get("RAY_AUTH_MODE") == "token"


def test_workers_join_the_head_with_token_auth(launcher):
    workers = ray_starts(launcher["worker_start_ray_commands"])
    assert len(workers) == 1
    env, argv = workers[0]
    assert flag(argv, "--address") == "$RAY_HEAD_IP:6379"
    assert env.get("RAY_AUTH_MODE") == "token"


def test_every_node_gets_the_same_token_and_the_container_token_mode(launcher):
    assert launcher["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    assert "--env RAY_AUTH_MODE=token" in launcher["docker"]["run_options"]
    assert launcher["docker"]["image"] == IMAGE_PLACEHOLDER


# --- KubeRay -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def raycluster():
    return load(KUBERAY / "raycluster.yaml")


@pytest.fixture(scope="module")
def rayjob():
    return load(KUBERAY / "rayjob.yaml")


@pytest.fixture(scope="module")
def networkpolicy():
    return load(KUBERAY / "networkpolicy.yaml")


@pytest.fixture(scope="module")
def cluster_specs(raycluster, rayjob):
    return {"RayCluster": raycluster["spec"], "RayJob": rayjob["spec"]["rayClusterSpec"]}


def ray_containers(spec: dict) -> list[tuple[str, dict]]:
    """(group, container) for the Ray container of the head and of every worker group."""
    found = [("head", spec["headGroupSpec"]["template"]["spec"]["containers"][0])]
    for group in spec["workerGroupSpecs"]:
        found.append((group["groupName"], group["template"]["spec"]["containers"][0]))
    return found


def env_of(container: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def env_lists(node, where="") -> list[tuple[str, list]]:
    """Every `env:` list anywhere in a manifest, with where it is."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                found.append((f"{where}.env", value))
            else:
                found += env_lists(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += env_lists(value, f"{where}[{i}]")
    return found


def test_kuberay_manifests_are_ray_io_v1(raycluster, rayjob, networkpolicy):
    assert (raycluster["apiVersion"], raycluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    assert (networkpolicy["apiVersion"], networkpolicy["kind"]) == ("networking.k8s.io/v1",
                                                                    "NetworkPolicy")


def test_ray_version_is_the_installed_one(cluster_specs):
    major_minor = ".".join(version("ray").split(".")[:2])
    for kind, spec in cluster_specs.items():
        assert spec["rayVersion"].startswith(major_minor + "."), kind


def test_each_cluster_has_a_gpu_worker_group(cluster_specs):
    for kind, spec in cluster_specs.items():
        gpu_groups = []
        for group in spec["workerGroupSpecs"]:
            container = group["template"]["spec"]["containers"][0]
            limits = container.get("resources", {}).get("limits", {})
            if int(limits.get("nvidia.com/gpu", 0)) >= 1:
                gpu_groups.append(group)
                assert group["maxReplicas"] >= 1
                tolerations = group["template"]["spec"].get("tolerations", [])
                assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations), group["groupName"]
        assert gpu_groups, f"{kind}: no worker group asks for nvidia.com/gpu"
        head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert "nvidia.com/gpu" not in head.get("resources", {}).get("limits", {}), kind


def test_the_standing_clusters_dashboard_is_loopback_only(raycluster):
    assert raycluster["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "127.0.0.1"


def test_the_rayjobs_dashboard_is_open_only_to_the_operator_and_own_pods(rayjob, networkpolicy):
    """The operator polls RayJob status through the head Service, so a RayJob's dashboard cannot
    be loopback-only; then the network policy and the token must close it to everyone else."""
    spec = rayjob["spec"]["rayClusterSpec"]
    if spec["headGroupSpec"]["rayStartParams"].get("dashboard-host") == "127.0.0.1":
        return
    assert spec["authOptions"] == {"mode": "token", "secretName": TOKEN_SECRET[0]}
    head_labels = spec["headGroupSpec"]["template"]["metadata"]["labels"]
    selected = networkpolicy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= head_labels.items(), "the policy does not cover the RayJob's head"
    assert "Ingress" in networkpolicy["spec"]["policyTypes"]
    for rule in networkpolicy["spec"]["ingress"]:
        assert rule.get("from"), "an ingress rule without `from` admits every pod"
        for peer in rule["from"]:
            if set(peer) == {"podSelector"}:  # this namespace: only sweeper's own pods
                assert peer["podSelector"]["matchLabels"].items() <= head_labels.items()
            else:  # anyone else: the dashboard port only
                assert [p["port"] for p in rule.get("ports", [])] == [8265], rule


def test_token_auth_on_every_ray_container(raycluster, rayjob, cluster_specs):
    for kind, spec in cluster_specs.items():
        assert spec["authOptions"] == {"mode": "token", "secretName": TOKEN_SECRET[0]}, kind
        envs = [(group, env_of(c)) for group, c in ray_containers(spec)]
        envs.append(("autoscaler", {e["name"]: e for e in spec["autoscalerOptions"]["env"]}))
        for group, env in envs:
            assert env["RAY_AUTH_MODE"].get("value") == "token", (kind, group)
            ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == TOKEN_SECRET, (kind, group)
    submitter = rayjob["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    assert env_of(submitter)["RAY_AUTH_MODE"]["value"] == "token"
    assert env_of(submitter)["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == TOKEN_SECRET[0]


def test_no_literal_secret_in_any_kuberay_manifest():
    checked = 0
    for path in sorted(KUBERAY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            for where, entries in env_lists(document):
                for entry in entries:
                    name = entry["name"]
                    if looks_secret(name) or name.startswith("MLFLOW_TRACKING_USERNAME"):
                        checked += 1
                        assert "value" not in entry, f"{path.name}{where}: {name} is a literal"
                        ref = entry["valueFrom"]["secretKeyRef"]
                        assert ref["name"] and ref["key"], f"{path.name}{where}: {name}"
    assert checked >= 10


def test_pods_get_the_credentials_their_tasks_need(cluster_specs):
    """Tasks write the S3 store on every node; only the driver, on the head, talks to MLflow."""
    for kind, spec in cluster_specs.items():
        for group, container in ray_containers(spec):
            env = env_of(container)
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                assert env[name]["valueFrom"]["secretKeyRef"]["key"] == name, (kind, group)
            if group == "head":
                for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
                    assert env[name]["valueFrom"]["secretKeyRef"]["key"] == name, (kind, name)


def test_every_kuberay_image_is_the_readme_placeholder(cluster_specs, rayjob):
    images = [c["image"] for spec in cluster_specs.values() for _, c in ray_containers(spec)]
    images.append(rayjob["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"])
    assert set(images) == {IMAGE_PLACEHOLDER}
    for spec in cluster_specs.values():
        pod = spec["headGroupSpec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True


def test_rayjob_runs_the_sweep_and_cleans_up(rayjob, validated):
    spec = rayjob["spec"]
    env, argv = simple_commands(spec["entrypoint"])[0]
    assert not env and argv[:3] == ["python", "-m", "sweeper"]
    cfg = validated(sweeper_argv(argv))
    assert cfg.name == "cifar10_lira"
    assert cfg.cluster.address == "auto"
    assert cfg.store.root == "s3://sweeper-runs/runs"
    assert cfg.tracking.uri == "http://mlflow:5000"
    assert cfg.resources.train.num_gpus == 0.25
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] > 0 and spec["activeDeadlineSeconds"] > 0


# --- docker compose ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose():
    return load(DEPLOY / "compose.yaml")


INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[?-][^}]*)?\}")


def published_ports(service: dict) -> list[str]:
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):  # long syntax
            ports.append(f"{port.get('host_ip', '')}:{port.get('published', '')}:{port['target']}")
        else:
            ports.append(str(port))
    return ports


def test_compose_runs_mlflow_postgres_minio_and_makes_the_buckets(compose):
    services = compose["services"]
    assert {"mlflow", "postgres", "minio"} <= set(services)
    makers = [s for s in services.values() if str(s.get("image", "")).startswith("minio/mc:")]
    assert len(makers) == 1
    script = " ".join(makers[0]["command"])
    assert "mc mb" in script and "local/mlflow-artifacts" in script and "local/sweeper-runs" in script
    assert makers[0]["depends_on"]["minio"]["condition"] == "service_healthy"
    for name, service in services.items():
        image = service.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image"


def test_every_published_port_is_loopback_only(compose):
    published = [(name, port) for name, s in compose["services"].items()
                 for port in published_ports(s)]
    assert {name for name, _ in published} >= {"mlflow", "minio"}
    for name, port in published:
        assert port.startswith("127.0.0.1:"), f"{name} publishes {port}"
    assert not published_ports(compose["services"]["postgres"])


def test_compose_credentials_come_from_the_environment(compose):
    required = set()
    for name, service in compose["services"].items():
        environment = service.get("environment", {})
        assert isinstance(environment, dict), name
        for variable, value in environment.items():
            if looks_secret(variable) or variable.endswith(("_USER", "USERNAME")):
                match = INTERPOLATION.fullmatch(str(value))
                assert match and match.group(2).startswith(":?"), f"{name}.{variable}={value!r}"
                required.add(match.group(1))
    assert {"POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD"} <= required
    text = (DEPLOY / "compose.yaml").read_text()
    assert not re.search(r"(?i)password\s*[:=]\s*(?!\$\{)[\"']?\w", text.replace("PGPASSWORD", "")), \
        "a literal password in compose.yaml"


def test_env_example_names_every_variable_without_values(compose):
    text = (DEPLOY / "compose.yaml").read_text()
    needed = {m.group(1) for m in INTERPOLATION.finditer(text) if (m.group(2) or "").startswith(":?")}
    example = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = line.split("=", 1)
            example[name.strip()] = value.strip()
    assert needed <= set(example), f"missing from .env.example: {needed - set(example)}"
    assert all(value == "" for value in example.values()), "values belong in deploy/.env only"
    ignored = (DEPLOY / ".gitignore").read_text().split()
    assert ".env" in ignored


def test_mlflow_server_uses_postgres_and_s3_without_a_password_in_its_uri(compose):
    mlflow = compose["services"]["mlflow"]
    argv = mlflow["command"]
    assert argv[:2] == ["mlflow", "server"]
    # Compose substitutes ${VAR:?…} before the server sees it; a stand-in value per variable.
    backend = urlsplit(INTERPOLATION.sub(lambda m: m.group(1).lower(), flag(argv, "--backend-store-uri")))
    assert backend.scheme.startswith("postgresql") and backend.hostname == "postgres"
    assert backend.password is None
    assert flag(argv, "--artifacts-destination") == "s3://mlflow-artifacts"
    assert (flag(argv, "--host"), flag(argv, "--port")) == ("0.0.0.0", "5000")
    assert INTERPOLATION.fullmatch(mlflow["environment"]["PGPASSWORD"])
    assert mlflow["environment"]["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    assert mlflow["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert set(mlflow["depends_on"]) >= {"postgres", "createbuckets"}


def test_mlflow_image_has_the_database_and_s3_drivers_and_our_mlflow(compose):
    build = compose["services"]["mlflow"]["build"]
    dockerfile = (DEPLOY / build["context"] / build["dockerfile"]).read_text()
    installs = " ".join(args for op, args in dockerfile_instructions(dockerfile) if op == "RUN")
    assert re.search(r"\bboto3\b", installs)
    # The server tests/test_sweeper/tracking/test_postgres_tracking.py runs on a real PostgreSQL: same MLflow, same
    # driver (the one compose.yaml's URI names), SQLAlchemy pinned so its default cannot move.
    for package in ("mlflow", "psycopg2-binary", "sqlalchemy"):
        pinned = re.search(rf"(?<![\w-]){re.escape(package)}==(\S+)", installs)
        assert pinned, f"{package} is not pinned in mlflow.Dockerfile"
        if package != "sqlalchemy":  # MLflow's dependency, not ours: its version may move here
            assert pinned.group(1) == version(package), package
    users = [args for op, args in dockerfile_instructions(dockerfile) if op == "USER"]
    assert users and users[-1] not in ("root", "0")


# --- the image -----------------------------------------------------------------------------------

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    instructions = []
    for line in shell_lines(text):
        op, _, args = line.partition(" ")
        instructions.append((op.upper(), args.strip()))
    return instructions


@pytest.fixture(scope="module")
def dockerfile():
    return dockerfile_instructions((DEPLOY / "Dockerfile").read_text())


def test_image_is_cuda_based_and_pinned(dockerfile):
    bases = [args for op, args in dockerfile if op == "FROM"]
    assert len(bases) == 1
    image, _, tag = bases[0].partition(":")
    assert image in ("nvidia/cuda", "pytorch/pytorch"), image
    assert "cuda" in tag or image == "nvidia/cuda"
    assert tag and tag != "latest" and re.match(r"^\d+\.\d+", tag), bases[0]


def test_image_installs_the_project_on_python_311(dockerfile):
    runs = " ".join(args for op, args in dockerfile if op == "RUN")
    assert "python3.11" in runs
    assert re.search(r"pip install [^&;]*(-e )?\.(\s|$)", runs), "the project is never installed"
    copied = " ".join(args for op, args in dockerfile if op == "COPY")
    for needed in ("pyproject.toml", "sweeper/", "jobs/", "conf/", "README.md"):
        assert needed in copied, needed
    assert any(op == "WORKDIR" for op, _ in dockerfile)


def test_image_runs_as_a_non_root_user(dockerfile):
    users = [args for op, args in dockerfile if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, (op, _) in enumerate(dockerfile) if op == "USER")
    assert all(op not in ("RUN", "COPY", "ADD") or "--chown" in args
               for op, args in dockerfile[last_user:]), "root-owned steps after USER"


def test_image_bakes_in_no_secret(dockerfile):
    for op, args in dockerfile:
        if op in ("ENV", "ARG"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", args) or [args.split()[0]]
            assert not any(looks_secret(n) for n in names), f"{op} {args}"
        if op in ("COPY", "ADD"):
            assert ".env" not in args and "auth_token" not in args, args


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rule, simplified: the last matching pattern wins; a pattern matches a path or any
    of its parent folders; `**` spans folders, `*` stays within one."""
    def regex(pattern: str) -> re.Pattern:
        out = ""
        for part in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
            out += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return re.compile(out)

    parents = [path] + ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if any(regex(pattern.lstrip("!")).fullmatch(p) for p in parents):
            excluded = not negated
    return excluded


def test_build_context_holds_the_project_and_nothing_secret(dockerfile):
    text = (DEPLOY / "Dockerfile.dockerignore").read_text()
    patterns = [line.strip() for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    for path in (".env", "deploy/.env", "runs/mlflow.db", ".venv/bin/python", ".git/config",
                 "sweeper/__pycache__/x.pyc", "tests/conftest.py", "sweeper.egg-info/PKG-INFO"):
        assert dockerignore_excludes(patterns, path), f"{path} would be sent to the build"
    sources = [args.split()[:-1] for op, args in dockerfile if op == "COPY"]
    for source in (s for group in sources for s in group if not s.startswith("--")):
        files = [p for p in (ROOT / source).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        files = files or [ROOT / source]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            assert not dockerignore_excludes(patterns, relative), f"COPY {source}: {relative} ignored"


# --- deploy/README.md ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def readme_commands() -> list[str]:
    text = (DEPLOY / "README.md").read_text()
    blocks = re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.M | re.S)
    return [line for block in blocks for line in shell_lines(block)]


def test_every_sweep_command_in_the_readme_composes(readme_commands, validated):
    sweeps = [args for line in readme_commands for _, argv in simple_commands(line)
              if (args := sweeper_argv(argv)) is not None]
    assert len(sweeps) >= 4, sweeps
    for args in sweeps:
        validated(args)


def test_readme_two_node_cluster_is_token_authenticated_on_loopback(readme_commands):
    starts = ray_starts(readme_commands)
    head = [argv for _, argv in starts if "--head" in argv]
    nodes = [argv for _, argv in starts if "--head" not in argv]
    assert len(head) == 1 and nodes
    assert flag(head[0], "--dashboard-host") == "127.0.0.1" and flag(head[0], "--port") == "6379"
    assert all(flag(argv, "--address") == "127.0.0.1:6379" for argv in nodes)
    temp_dirs = [flag(argv, "--temp-dir") for argv in head + nodes]
    assert None not in temp_dirs and len(set(temp_dirs)) == len(temp_dirs)
    exports = [argv for line in readme_commands for _, argv in simple_commands(line)
               if argv[:1] == ["export"]]
    assert any("RAY_AUTH_MODE=token" in argv for argv in exports)
    sweeps = [sweeper_argv(argv) for line in readme_commands for _, argv in simple_commands(line)]
    assert any(a and "cluster.address=127.0.0.1:6379" in a and "cluster=remote" in a for a in sweeps)


def test_readme_fills_the_placeholders_the_manifests_hold(readme_commands):
    placeholders = {"REGISTRY/sweeper:latest", "REPLACE_WITH_AMI_ID"}
    for line in readme_commands:
        for _, argv in simple_commands(line):
            if argv[:1] != ["sed"]:
                continue
            targets = [a for a in argv if a.startswith("deploy/")]
            assert targets, line
            for expression in (a for a in argv if a.startswith("s#")):
                placeholder = expression.split("#")[1]
                assert placeholder in placeholders, expression
                for target in targets:
                    assert placeholder in (ROOT / target).read_text(), (placeholder, target)
    text = " ".join(readme_commands)
    for path in set(re.findall(r"\bdeploy/[\w./-]+", text)) - {"deploy/.env"}:  # .env: yours
        assert (ROOT / path).exists(), path


def test_readme_covers_every_way_to_run(readme_commands):
    text = (DEPLOY / "README.md").read_text()
    commands = "\n".join(readme_commands)
    for needed in ("docker build -f deploy/Dockerfile -t sweeper:latest .", "ray up ", "ray attach ",
                   "ray job submit ", "ray down ", "helm install ", "kubectl apply -f deploy/kuberay/",
                   "docker compose -f deploy/compose.yaml up", "kubectl port-forward "):
        assert needed in commands, needed
    for needed in ("ray get-auth-token", "ssh -L 8265:127.0.0.1:8265", "AWS_ACCESS_KEY_ID",
                   "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "endpoint_override=",
                   "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        assert needed in text, needed
