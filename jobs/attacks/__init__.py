"""Membership-inference attacks: each scores records from what a trained model reveals.

Adding an attack happens in this folder: define its scoring function and settings in a module
here, registered with `jobs.attacks.contract.register_attack`, and import that module below.
Importing any module of this package runs this file first, so `ATTACKS` always holds every
attack, in the order listed here (the order of docs/attacks.md's table and of the `attack.*`
section, `jobs.attacks.section.AttackSettings`).  The model queries some attacks ask
(`jobs.attacks.queries`, which trains or loads models through `jobs.engine`) are imported by
the tasks that answer them, not here: reading the attacks imports no torch.
"""

# Each registers its attacks; LiRA, RMIA and Shokri et al.'s first, as before they had a folder;
# then the cheap strong attacks, QMIA (no shadows) and BASE (no population).
from jobs.attacks import lira, rmia, shokri, basic, qmia, bayes_optimal  # noqa: F401
