"""The configuration checks: a command line composed by Hydra and every problem of it found
before Ray starts.

`preflight` composes and checks a command line (through `hydra_adapter`, the one place that
touches Hydra's private parts); `validation` gathers every problem, the planner's included;
`sections` checks the config section by section, with `attack_checks` for the attacks' side and
`infrastructure` for where a sweep runs (resources, cluster, store, tracking, secrets).  These
checks sit above what they check: the schema (`sweeper.config`), the plan (`sweeper.grid`), the
store and MLflow; nothing they check imports them.
"""
