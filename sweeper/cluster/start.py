"""How the sweep meets Ray (`ray_session`): a local Ray of its own (`sweeper.cluster.local_ray`,
its dashboard `sweeper.cluster.dashboard`), started again once when it timed out, or a cluster by
address, probed first (`sweeper.cluster.address`) and connected to in bounded time
(`sweeper.cluster.bounded_connect`).  (docs/mlflow-and-ray.md and docs/confinement.md.)

* **Two local Rays starting at the same moment** on a loaded machine can miss Ray's 30 s for the
  node to register ("The current node timed out during startup"): the start is tried once more
  in a fresh session, the first one's processes killed, then refused in one line
  (`RayStartFailed`).
* **Token authentication** stays on: an environment that turns it off is refused
  (`require_token_auth`) unless `cluster.allow_no_auth` says so.
* **Tasks Ray's memory monitor kills** are retried as often as the sweep's own bound, not for
  ever (`oom_retries`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Iterator, Optional

import jobs
import sweeper
from sweeper import interrupts
from sweeper.cluster.address import require_reachable, submitted_job_address
from sweeper.cluster.bounded_connect import bounded
from sweeper.cluster.dashboard import dashboard_failure, dashboard_port
from sweeper.cluster.local_ray import LocalRay, dynamic_agent_port, environment, local_ray_confined
from sweeper.config import ConfigError, SweepConfig

logger = logging.getLogger(__name__)

#: Ray retries a task its memory monitor killed without end unless its owner (this driver) sets
#: a bound: `RAY_task_oom_retries`, read once as the driver's Ray starts (default -1: for ever).
OOM_RETRIES_VARIABLE = "RAY_task_oom_retries"


def oom_retries(cfg: SweepConfig) -> dict[str, str]:
    """The variable that bounds the retries of tasks Ray's memory monitor kills by the sweep's
    own bound (the larger of `resources.train.max_retries` and `resources.attack.max_retries`),
    set while Ray starts (`environment`) unless the environment sets one: each is then retried
    that often, then fails as transient with its reason, instead of again and again."""
    if OOM_RETRIES_VARIABLE in os.environ:
        return {}
    return {OOM_RETRIES_VARIABLE: str(max(cfg.resources.train.max_retries,
                                          cfg.resources.attack.max_retries))}


def require_token_auth(allow_no_auth: bool) -> None:
    """Refuse (ConfigError, before local Ray starts) an environment that turns Ray's token
    authentication off (RAY_AUTH_MODE other than token; unset, Ray turns it on for a cluster it
    starts), unless `cluster.allow_no_auth` says so: the dashboard and the job API would run
    code for anyone who reaches them."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is None or mode.lower() == "token" or allow_no_auth:
        return
    raise ConfigError([f"RAY_AUTH_MODE={mode} in the environment turns off the token "
                       "authentication of the Ray this sweep starts: its dashboard and job API "
                       "would run code for anyone who reaches them. Unset it (or set it to "
                       "token), or accept that with cluster.allow_no_auth=true"])


