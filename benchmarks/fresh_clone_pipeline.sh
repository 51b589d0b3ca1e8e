#!/usr/bin/env bash
# Opt-in: the README's fresh-clone figure -- `git clone`, then `make pipeline` (install included), timed.
# Run it on a quiet machine (nothing else busy: `uptime` is printed before and after). Usage:
#   benchmarks/fresh_clone_pipeline.sh [REPO_URL_OR_PATH [BRANCH]]      (default: this repository, its HEAD)
# The clone must see the datasets where dvc.yaml and the settings look (../shared/datasets from the clone), so
# it is made beside the `shared` folder found above this checkout. Its own state folder (.kernelcast in the
# clone: KERNELCAST_HOME is unset). Prints wall and CPU (user+sys) of the install and of the pipeline, and
# the pipeline's own per-stage lines; the log is kept in the clone.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="${1:-$here}"
branch="${2:-$(git -C "$here" rev-parse --abbrev-ref HEAD)}"
base="$here"
while [ "$base" != / ] && [ ! -d "$base/shared/datasets" ]; do base="$(dirname "$base")"; done
[ -d "$base/shared/datasets" ] || { echo "error: no shared/datasets above $here"; exit 2; }
scratch="$base/fresh-clone-$(date -u +%Y%m%dT%H%M%S)"
echo "clone: $repo ($branch) -> $scratch (datasets: $base/shared/datasets)"
uptime
git clone -q --branch "$branch" "$repo" "$scratch"
cd "$scratch"
unset KERNELCAST_HOME
# GNU time: wall, user and system seconds of the command and every process it waited for.
/usr/bin/time -f "install: wall %e s, CPU %U s user + %S s sys" make install 2>&1 | tail -3
/usr/bin/time -f "pipeline: wall %e s, CPU %U s user + %S s sys" make pipeline 2>&1 | tee pipeline.log \
  | grep -E '^\[[0-9]+/[0-9]+\]|^verdict|^pipeline:|wall' || true
uptime
echo "log: $scratch/pipeline.log"
