"""What ships works as the checkout does: the source distribution and the wheel built from
it, installed where the checkout cannot be imported, carry every file the fused CPU ops
build from, and an API and a worker started from them answer a request on those ops (a
fallback to the torch ops would show on /ready, in the metrics and in the start line)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import kernels.cpu_ops as checkout_ops
from cli.nats_server import EmbeddedNats, free_port
from tests.conftest import DEFAULT_MODEL, MODEL_LOAD_TIMEOUT
from tests.processes import ROOT, SpateProcess, wait_for, wait_http

SERVED = "wheel-smollm"
# Folders of files other than Python modules that the packages read at run time.
DATA_FOLDERS = ("kernels/cpu", "api/static", "store/lua")


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packages as pip installs them from the wheel built from the sdist (the path a
    package index's sdist takes too), in a folder of their own."""
    build = tmp_path_factory.mktemp("wheel-build")
    sdist = build / "sdist"
    run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_sdist(sys.argv[1]))", str(sdist)], cwd=ROOT)
    [archive] = sdist.glob("spate-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(build / "unpacked", filter="data")
    [unpacked] = (build / "unpacked").iterdir()
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         str(unpacked), "-w", str(build / "wheel")], cwd=build)
    [wheel] = (build / "wheel").glob("spate-*.whl")
    target = build / "site"
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)], cwd=build)
    return target


def files_under(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in folder.rglob("*") if path.is_file() and "__pycache__" not in path.parts}


def test_the_installed_package_carries_every_data_file_of_the_checkout(site: Path) -> None:
    for folder in DATA_FOLDERS:
        shipped, checkout = files_under(site / folder), files_under(ROOT / folder)
        assert sorted(shipped) == sorted(checkout), f"{folder}: {set(checkout) ^ set(shipped)}"
        assert shipped == checkout, f"{folder} differs from the checkout's"


def test_every_header_the_fused_ops_include_is_installed_beside_them(site: Path) -> None:
    """The build compiles from a copy of the installed folder alone: each quoted include
    must be there (a missing header made every installed worker fall back)."""
    installed = site / "kernels" / "cpu"
    includes = {
        (path.name, name)
        for path in installed.iterdir() if path.suffix in (".cpp", ".h")
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.MULTILINE)
    }
    assert includes
    missing = [(source, name) for source, name in includes if not (installed / name).is_file()]
    assert not missing, f"included but not installed: {missing}"


def installed_env(site: Path, nats_url: str) -> dict[str, str]:
    """The checkout's interpreter (its dependencies) importing spate from `site` only."""
    return {"PYTHONPATH": str(site), "SPATE_NATS_URL": nats_url, "SPATE_LOG_FORMAT": "text"}


@pytest.fixture(scope="module")
def installed_nats() -> Iterator[EmbeddedNats]:
    with EmbeddedNats() as server:
        yield server


def test_an_api_and_worker_from_the_wheel_answer_on_the_fused_ops(
    site: Path, installed_nats: EmbeddedNats, tmp_path: Path
) -> None:
    env = installed_env(site, installed_nats.url)
    imported = subprocess.run(
        [sys.executable, "-c", "import cli, kernels, workers; print(kernels.__file__)"],
        cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, check=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(site), imported.stdout
    # The library a worker loads is named by a digest of the files it is built from (and
    # the CPU and flags), so one built from other files, a header short say, could not be
    # mistaken for it; identical files (the test above) give the checkout's name.
    fused = checkout_ops.available()

    port, metrics_port = free_port(), free_port()
    api = SpateProcess(["api", "--port", str(port)], env, "wheel-api", cwd=tmp_path)
    worker = SpateProcess(
        ["worker", "--model", DEFAULT_MODEL, "--served-model-name", SERVED,
         "--max-num-seqs", "2", "--metrics-port", str(metrics_port)],
        {**env, "SPATE_WORKER_ID": "wheel-worker"}, "wheel-worker", cwd=tmp_path,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/ready", worker, timeout=MODEL_LOAD_TIMEOUT)
        assert wait_for(lambda: SERVED in httpx.get(f"{base}/ready", timeout=5).json()["models"], 30)
        kernels = httpx.get(f"{base}/ready", timeout=5).json()["kernels"][SERVED]
        if fused:
            assert kernels == {"name": "cpu", "ops": "fused CPU ops", "fallback": None}
        else:  # no compiler here: the fallback is said, with its reason
            assert kernels["name"] == "torch" and "fused CPU ops unavailable" in kernels["fallback"]

        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
        [info] = [line for line in metrics.splitlines()
                  if line.startswith("spate_worker_kernel_backend_info{")]
        assert f'backend="{kernels["name"]}"' in info and info.endswith(" 1.0")

        [loaded] = [line for line in worker.output().splitlines() if " loaded " in line
                    and "compute " in line]
        assert f"kernels: {kernels['ops']}" in loaded
        if fused:  # the default model's file is Q4_1, computed as stored on the fused op
            assert re.search(r"compute float32, weights \S*Q4_1\S* \(quantized\)", loaded), loaded

        assert "spate playground" in httpx.get(f"{base}/", timeout=5).text
        body = {"model": SERVED, "input": "Say hello", "max_output_tokens": 4, "temperature": 0}
        reply = httpx.post(f"{base}/v1/responses", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["output_tokens"] > 0
    finally:
        worker.stop()
        api.stop()
