#!/bin/bash
# Byte-for-byte comparison of the --json answers of source questions (.cu, a #define'd .cu, .hip) given by
# two source trees (the roofline-class model's numpy path must answer as the scikit-learn/LightGBM one).
#   benchmarks/cu_answer_identity.sh OLD_TREE NEW_TREE MODEL
# Set KERNELCAST_DATASETS_DIR, and OLD_HOME / NEW_HOME (absolute: each tree's state folder). Exit 1 on a
# difference.
set -u
OLD=$1 NEW=$2 MODEL=$3
PY=${PYTHON:-python}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=$(mktemp -d)
cp "$ROOT/extensions/vscode/test/fixtures/saxpy.cu" "$ROOT/extensions/vscode/test/fixtures/vadd.hip" \
  "$ROOT/tests/fixtures/cuda/tiled_matmul.cu" "$SRC/"
# the tiled matmul with N a macro (for --define): its kernel only, without the N parameter
sed -e 's/, int N)/)/' "$ROOT/tests/fixtures/cuda/tiled_matmul.cu" | sed -n '1,21p' >"$SRC/matmul_define.cu"
declare -A ARGS=(
  [saxpy]="$SRC/saxpy.cu --launch 65536/256 --device H100"
  [matmul_arg]="$SRC/tiled_matmul.cu --launch 256,256/16,16 --arg N=4096 --device H100"
  [matmul_define]="$SRC/matmul_define.cu --launch 64,64/16,16 --define N=1024 --device A100"
  [vadd_hip]="$SRC/vadd.hip --launch 32768/512 --device MI300X"
  [vadd_hip_h100]="$SRC/vadd.hip --launch 32768/512 --device H100"
)
status=0
for question in "${!ARGS[@]}"; do
  (cd "$OLD" && KERNELCAST_HOME=$OLD_HOME nice -n 10 "$PY" -m kernelcast.cli predict ${ARGS[$question]} \
    --model "$MODEL" --json >"$SRC/$question.old" 2>&1)
  (cd "$NEW" && KERNELCAST_HOME=$NEW_HOME nice -n 10 "$PY" -m kernelcast.cli predict ${ARGS[$question]} \
    --model "$MODEL" --json >"$SRC/$question.new" 2>&1)
  if cmp -s "$SRC/$question.old" "$SRC/$question.new"; then
    echo "$question same ($(wc -c <"$SRC/$question.new") bytes)"
  else
    echo "$question DIFFERS"; diff "$SRC/$question.old" "$SRC/$question.new" | head -20; status=1
  fi
done
rm -rf "$SRC"
exit $status
