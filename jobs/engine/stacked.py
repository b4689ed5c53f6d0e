"""K models of one architecture and one recipe trained together in one process.

A sweep trains many models that differ only in their training set and seed (the shadows of one
ε, the targets of one ε across p and trials).  Small models leave a device mostly idle and each
Ray task pays its own start-up, so `train.models_per_task` puts K of them in one task
(docs/how-it-works.md: K models per task, and when it pays).  By architecture:

* **stacked** — a linear stack (`Flatten`, `Linear`, `Tanh`, `ReLU`: `tanh_mlp64`,
  `logistic_regression`, `relu_mlp256x2`): one (K, out, in) weight tensor per layer; each round
  pads every model's own Poisson batch to the longest and runs one batched forward and backward
  (`bmm`, in closed form: `jobs.engine.linear_stack`, as a model trained alone takes it); each record's
  norm is its ghost norm ‖a_i‖²·‖g_i‖² (+ ‖g_i‖² for the bias) within its own model, the clipped
  sums one `bmm` per layer, then each model adds its own noise and takes its own optimizer step;
* **interleaved** — anything else (the CNNs, where stacking gained nothing on a CPU): a step of
  each model in turn (`jobs.engine.training.train_runs`), each exactly as `train_model` trains it
  alone; on a GPU each model replays its own CUDA graphs on its own stream, so their kernels
  overlap.

Either way each model keeps its seed's initial weights, its mask, its batch and noise
generators, its noise multiplier and accountant (q depends on |D|), its optimizer and its
per-epoch checkpoint in `train_model`'s format.  So a model trained in a group is the model
trained alone (to float summation order), its key does not depend on K, and a killed group
resumes each model from its own checkpoint — or alone, or in another group.
"""

from __future__ import annotations

import logging
import math
from typing import Iterator, Optional

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from jobs.datasets import ArrayDataset
from jobs.engine import linear_stack
from jobs.engine.accounting import NoiseCache
from jobs.engine.clipping import clipped_sums
from jobs.engine.steps import autocast, plain_update, private_update
from jobs.engine.training import (Member, ModelRun, TrainedModel, TrainOptions, TrainSettings,
                                  counted_step, end_epoch, finish_run, group_rows, on_device,
                                  start_members, train_runs)
from jobs.models import ARCHITECTURES, build_model

logger = logging.getLogger(__name__)

#: `train.models_per_task: auto`.  On a CPU, K = 1: measured there (docs/how-it-works.md,
#: "K models per task"), stacking saves at most ~1.3× of a linear stack's step, because each model's noise,
#: optimizer step and accounting stay its own, while a group task gives up running models on
#: several cores side by side.  On a GPU, where one small model leaves the device mostly idle,
#: linear stacks are stacked 16 to a task (not measured: no GPU was available then), and other
#: models train `AUTO_GPU_INTERLEAVED_K` to a task, each replaying its CUDA graphs on its own
#: stream (`python -m bench.grid`; docs/gpu.md).
AUTO_GPU_STACKED_K = 16
AUTO_GPU_INTERLEAVED_K = 4


def stackable_architecture(name: str, input_shape: tuple[int, ...], num_classes: int) -> bool:
    """Whether models `name` on inputs of `input_shape` are stacked: a linear stack that sees
    one vector per record (a linear layer over several positions has no one-term ghost norm)."""
    if name not in ARCHITECTURES:
        return False
    model = build_model(name, input_shape, num_classes)
    return linear_stack.is_linear_stack(model) and (len(input_shape) == 1 or isinstance(model[0], nn.Flatten))


def auto_models_per_task(name: str, input_shape: tuple[int, ...], num_classes: int,
                         gpu: bool) -> int:
    """K for `train.models_per_task: auto`: on a GPU `AUTO_GPU_STACKED_K` for linear stacks and
    `AUTO_GPU_INTERLEAVED_K` for the rest; 1 on a CPU."""
    if not gpu:
        return 1
    if stackable_architecture(name, input_shape, num_classes):
        return AUTO_GPU_STACKED_K
    return AUTO_GPU_INTERLEAVED_K


def train_models(settings: TrainSettings, data: ArrayDataset, members: list[Member],
                 device: torch.device, noise_cache: Optional[NoiseCache] = None,
                 options: TrainOptions = TrainOptions()) -> Iterator[tuple[int, TrainedModel]]:
    """Train every member, yielding (member index, trained model) as each one finishes.

    Stacked when the architecture allows it and there is more than one member, interleaved
    otherwise, and when `options.compile` compiles non-private training's forward pass (one
    model's; DP training is never compiled, see `jobs.engine.training.TrainOptions`).
    """
    compiled = options.compile and not math.isfinite(settings.epsilon)
    stacked = (len(members) > 1 and not compiled
               and stackable_architecture(settings.model, data.input_shape, data.num_classes))
    logger.info("training %d %s model(s) %s", len(members), settings.model,
                "stacked" if stacked else "one after another")
    if stacked:
        yield from _train_stacked(settings, data, members, device, noise_cache,
                                  options.checkpoint_seconds)
        return
    yield from train_runs(settings, data, members, device, noise_cache, options)


def _layers(model: nn.Module) -> list[nn.Module]:
    """A linear stack's layers in order: only linear stacks are stacked
    (`stackable_architecture`)."""
    if not isinstance(model, nn.Sequential):
        raise ValueError(f"only linear stacks are stacked, not a {type(model).__name__}")
    return list(model)


