# Worker image for Ray GPU nodes and Prefect jobs: CUDA 12.8 + Nsight Compute + kernelcast.
#   docker build -f infra/worker.Dockerfile -t ghcr.io/kernelcast/worker:latest .
# Profiling needs counter access: run with --cap-add SYS_ADMIN (or the host's
# NVreg_RestrictProfilingToAdminUsers=0).
FROM nvidia/cuda:12.8.1-devel-ubuntu22.04

ARG PYTHON=python3.11
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1 RAY_USAGE_STATS_ENABLED=0 MLFLOW_DISABLE_TELEMETRY=true \
    PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1 \
    KERNELCAST_HOME=/var/lib/kernelcast

RUN apt-get update && apt-get install -y --no-install-recommends software-properties-common git \
 && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update \
 && apt-get install -y --no-install-recommends ${PYTHON} ${PYTHON}-venv ${PYTHON}-dev \
      cuda-nsight-compute-12-8 \
 && rm -rf /var/lib/apt/lists/*
# ncu lives under /opt/nvidia/nsight-compute/<version>; expose it on PATH.
RUN ln -s "$(ls -d /opt/nvidia/nsight-compute/* | tail -1)/ncu" /usr/local/bin/ncu && ncu --version

WORKDIR /opt/kernelcast
RUN ${PYTHON} -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.lock pyproject.toml ./
# The lock pins the CPU torch wheel; GPU workers take the same version built for CUDA 12.8.
RUN grep -v '^torch==' requirements.lock > /tmp/req.txt \
 && pip install -r /tmp/req.txt \
 && pip install "torch==$(grep '^torch==' requirements.lock | cut -d= -f3)" \
      --index-url https://download.pytorch.org/whl/cu128
COPY kernelcast kernelcast
COPY components components
COPY flows flows
COPY params.yaml dvc.yaml ./
RUN pip install --no-deps -e . && kernelcast --help > /dev/null

# Runs as root: Nsight Compute needs CAP_SYS_ADMIN in the process that reads the counters.
RUN mkdir -p ${KERNELCAST_HOME}
CMD ["ray", "start", "--head", "--block"]