@contextlib.contextmanager
def ray_session(cfg: SweepConfig) -> Iterator[Optional[str]]:
    """Join the Ray this process already runs (tests), connect to `cluster.address` (refused
    after `cluster.connect_timeout_s` when nothing answers) or to the cluster running this process
    as a Ray job (`ray job submit`, `submitted_job_address`), or start a new local Ray ("local":
    never a stale cluster found on the machine) that listens on loopback only and dies with this
    process (`local_ray_confined`).

    The driver's job carries the sweep's name as `job_name` metadata, the column the Ray
    dashboard's Jobs page shows, so the sweep is found by name there (a `ray job submit
    --metadata-json` job_name wins)."""
    import ray
    from ray.job_config import JobConfig

    if ray.is_initialized():
        yield None
        return
    runtime_env = runtime_environment(cfg)
    job = JobConfig(metadata={"job_name": f"sweeper {cfg.name}", "sweeper_sweep": cfg.name})
    address = cfg.cluster.address or submitted_job_address()
    with contextlib.ExitStack() as stack:
        stack.enter_context(environment(oom_retries(cfg)))
        if address is None:
            require_token_auth(cfg.cluster.allow_no_auth)
            local = stack.enter_context(local_ray_confined())
            # Workers inherit the variables from the Ray processes started here: kept out of
            # Ray's runtime environment, so out of its agent's log and its dashboard.
            variables = (runtime_env or {}).pop("env_vars", {})
            with environment(variables), dynamic_agent_port(), interrupts.kept_from_ray():
                for attempt in range(1, START_ATTEMPTS + 1):
                    try:
                        context = ray.init(
                            address="local", num_cpus=cfg.cluster.num_cpus,
                            runtime_env=runtime_env or None,
                            include_dashboard=cfg.cluster.include_dashboard,
                            dashboard_host=cfg.cluster.dashboard_host,
                            dashboard_port=dashboard_port(cfg.cluster.dashboard_host,
                                                          cfg.cluster.dashboard_port,
                                                          cfg.cluster.include_dashboard),
                            logging_level=logging.WARNING, job_config=job)
                        break
                    except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception here
                        _start_failed(error, attempt, cfg, local)
            local.adopt()
        else:
            timeout = cfg.cluster.connect_timeout_s
            address = require_reachable(address, timeout)
            with bounded(address, timeout), interrupts.kept_from_ray():
                try:
                    context = ray.init(address=address, runtime_env=runtime_env,
                                       logging_level=logging.WARNING, job_config=job)
                except (ConnectionError, RuntimeError, ValueError) as error:
                    raise ConfigError([f"cluster.address={address!r}: Ray could not connect "
                                       f"({str(error).strip().splitlines()[0]})"]) from None
        stack.callback(ray.shutdown)
        url = context.dashboard_url
        yield f"http://{url}" if url else None


#: How many times a local Ray's start is tried when its node timed out during startup.
START_ATTEMPTS = 2


#: What Ray's `Node` raises when the raylet did not register in time (a bare Exception).
STARTUP_TIMEOUT = "timed out during startup"


class RayStartFailed(RuntimeError):
    """A local Ray that did not start, tried `START_ATTEMPTS` times: an outage of this machine
    (one line, exit 1), not a configuration error."""


def _start_failed(error: Exception, attempt: int, cfg: SweepConfig, local: LocalRay) -> None:
    """After `ray.init` raised `error` on try `attempt`: a dashboard that could not start is a
    ConfigError; a node that timed out during startup is tried again in a fresh session (the
    processes of this try killed) and, the last time, `RayStartFailed`; anything else is
    raised as it is."""
    import ray

    said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if STARTUP_TIMEOUT not in said:
        if "dashboard" not in str(error).lower():
            raise error
        raise ConfigError([dashboard_failure(str(error), cfg.cluster.dashboard_port)]) from None
    ray.shutdown()
    local.discard()
    if attempt < START_ATTEMPTS:
        logger.warning("local Ray did not start (%s); starting it once more in a fresh session",
                       said)
        return
    raise RayStartFailed(
        f"local Ray did not start, tried {START_ATTEMPTS} times ({said}): this machine was too "
        "loaded for its node to register in time, e.g. another sweep starting its Ray at the "
        "same moment; rerun the same command, start such sweeps one after the other, or set "
        "cluster.include_dashboard=false") from None


def runtime_environment(cfg: SweepConfig) -> Optional[dict[str, Any]]:
    """`cluster.runtime_env`, plus this checkout's packages when `cluster.ship_project` asks
    (workers of a cluster without the project installed then import the driver's code)."""
    env = dict(cfg.cluster.runtime_env)
    if cfg.cluster.ship_project:
        env["py_modules"] = [*env.get("py_modules", []), *(str(Path(module.__path__[0]))
                                                          for module in (sweeper, jobs))]
    return env or None
