#!/bin/sh
# Python + the pinned dependencies for the worker image (infra/worker.Dockerfile), on either
# vendor base. The lock pins the CPU torch wheel; a GPU worker takes the same torch version built
# for its vendor ($TORCH_INDEX). dvc-s3 lets the worker push to the team's S3/MinIO DVC remote.
set -eu
apt-get update
apt-get install -y --no-install-recommends software-properties-common git
add-apt-repository -y ppa:deadsnakes/ppa
apt-get update
apt-get install -y --no-install-recommends "${PYTHON}" "${PYTHON}-venv" "${PYTHON}-dev"
rm -rf /var/lib/apt/lists/*
"${PYTHON}" -m venv /opt/venv
cd /opt/kernelcast
grep -v '^torch==' requirements.lock > /tmp/req.txt
/opt/venv/bin/pip install -r /tmp/req.txt
/opt/venv/bin/pip install "torch==$(grep '^torch==' requirements.lock | cut -d= -f3)" --index-url "${TORCH_INDEX}"
/opt/venv/bin/pip install "dvc-s3==3.2.0"
