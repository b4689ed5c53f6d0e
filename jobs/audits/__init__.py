"""Audits of the DP guarantee beside the attacks: the black-box final-model audit's training runs
from crafted weights (`blackbox`), and mechanisms whose privacy is known exactly (`mechanisms`),
the check on the bounds."""
