#!/bin/bash
# CPU and wall seconds of one CLI question (a GEMM, a deployment, an error; QUESTIONS="gemm cu elementwise ..."
# picks others: a .cu source, an elementwise op), alternating two source trees over the same $KERNELCAST_HOME,
# so both see the same load.
#   benchmarks/cli_startup_timing.sh OLD_TREE NEW_TREE PREDICTOR_DIR [ROUNDS]
# PREDICTOR_DIR: a trained predictor folder (flattened, as a registry copy is: components.serving.native)
# or a models:/ reference;
# the GEMM question is answered by the op engine beside it. Set KERNELCAST_HOME (with a built measured store)
# and KERNELCAST_DATASETS_DIR (the datasets folder, for the bundled LLM configs) first. OLD_HOME / NEW_HOME:
# a state folder per tree (default both $KERNELCAST_HOME), where the two trees' caches would evict each other's
# (the measured tier's saved tables are named by the code that builds them; one is kept per group).
# Give OLD_HOME / NEW_HOME as absolute paths: each question runs from inside its tree.
set -u
OLD=$1 NEW=$2 MODEL=$3 ROUNDS=${4:-3}
PY=${PYTHON:-python}
OUT=$(mktemp)
SOURCE=$(mktemp --suffix=.cu)  # docs/quickstart.md's saxpy
cat >"$SOURCE" <<'CU'
__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
CU
declare -A ARGS=(
  [gemm]="predict --op gemm --shape M=64,N=4096,K=4096 --device H100 --dtype bf16 --model $MODEL"
  [deployment]="predict --llm Llama-3.1-8B --isl 1024 --osl 256 --device H100 --model $MODEL"
  [error]="predict --op gemm --shape M=64,N=4096,K=-1 --device H100"
  [cu]="predict $SOURCE --launch 65536/256 --device H100 --model $MODEL"
  [elementwise]="predict --op gelu --shape B=8192,H=4096 --device H100 --dtype bf16 --model $MODEL"
)
for _ in $(seq "$ROUNDS"); do
  for question in ${QUESTIONS:-gemm deployment error}; do
    for tree in "$OLD" "$NEW"; do
      state=${NEW_HOME:-$KERNELCAST_HOME}
      [ "$tree" = "$OLD" ] && state=${OLD_HOME:-$KERNELCAST_HOME}
      (cd "$tree" && KERNELCAST_HOME=$state /usr/bin/time -o "$OUT" -f "user %U sys %S wall %e" nice -n 10 "$PY" -m kernelcast.cli \
        ${ARGS[$question]} >/dev/null 2>&1)
      echo "$question $tree $(tail -1 "$OUT") load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
rm -f "$OUT" "$SOURCE"
