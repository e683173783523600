#!/usr/bin/env bash
# One prepared script for a GPU machine lent for a few minutes: every GPU check of the project in one go, each
# step bounded in time, everything it measures written under $OUT (default runs/gpu-session). Run from the
# repository root after the README's set-up:  OUT=runs/gpu-session bash benchmarks/gpu_session.sh
#
# 1. the paper pipeline's smoke configs on CUDA (vision runs on the GPU: it proves the --full path runs there);
# 2. ViT-S and DiT-S/2 training on CUDA for a few hundred steps through `cli.py train` (the trainer's own loop);
# 3. DiT-S/2 and DiT-B/4 step throughput and MFU against the chip's bf16 peak, and the exact-resume check
#    (benchmarks/gpu_dit.py, compiled);
# 4. the standard DiT units still missing from the cache, as many as fit in what is left of $BUDGET seconds (units
#    land in paper/results/NAME/units/ with the device named in their manifests: commit them as they are).
set -uo pipefail
OUT=${OUT:-runs/gpu-session}
BUDGET=${BUDGET:-720}
mkdir -p "$OUT"
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME.log, go on whatever happens
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "   exit $? after $(($(date +%s) - start)) s; log $OUT/$name.log"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.csv" 2>&1
python -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name(0))" \
  >"$OUT/torch.txt" 2>&1
step paper-smoke 180 python cli.py paper --smoke --device cuda --out "$OUT/paper-smoke"
step train-vit-s 90 python cli.py train --model vit-s --objective classify --data mnist5k --steps 300 \
  --device cuda --out "$OUT/train-vit-s"
step train-dit-s-2 90 python cli.py train --model dit-s-2 --objective denoise --data mnist5k --steps 300 \
  --device cuda --out "$OUT/train-dit-s-2"
step gpu-dit 180 python benchmarks/gpu_dit.py --compile --json "$OUT/gpu_dit.json"
remaining=$(left)
if [ "$remaining" -gt 60 ]; then
  step dit-units "$((remaining - 30))" python cli.py paper --standard --only init_dit_mnist --device cuda --jobs 1
fi
echo "done in $(($(date +%s) - start)) s; results in $OUT"
