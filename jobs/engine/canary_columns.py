"""The layout of what the engine's canaries hand the attacks: statistic columns, input recipes and
the crafted weights' recipes.

Kept apart from `jobs.engine.canaries` (which needs torch) so that the attacks, read by the command
line before it imports torch, take these names from the engine that defines the layout: no engine
module imports an attack.
"""

#: Columns of a model's gradient-canary statistics, one row per canary
#: (`jobs.engine.canaries.GradientCanaries.statistics`): the final weights' displacement, the
#: iterates' summed gradient and their likelihood ratio.
FINAL, ITERATE_SUM, ITERATE_LIKELIHOOD_RATIO = 0, 1, 2
#: How input canaries are made (`jobs.engine.canaries.input_canaries`): pool records past every
#: pool with a moved label, or noise inputs with random labels.
INPUT_RECIPES = ("mislabeled", "noise")
#: How the black-box audit's initial weights are crafted (`jobs.audits.blackbox`): with blank
#: images under a decoy label, or the paper's plain pre-training on the public records.
CRAFTINGS = ("decoy", "plain")
