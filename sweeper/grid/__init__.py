"""What a sweep is made of, before and after it runs: the grid expanded into content-keyed work
and each cell's results row.

`plan` expands a configuration into models to train, attacks to score and cells; `recipes` says
what each model trains with; `scale` shrinks any experiment (`scale=smoke`); `sweep_data` loads
the records the plan reaches, once, in the driver; `cells` computes a cell's results row from
its scores (pure math over `sweeper.bounds`).  Neither Ray nor MLflow is imported here.
"""
