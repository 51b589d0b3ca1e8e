# Worker image for Ray nodes and Prefect jobs: the project + its pinned dependencies, with the
# profiling tools of one GPU vendor. Two targets from one recipe:
#   docker build -f infra/worker.Dockerfile --target nvidia -t ghcr.io/kernelcast/worker:latest .
#   docker build -f infra/worker.Dockerfile --target rocm   -t ghcr.io/kernelcast/worker-rocm:latest .
# nvidia: CUDA 12.8 + Nsight Compute (ncu) + the CUDA 12.8 torch wheel.
# rocm:   ROCm 6.4 + rocprofv3 (rocprofiler-sdk) + the ROCm torch wheel.
# Profiling needs counter access: run with --cap-add SYS_ADMIN (KubeRay: securityContext, see
# infra/kuberay.yaml), or set the host's NVIDIA driver option NVreg_RestrictProfilingToAdminUsers=0;
# AMD needs --device /dev/kfd --device /dev/dri.
ARG PYTHON=python3.11

# ------------------------------------------------------------------ vendor bases
FROM nvidia/cuda:12.8.1-devel-ubuntu22.04 AS base-nvidia
ENV TORCH_INDEX=https://download.pytorch.org/whl/cu128
RUN apt-get update && apt-get install -y --no-install-recommends cuda-nsight-compute-12-8 \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(ls -d /opt/nvidia/nsight-compute/* | tail -1)/ncu" /usr/local/bin/ncu && ncu --version

FROM rocm/dev-ubuntu-22.04:6.4 AS base-rocm
ENV TORCH_INDEX=https://download.pytorch.org/whl/rocm6.4
RUN apt-get update && apt-get install -y --no-install-recommends rocprofiler-sdk rocm-smi-lib \
 && rm -rf /var/lib/apt/lists/* && rocprofv3 --version

# ------------------------------------------------------------------ the project, on either base
FROM base-nvidia AS nvidia
ARG PYTHON
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 \
    DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1 RAY_USAGE_STATS_ENABLED=0 MLFLOW_DISABLE_TELEMETRY=true \
    PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1 KERNELCAST_HOME=/var/lib/kernelcast
COPY infra/worker-install.sh /tmp/worker-install.sh
COPY requirements.lock pyproject.toml /opt/kernelcast/
RUN PYTHON=${PYTHON} sh /tmp/worker-install.sh
WORKDIR /opt/kernelcast
ENV PATH=/opt/venv/bin:$PATH
COPY kernelcast kernelcast
COPY components components
COPY flows flows
COPY infra infra
COPY profiled-data profiled-data
COPY params.yaml dvc.yaml ./
RUN pip install --no-deps -e . && kernelcast --help > /dev/null
# Runs as root: Nsight Compute needs CAP_SYS_ADMIN in the process that reads the counters.
RUN mkdir -p ${KERNELCAST_HOME}
CMD ["ray", "start", "--head", "--block"]

FROM base-rocm AS rocm
ARG PYTHON
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 \
    DO_NOT_TRACK=1 DVC_NO_ANALYTICS=1 RAY_USAGE_STATS_ENABLED=0 MLFLOW_DISABLE_TELEMETRY=true \
    PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1 KERNELCAST_HOME=/var/lib/kernelcast
COPY infra/worker-install.sh /tmp/worker-install.sh
COPY requirements.lock pyproject.toml /opt/kernelcast/
RUN PYTHON=${PYTHON} sh /tmp/worker-install.sh
WORKDIR /opt/kernelcast
ENV PATH=/opt/venv/bin:$PATH
COPY kernelcast kernelcast
COPY components components
COPY flows flows
COPY infra infra
COPY profiled-data profiled-data
COPY params.yaml dvc.yaml ./
RUN pip install --no-deps -e . && kernelcast --help > /dev/null
RUN mkdir -p ${KERNELCAST_HOME}
CMD ["ray", "start", "--head", "--block"]
