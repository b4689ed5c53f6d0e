"""What (ε, δ)-DP training promises about membership inference, as numbers.

Everything here is one Bayes argument (Thudi et al. 2022; TMLR 2024, Theorem 3.3) read in
different directions, one family per module; this package only re-exports them.  It is pure math
with no orchestration: the sweep and anyone at a Python prompt use the same functions, and
importing them pulls in NumPy only (figures: `sweeper.bounds.plots`; command line:
`sweeper.cli.bounds_command`).

* `thudi`    the bound U on any attack's precision and its relatives (lower bound, negative
             mirror, positive advantage, groups of records, the generalization gap); its module
             docstring says why the TPR floor and why the δ-term is not the printed one;
* `planning` the inverses a planner needs: which ε, or which p, keeps every attacker under a
             target precision, and how many deletion requests may be declined;
* `earlier`  the bounds Thudi et al. compare with (Yeom, Erlingsson, Humphries, Sablayrolles,
             Mahloujifar, Jayaraman);
* `proven`   which ε an observed attack proves (precision, rates, and the canary audits:
             Clopper–Pearson, Gaussian DP, one run), and the bound against mechanisms of exactly
             known privacy (`tightest_bound`);
* `one_run_fdp`  the f-DP audit in one run (Mahloujifar, Melis & Chaudhuri 2025): what one-run
             guesses prove read through the Gaussian trade-off curve;
* `family`   the audit in DP-SGD's own family at any q: which noise levels the canaries rule out;
* `profile`  DP-SGD's whole privacy profile δ(ε′) and the least bound over it (`bound_profile`);
* `last_iterate`  the heuristic ε of the final model alone (Steinke et al. 2025): the ceiling of
             final-model audits;
* `final_law` the final-model audit through the law of gradient canaries' final displacements
             (hidden state, Cebere et al. 2025): which clip and noise they leave, and the last
             iterate's ε there;
* `anytime`  precision intervals valid at every look (a union bound over looks on
             Clopper–Pearson), and the sequential frontier's stopping rule (`decide`);
* `audit_columns`  not re-exported: what one cell's canary scores prove, as the audit columns of
             its results row (every estimator above, which are valid for its training, and
             whether one proves more than the claimed ε).

Conventions, for every function:

* pure NumPy, broadcasting over array arguments: a Python float when every argument is a
  scalar, an ndarray otherwise; ε = ∞ (non-private training) is a legal value;
* bounds that are probabilities are clipped to [0, 1]; one whose denominator is not positive is
  vacuous and returned as 1.0;
* parameters out of their domain raise ValueError naming the argument; measured rates
  (precision, TPR, FPR in the audit helpers) may be NaN (an attack that never fired has no
  precision) and give NaN.
"""

# Each family module declares its public names once (its `__all__`); this package's are theirs.
from sweeper.bounds import (earlier, family, final_law, last_iterate, one_run_fdp, planning,
                            profile, proven, anytime, thudi)
from sweeper.bounds._checks import BOUND_FORMS
from sweeper.bounds.proven import *  # noqa: F401,F403
from sweeper.bounds.earlier import *  # noqa: F401,F403
from sweeper.bounds.family import *  # noqa: F401,F403
from sweeper.bounds.final_law import *  # noqa: F401,F403
from sweeper.bounds.last_iterate import *  # noqa: F401,F403
from sweeper.bounds.one_run_fdp import *  # noqa: F401,F403
from sweeper.bounds.planning import *  # noqa: F401,F403
from sweeper.bounds.profile import *  # noqa: F401,F403
from sweeper.bounds.anytime import *  # noqa: F401,F403
from sweeper.bounds.thudi import *  # noqa: F401,F403

__all__ = ["BOUND_FORMS", *thudi.__all__, *planning.__all__, *earlier.__all__, *proven.__all__,
           *one_run_fdp.__all__, *family.__all__, *final_law.__all__, *profile.__all__,
           *last_iterate.__all__, *anytime.__all__]
