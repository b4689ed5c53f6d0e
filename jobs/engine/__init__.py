"""The DP-SGD engine: what trains a model with differential privacy, one package to audit alone.

What must equal Opacus, step for step: Poisson sampling at rate q, each record's gradient
clipped to C with Opacus's factor min(1, C / (‖g‖ + 1e-6)) (`clipping`, with `layer_rules` and
`linear_stack` for the per-sample gradients), N(0, σ²C²) added to the clipped sum (secure:
Opacus's sum of four draws, `randomness`), the sum divided by the expected batch int(|D|·q)
(`steps`, `training`), and the noise a target (ε, δ) needs and the ε a history spent, from
Opacus's own accountants (`accounting`).  `stacked` trains K models of one recipe together with
the same arithmetic; `canaries` plants the audit's canaries (`canary_columns`: the layout of what
they hand the attacks); `host_memory` keeps the host memory a training step frees for the next.

Nothing here imports `jobs.attacks` or `jobs.audits`: they read the engine, never the reverse.
"""
