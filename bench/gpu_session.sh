#!/usr/bin/env bash
# One lent GPU's measurements for docs/gpu.md, in one call (the device machine has torch but
# not Hydra, OmegaConf or Opacus: `.devsite` carries them, see bench/README.md): the step times
# at the shipped options and with each changed (`train.tf32`, `train.channels_last`,
# `train.precision`), the eager DP step's costliest kernels, then whole models and the grid
# for cifar10_lira (shipped, and channels-last) and mnist_lira.
# Usage: bash bench/gpu_session.sh [OUTPUT_DIR]   (each command under its own time limit)
set -u
out=${1:-${OUT:-/tmp/gpu_session}}
mkdir -p "$out"
export PYTHONPATH="$PWD/.devsite:$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv | tee "$out/log"
grid() {  # grid SECONDS ARGS...: one bench.grid command, its output kept
    echo "=== bench.grid ${*:2}" | tee -a "$out/log"
    timeout "$1" python3 -m bench.grid "${@:2}" 2>&1 | grep -v Warning | tee -a "$out/log"
}
for options in "" train.tf32=false train.channels_last=true \
               "train.channels_last=true train.precision=bf16"; do
    grid 50 --steps-only --rounds 30 $options
done
grid 50 --steps-only --rounds 5 --profile 20
grid 150 --packings 4x1,8x1
grid 70 --packings 4x1 train.channels_last=true
grid 70 --experiment mnist_lira --packings 4x1,8x1
