#!/bin/bash
# Time a fresh state's first questions, each in its own CLI process (CPU user+sys and wall), and keep their
# --json answers to compare two trees (docs/rank-llm-speed.md, "A fresh state's first question").
#
#   benchmarks/fresh_state_questions.sh TREE STATE LABEL [OUT]
#
# TREE: the code to run (a worktree, or an old commit exported with `git archive`); STATE: a COPY of a
# pipeline's state folder (`cp -r $KERNELCAST_HOME /tmp/x`: the questions write caches into it, never run it
# on a state you share); answers go to OUT (default /tmp/fresh-state-LABEL). STEPS picks and orders the
# questions (default "D1 D1b D3 M B R Rb O"); the step P first does what `kernelcast promote` now does when
# it moves the champion (serving.prepare) -- for a state made before that, to time the same state both ways.
# Compare two runs' answers with the state folder's name blanked:
#   diff <(sed "s#$A_STATE#S#g; s#$(echo $A_STATE | tr / _)#X#g" A/R.json) <(sed ... B/R.json)
set -euo pipefail
TREE=$(cd "$1" && pwd)
STATE=$(cd "$2" && pwd)
LABEL=$3
OUT=${4:-/tmp/fresh-state-$LABEL}
PYTHON=${PYTHON:-/work/main/.venv/bin/python}
mkdir -p "$OUT"
export KERNELCAST_HOME=$STATE PYTHONPATH=$TREE
export KERNELCAST_DATASETS_DIR=${KERNELCAST_DATASETS_DIR:-/work/shared/datasets}
cd "$TREE"
declare -A Q=(
  [D1]="predict --llm Llama-3.1-8B --isl 1024 --osl 256 --device H100 --json"
  [D1b]="predict --llm Llama-3.1-8B --isl 1024 --osl 256 --device H100 --json"
  [D3]="predict --llm Qwen/Qwen3-30B-A3B --isl 4096 --osl 128 --concurrency 16 --device H200 --framework sglang --json"
  [M]="rank --llm Qwen/Qwen3-30B-A3B --isl 4096 --osl 128 --concurrency 16 --framework all --device H100 --device H200 --device A100 --device L40S --device MI300X --device B200 --json"
  [B]="rank --llm Llama-3.1-8B --isl 1024 --osl 512 --concurrency 16 --workload batch --framework all --device H100 --device H200 --device L4 --device RTX4090 --json"
  [R]="rank --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --framework all --json"
  [Rb]="rank --llm Llama-3.1-70B --isl 2048 --osl 256 --concurrency 32 --framework all --json"
  # one op question per family and dtype pipe (GEMMs in tensor and FP32/FP64 dtypes, attention, MoE,
  # all-reduce, elementwise, softmax, norms, convolution), each naming the op engine's tier that answered it
  [O]="predict --batch $TREE/benchmarks/op_family_questions.csv --json"
)
PREPARE="from components.serving.models import current_version
from components.serving.prepare import prepare_version
print(prepare_version('kernelcast', current_version('models:/kernelcast@champion').rsplit('/', 1)[1]))"
for step in ${STEPS:-D1 D1b D3 M B R Rb O}; do
  format="$LABEL $step %e s wall %U+%S cpu, load $(cut -d' ' -f1 /proc/loadavg)"
  if [ "$step" = P ]; then
    /usr/bin/time -f "$format" -o "$OUT/time" nice -n 10 "$PYTHON" -c "$PREPARE" > "$OUT/P.txt"
  else
    # shellcheck disable=SC2086
    /usr/bin/time -f "$format" -o "$OUT/time" nice -n 10 "$PYTHON" -m kernelcast.cli ${Q[$step]} \
      > "$OUT/$step.json" 2> "$OUT/$step.err"
  fi
  cat "$OUT/time"
done
