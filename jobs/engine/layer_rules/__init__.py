"""Each layer type's per-sample rule: its records' squared gradient norms and its clipped
gradient sum, by book-keeping or from per-record gradients (`jobs.engine.clipping` says which and why).

`RULES` maps a layer class to its rule; `check_supported` names the layers no rule covers.

Modules: `base` (`Seen`, the `_Rule` contract, the per-record gradient arithmetic every rule and
`jobs.engine.clipping` share), one per layer type (`linear`, `conv2d` with its routes to per-record
weight gradients and the receptive fields' Grams, `norm`); this one is the registry.
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from jobs.engine.layer_rules.base import _Rule
from jobs.engine.layer_rules.conv2d import _Conv2dRule
from jobs.engine.layer_rules.linear import _LinearRule
from jobs.engine.layer_rules.norm import _NormRule


#: The layer types the engine can clip, by class.  A model with trainable parameters anywhere
#: else is refused (`check_supported`), never silently clipped wrong.
RULES: dict[type, _Rule] = {
    nn.Linear: _LinearRule(),
    nn.Conv2d: _Conv2dRule(),
    nn.GroupNorm: _NormRule(),
    nn.LayerNorm: _NormRule(),
}


def rule_for(module: nn.Module) -> Optional[_Rule]:
    return RULES.get(type(module))


def watched_rule(module: nn.Module) -> _Rule:
    """The rule of a layer the engine watches: only layers with one are (`rule_for`)."""
    rule = RULES.get(type(module))
    if rule is None:
        raise ValueError(f"a {type(module).__name__} layer has no per-sample rule")
    return rule


def check_supported(model: nn.Module) -> list[str]:
    """Why the engine cannot clip `model` (empty when it can): one line per offending layer."""
    problems = []
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        if rule_for(module) is None:
            supported = ", ".join(cls.__name__ for cls in RULES)
            problems.append(f"layer {name or '(root)'} ({type(module).__name__}) has trainable "
                            f"parameters but no per-sample rule (supported: {supported})")
        elif isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"
                                                or isinstance(module.padding, str)):
            problems.append(f"layer {name} (Conv2d): only groups=1, zero padding given as numbers "
                            "are supported")
    return problems
