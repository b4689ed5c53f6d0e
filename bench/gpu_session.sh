#!/usr/bin/env bash
# Issue 40's GPU figures in one call on a lent GPU (≈ 6 minutes, 10 at most: every part under
# its own `timeout`): the GPU tests, then the real command, `python -m sweeper`, through Ray on
# synthetic records of MNIST's and of CIFAR-10's shape at the grid's own pool sizes
# (`mnist_lira`, `cifar10_lira`, `bench.gpu_sweep --stand-in`: models of the grid's size, so
# that their wall extrapolates), each reduced to 2 ε, 2 p, 1 trial and 4 shadows (12 models) at
# its shipped resources (num_gpus 0.25, K = 4), with `nvidia-smi` sampling the GPU meanwhile;
# `bench.grid` for the same models; then `python -m bench.gpu_sweep` prints what it extrapolated
# from, each sweep's wall split (training, queries, attacks), the GPU's busy share, every model's
# device, the training wall against bench.grid's extrapolation and the full grid's wall
# extrapolated (it refuses, exit 2, a sweep whose models are not the grid's).
#
# On the GPU machine (torch but no Ray, Hydra, OmegaConf, Opacus or mlxtend) build the bundle
# here first (../shared/gpu/README.md: `bash ../shared/gpu/make-bundle.sh`), and add pytest's
# pure-Python wheels beside it, which its install.sh installs too:
#     python3 -m pip download -q --no-deps -d .gpudeps pytest pluggy iniconfig packaging pygments
# The script sources .gpudeps/install.sh when it is there and keeps what it puts on PYTHONPATH.
# MLflow is not in the bundle: there the sweeps log no runs (a warning), results in Parquet;
# nor are the Ray dashboard's dependencies: the sweeps run with cluster.include_dashboard=false.
# Every part must succeed: the first that fails stops the script with one line naming it and
# why (its own last error line, or its time limit), exit 1; its whole output is in OUTPUT_DIR.
# Without a GPU the same steps run at `scale=smoke` on the CPU (bench.grid too): what CI-sized
# checks of this script use; SLOWDOWN=N multiplies every time limit (a shared CPU: 8).
# Usage: bash bench/gpu_session.sh [OUTPUT_DIR]    in the checkout's root (PYTHON: the
# interpreter, default python3; GPUDEPS: the bundle's folder, default .gpudeps)
set -euo pipefail
out=${1:-${OUT:-/tmp/gpu_session}}
mkdir -p "$out"
log="$out/log"
: > "$log"
trap 'echo "gpu_session: stopped at line $LINENO ($BASH_COMMAND): exit $?" | tee -a "$log" >&2' ERR
say() { echo "$*" | tee -a "$log"; }
failed() {  # failed PART OUTPUT_FILE CODE SECONDS: the one line that ends the script
    local why
    if [ "$3" = 124 ] || [ "$3" = 137 ]; then
        why="no result within its time limit of $4 s"
    else
        why=$(grep -E "^error|Error|No module named|FAILED|Traceback" "$2" | tail -1 | cut -c1-400 || true)
    fi
    trap - ERR
    say "gpu_session: $1 failed (exit $3): ${why:-see $2}" >&2
    exit 1
}
slow=${SLOWDOWN:-1}
part() {  # part NAME SECONDS OUTPUT_FILE COMMAND...: one part, its output to the file
    local name=$1 seconds=$(($2 * slow)) file=$3 code=0
    shift 3
    timeout "$seconds" "$@" > "$file" 2>&1 || code=$?
    [ "$code" = 0 ] || failed "$name" "$file" "$code" "$seconds"
}

bundle=${GPUDEPS:-.gpudeps}  # the bundle's folder
if [ -f "$bundle/install.sh" ]; then
    # shellcheck disable=SC1091  # (the bundle's, built on the machine that sends it)
    source "$bundle/install.sh" > "$out/bundle.log" 2>&1 ||
        failed "the bundle's install.sh" "$out/bundle.log" $? 0
fi
case ":${PYTHONPATH:-}:" in  # the checkout after whatever the bundle put first
    *":$PWD:"*) ;;
    *) export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" ;;
esac
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
part "the modules a sweep needs" 60 "$out/imports.log" "$py" -c \
    "import torch, ray, hydra, omegaconf, opacus, pooch, mlxtend, pytest, sweeper, jobs, bench"
if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    gpu=1; nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv | tee -a "$log"
    scale=()
else
    gpu=0; say "no GPU: the sweeps and bench.grid at scale=smoke on the CPU"
    scale=(scale=smoke resources.train.num_gpus=0)
fi
say "=== pytest -m gpu tests/gpu"
part "pytest -m gpu tests/gpu" 80 "$out/pytest.log" "$py" -m pytest -m gpu tests/gpu -q \
    -p no:cacheprovider -rs
tail -25 "$out/pytest.log" | tee -a "$log"
shrink=("grid.epsilon=[1,8]" "grid.trial=[0]" shadow.count=4)
# p ∈ {0.3, 0.7}: as many steps a model as the grid's on average (at scale=smoke the grid's
# own smoke p, whose models are the smoke grid's)
[ "$gpu" = 0 ] || shrink+=("grid.p=[0.3,0.7]")
sweep() {  # sweep NAME SWEEP_SECONDS GRID_SECONDS: the real command, bench.grid, the report
    local name=$1 sweep_s=$2 grid_s=$3
    local store="$out/store_$name" sampler="" overrides
    part "bench.gpu_sweep --stand-in ($name)" 20 "$out/stand_in_$name.log" \
        "$py" -m bench.gpu_sweep --experiment "$name" --stand-in
    read -r -a overrides < <(tail -n 1 "$out/stand_in_$name.log")
    overrides+=("${shrink[@]}" cluster.include_dashboard=false "${scale[@]}")
    say "=== python -m sweeper +experiment=$name ${overrides[*]}"
    if [ "$gpu" = 1 ]; then
        nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 500 \
            > "$out/smi_$name.csv" 2>/dev/null & sampler=$!
    fi
    part "the $name sweep" "$sweep_s" "$out/sweep_$name.log" "$py" -m sweeper \
        +experiment="$name" "${overrides[@]}" store.root="$store" name="gpu_$name" --replace
    if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
    say "  $(grep -E '^(done in|wall by task kind)' "$out/sweep_$name.log" | tr '\n' ' ')"
    say "=== python -m bench.grid --experiment $name --packings 4x1 --rounds 5 ${overrides[*]}"
    part "bench.grid ($name)" "$grid_s" "$out/grid_$name.log" "$py" -m bench.grid \
        --experiment "$name" --packings 4x1 --rounds 5 "${overrides[@]}"
    { grep -v Warning "$out/grid_$name.log" || true; } | tee -a "$log"
    part "bench.gpu_sweep ($name)" 25 "$out/report_$name.log" "$py" -m bench.gpu_sweep \
        --experiment "$name" --store "$store" --sweep-log "$out/sweep_$name.log" \
        --smi "$out/smi_$name.csv" --grid-log "$out/grid_$name.log" -- "${overrides[@]}"
    tee -a "$log" < "$out/report_$name.log"
}
sweep mnist_lira 75 45
sweep cifar10_lira 170 75
say "gpu_session: every part done; the figures above, the outputs in $out"
