"""sweeper: DP-SGD membership-inference sweeps, measured attack precision next to the bound.

Orchestration lives here (config, plan, runner, store, tracking, frontier, bounds); the work
done inside tasks (data, models, DP training, attacks, metrics) lives in the `jobs` package.
"""