class _Stack:
    """The K models' linear layers as stacked tensors, each model's parameters views into them.

    The stacked weights are what the batched passes read; each model's `nn.Parameter`s share
    their storage, so each model's own optimizer step writes into the stack, and each model's
    `state_dict`, evaluation and checkpoint read it.
    """

    def __init__(self, runs: list[ModelRun]):
        self.layers = _layers(runs[0].model)
        per_model = [[m for m in _layers(run.model) if isinstance(m, nn.Linear)] for run in runs]
        self.weights: list[torch.Tensor] = []
        self.biases: list[Optional[torch.Tensor]] = []
        for position in range(len(per_model[0])):
            linears = [layers[position] for layers in per_model]
            weight = torch.stack([m.weight.detach() for m in linears])
            bias = (torch.stack([m.bias.detach() for m in linears])
                    if linears[0].bias is not None else None)
            for k, module in enumerate(linears):
                module.weight = nn.Parameter(weight[k])
                if bias is not None:
                    module.bias = nn.Parameter(bias[k])
            self.weights.append(weight)
            self.biases.append(bias)
        self.linears = per_model
        for run in runs:  # the optimizer again, on the views, with the state it had
            state = run.optimizer.state_dict()
            run.optimizer = type(run.optimizer)(run.model.parameters(), **run.optimizer.defaults)
            run.optimizer.load_state_dict(state)

    def gradients(self, x: torch.Tensor, y: torch.Tensor, record_weights: torch.Tensor,
                  context) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each model on its own (K, B, …) inputs and (K, B) labels: each linear layer's inputs
        (K, B, in) and the gradients (K, B, out) of Σ_i record_weights_ki·ℓ_ki at its outputs,
        in fp32, the passes run in `context` (`jobs.engine.linear_stack.gradients`)."""
        return linear_stack.gradients(self.layers, self.weights, self.biases, x, y,
                                      record_weights, context)

    def set_gradients(self, k: int, weight_sums: list[torch.Tensor],
                      bias_sums: list[Optional[torch.Tensor]]) -> None:
        for module, weight_sum, bias_sum in zip(self.linears[k], weight_sums, bias_sums):
            module.weight.grad = weight_sum[k]
            if bias_sum is not None:
                module.bias.grad = bias_sum[k]


def _train_stacked(settings: TrainSettings, data: ArrayDataset, members: list[Member],
                   device: torch.device, noise_cache: Optional[NoiseCache],
                   checkpoint_seconds: float) -> Iterator[tuple[int, TrainedModel]]:
    runs = start_members(settings, data, members, device, noise_cache)
    stack = _Stack(runs)
    has_bias = [bias is not None for bias in stack.biases]
    rows_x, rows_y, row_index = group_rows(data, members)
    pool_x, pool_y = on_device(rows_x, rows_y, device)
    index = [torch.as_tensor(rows).to(device) for rows in row_index]
    test_x, test_y = on_device(data.test_x, data.test_y, device)
    epoch = [run.start_epoch for run in runs]
    batches = [iter(run.batches()) if epoch[k] < settings.epochs else None
               for k, run in enumerate(runs)]
    finished: set[int] = set()
    empty = torch.zeros(0, dtype=torch.long, device=device)
    while True:
        drawn: list[Optional[torch.Tensor]] = []
        for k, run in enumerate(runs):
            batch = None
            while (current := batches[k]) is not None and batch is None:
                batch = next(current, None)
                if batch is None:  # model k's epoch is over
                    end_epoch(run, epoch[k], test_x, test_y, checkpoint_seconds)
                    epoch[k] += 1
                    batches[k] = iter(run.batches()) if epoch[k] < settings.epochs else None
            drawn.append(batch if batch is None else batch.to(device))
        for k, run in enumerate(runs):
            if batches[k] is None and k not in finished:
                finished.add(k)
                yield k, finish_run(run, data, members[k].mask, pool_x, test_x, test_y,
                                    sharing=len(runs))
        active = [k for k, batch in enumerate(drawn) if batch is not None]
        if not active:
            return
        _stacked_step(stack, runs, active, drawn, index, pool_x, pool_y, has_bias, empty,
                      settings, device)


def _stacked_step(stack: _Stack, runs: list[ModelRun], active: list[int],
                  drawn: list[Optional[torch.Tensor]], index: list[torch.Tensor],
                  pool_x: torch.Tensor, pool_y: torch.Tensor, has_bias: list[bool],
                  empty: torch.Tensor, settings: TrainSettings, device: torch.device) -> None:
    """One step of every active model: its batch (padded), batched forward and clipped sums,
    then its own noise and optimizer step.  Inactive models see padding and do not step."""
    rows = [index[k][batch] if batch is not None else empty for k, batch in enumerate(drawn)]
    sizes = torch.tensor([len(r) for r in rows], device=device)
    if int(sizes.max()) == 0:  # only empty Poisson batches: every clipped sum is zero
        weight_sums = [torch.zeros_like(w) for w in stack.weights]
        bias_sums = [torch.zeros_like(b) if b is not None else None for b in stack.biases]
    else:
        picked = pad_sequence(rows, batch_first=True)  # (K, B), padding 0
        valid = (torch.arange(picked.shape[1], device=device) < sizes.unsqueeze(1)).float()
        inputs, grads = stack.gradients(pool_x[picked], pool_y[picked], valid,
                                        autocast(settings.precision, device))
        private = runs[active[0]].private
        weights = None if private else valid / sizes.clamp(min=1).unsqueeze(1)  # mean loss
        weight_sums, bias_sums, _ = clipped_sums(
            inputs, grads, has_bias, settings.max_grad_norm if private else None, weights)
    for k in active:
        run = runs[k]
        stack.set_gradients(k, weight_sums, bias_sums)
        if run.private:
            private_update(run)
        else:
            plain_update(run, len(rows[k]))
        counted_step(run)
