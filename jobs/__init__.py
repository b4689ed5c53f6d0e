"""The work that runs inside a sweep's tasks: data, models, DP training, attacks, metrics."""
