"""The "cpu" backend's fused C++ ops (kernels/cpu_ops.py): each agrees with its torch
reference, gives a row the same bits alone and in any batch and at any thread count, and
prefill attention gives each query the bits decode attention gives it at that position."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import cpu_ops

REPO_ROOT = Path(__file__).resolve().parents[2]
# Test-only sources, built by the tests into libraries of their own.
PROBES = Path(__file__).resolve().parent / "cpu"
# What the quantized linear and decode attention are built from.
ISA_CHECK_SOURCES = ("quantized_linear.cpp", "paged_decode_attention.cpp", "chunk_pool.cpp")

pytestmark = pytest.mark.skipif(
    not cpu_ops.available(), reason="the fused CPU ops did not build on this machine"
)

DTYPES = [torch.float32, torch.bfloat16]


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_matches_the_reference(dtype, with_residual, assert_close):
    x, weight = randn(7, 576, seed=1, dtype=dtype), randn(576, seed=2, dtype=dtype)
    residual = randn(7, 576, seed=3) if with_residual else None
    got = cpu_ops.rms_norm(x, weight, 1e-5, residual)
    expected = kernels.rms_norm_ref(x, weight, 1e-5, residual)
    if with_residual:
        assert_close(got[0], expected[0], dtype)
        assert torch.equal(got[1], expected[1])  # the residual sum is one fp32 add
    else:
        assert got.dtype == dtype
        assert_close(got, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_matches_the_reference(dtype, assert_close):
    x = randn(5, 2 * 1536, seed=4, dtype=dtype) * 4
    assert_close(cpu_ops.silu_and_mul(x), kernels.silu_and_mul_ref(x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_embedding_matches_the_reference(dtype, assert_close):
    q, k = randn(6, 9, 64, seed=5, dtype=dtype), randn(6, 3, 64, seed=6, dtype=dtype)
    positions = torch.tensor([0, 1, 7, 100, 3, 2047])
    cache = randn(2048, 64, seed=7, dtype=dtype)
    q_ref, k_ref = q.clone(), k.clone()
    cpu_ops.rotary_embedding(q, k, positions, cache)
    kernels.rotary_embedding_ref(q_ref, k_ref, positions, cache)
    assert_close(q, q_ref, dtype)
    assert_close(k, k_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_store_kv_cache_writes_what_the_reference_writes(dtype):
    k, v = randn(5, 3, 64, seed=20, dtype=dtype), randn(5, 3, 64, seed=21, dtype=dtype)
    slots = torch.tensor([0, 17, -1, 33, 5])  # -1: not stored
    caches = [torch.zeros(4, 16, 3, 64, dtype=dtype) for _ in range(4)]
    cpu_ops.store_kv_cache(k, v, caches[0], caches[1], slots)
    kernels.store_kv_cache_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    with pytest.raises(RuntimeError, match="past the cache"):
        cpu_ops.store_kv_cache(k, v, caches[0], caches[1], torch.tensor([0, 1, 2, 3, 64]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 80, 32])  # 64 dims at a time, with a rest, or none
def test_decode_attention_matches_the_reference(dtype, head_dim, make_paged_batch, assert_close):
    batch = make_paged_batch([1, 17, 0, 90, 33], block_size=16, num_kv_heads=3,
                             head_dim=head_dim, dtype=dtype)
    q = randn(5, 9, head_dim, seed=8, dtype=dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, batch.context_lens, 0.125)
    got = cpu_ops.paged_decode_attention(*args)
    assert_close(got, kernels.paged_decode_attention_ref(*args), dtype)
    assert torch.equal(got[2], torch.zeros_like(got[2]))  # no context: zeros, as the kernel


@pytest.mark.parametrize("dtype", DTYPES)
def test_prefill_attention_matches_the_reference(dtype, make_paged_batch, assert_close):
    batch = make_paged_batch([3, 17, 40], block_size=16, num_kv_heads=3, head_dim=64,
                             dtype=dtype)
    cu_seqlens = torch.tensor([0, 3, 8, 20], dtype=torch.int32)
    q = randn(20, 9, 64, seed=9, dtype=dtype)
    args = (q, batch.k_cache, batch.v_cache, batch.block_tables, cu_seqlens, batch.context_lens,
            0.125)
    assert_close(cpu_ops.prefill_attention(*args), kernels.prefill_attention_ref(*args), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [64, 80])
def test_a_prefilled_query_gets_the_bits_of_a_decode_step(dtype, head_dim, make_paged_batch):
    """What lets a replacement worker rebuild a dead worker's cache with the same bits."""
    batch = make_paged_batch([40], block_size=16, num_kv_heads=3, head_dim=head_dim,
                             dtype=dtype)
    q = randn(12, 9, head_dim, seed=10, dtype=dtype)  # the last 12 of the 40 positions
    prefilled = cpu_ops.prefill_attention(
        q, batch.k_cache, batch.v_cache, batch.block_tables,
        torch.tensor([0, 12], dtype=torch.int32), batch.context_lens, 0.125,
    )
    for index in range(12):
        context = torch.tensor([40 - 12 + index + 1], dtype=torch.int32)
        step = cpu_ops.paged_decode_attention(
            q[index : index + 1], batch.k_cache, batch.v_cache, batch.block_tables, context, 0.125
        )
        assert torch.equal(step[0], prefilled[index]), index


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_has_the_same_bits_alone_in_a_batch_and_on_any_thread_count(
    dtype, make_paged_batch
):
    lengths = [5, 70, 33, 1, 16, 48, 90, 2]
    batch = make_paged_batch(lengths, block_size=16, num_kv_heads=3, head_dim=64, dtype=dtype)
    q = randn(len(lengths), 9, 64, seed=11, dtype=dtype)
    x = randn(len(lengths), 576, seed=12, dtype=dtype)
    weight, residual = randn(576, seed=13, dtype=dtype), randn(len(lengths), 576, seed=14)
    gate_up = randn(len(lengths), 3072, seed=15, dtype=dtype)

    def run(rows: slice) -> list[torch.Tensor]:
        out, summed = cpu_ops.rms_norm(x[rows], weight, 1e-5, residual[rows])
        attended = cpu_ops.paged_decode_attention(
            q[rows], batch.k_cache, batch.v_cache, batch.block_tables[rows],
            batch.context_lens[rows], 0.125,
        )
        return [out, summed, attended, cpu_ops.silu_and_mul(gate_up[rows])]

    threads = torch.get_num_threads()
    try:
        whole = run(slice(None))
        torch.set_num_threads(1)
        single_thread = run(slice(None))
    finally:
        torch.set_num_threads(threads)
    for got, expected in zip(single_thread, whole, strict=True):
        assert torch.equal(got, expected)
    for row in range(len(lengths)):
        alone = run(slice(row, row + 1))
        for got, expected in zip(alone, whole, strict=True):
            assert torch.equal(got[0], expected[row]), row


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("head_dim", [64, 128, 80])
def test_query_heads_read_together_get_the_bits_each_gets_alone(
    dtype, group, head_dim, make_paged_batch
):
    """A batch's query heads that share a KV head attend in one pass over its cache (up to
    four; more, and head dims not a multiple of 64, one head at a time); a sequence alone
    in a step attends one head at a time. Both give a head the same bits, in decode and in
    prefill. On two threads, where the batch reads heads together and a row alone does not
    (the ops give a step of few sequences one head a task, so every thread has work)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _check_heads_read_together(dtype, group, head_dim, make_paged_batch)
    finally:
        torch.set_num_threads(threads)


def _check_heads_read_together(dtype, group, head_dim, make_paged_batch) -> None:
    lengths = [1, 17, 40, 90, 33, 16]
    batch = make_paged_batch(lengths, block_size=16, num_kv_heads=2, head_dim=head_dim,
                             dtype=dtype)
    q = randn(len(lengths), 2 * group, head_dim, seed=21, dtype=dtype)
    together = cpu_ops.paged_decode_attention(
        q, batch.k_cache, batch.v_cache, batch.block_tables, batch.context_lens, 0.125)
    for row in range(len(lengths)):
        alone = cpu_ops.paged_decode_attention(
            q[row : row + 1], batch.k_cache, batch.v_cache, batch.block_tables[row : row + 1],
            batch.context_lens[row : row + 1], 0.125)
        assert torch.equal(alone[0], together[row]), row
    # The last 8 positions of the 90-token sequence, prefilled: 8 rows read together.
    new = randn(8, 2 * group, head_dim, seed=22, dtype=dtype)
    prefilled = cpu_ops.prefill_attention(
        new, batch.k_cache, batch.v_cache, batch.block_tables[3:4],
        torch.tensor([0, 8], dtype=torch.int32), batch.context_lens[3:4], 0.125)
    for index in range(8):
        step = cpu_ops.paged_decode_attention(
            new[index : index + 1], batch.k_cache, batch.v_cache, batch.block_tables[3:4],
            torch.tensor([90 - 8 + index + 1], dtype=torch.int32), 0.125)
        assert torch.equal(step[0], prefilled[index]), index


def test_bad_inputs_are_refused_with_a_message(make_paged_batch):
    batch = make_paged_batch([4], block_size=16, num_kv_heads=3, head_dim=64,
                             dtype=torch.float32)
    q = randn(1, 9, 64, seed=16)
    too_long = torch.tensor([999], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="exceeds its block table"):
        cpu_ops.paged_decode_attention(
            q, batch.k_cache, batch.v_cache, batch.block_tables, too_long, 0.125
        )
    with pytest.raises(RuntimeError, match="must share a dtype"):
        cpu_ops.paged_decode_attention(
            q.bfloat16(), batch.k_cache, batch.v_cache, batch.block_tables, batch.context_lens,
            0.125,
        )
    with pytest.raises(RuntimeError, match="last dim must be even"):
        cpu_ops.silu_and_mul(torch.ones(2, 5))
    broken_table = batch.block_tables.clone()
    broken_table[0, 0] = 10_000
    with pytest.raises(RuntimeError, match="not one of the cache's"):
        cpu_ops.paged_decode_attention(
            q, batch.k_cache, batch.v_cache, broken_table, batch.context_lens, 0.125
        )
    with pytest.raises(RuntimeError, match="outside the rotary table"):
        cpu_ops.rotary_embedding(
            randn(1, 9, 64, seed=17), randn(1, 3, 64, seed=18), torch.tensor([64]),
            randn(64, 64, seed=19),
        )


@pytest.fixture(scope="module")
def probes() -> object:
    """torch.ops.spate_cpu_probes: the test-only probes (tests/kernels/cpu/probes.cpp) with
    the pool's own source, built as the ops are and cached beside them."""
    probe = PROBES / "probes.cpp"
    pool = [cpu_ops.SOURCE_DIR / "chunk_pool.cpp", cpu_ops.SOURCE_DIR / "chunk_pool.h"]
    cpu_ops.build_library("spate_cpu_probes", [probe, pool[0]], [probe, *pool])
    return torch.ops.spate_cpu_probes


def test_the_ops_run_on_every_thread_torch_is_given(probes) -> None:
    """The fused ops' own threads (ChunkPool) number what torch is given, and run."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert probes.parallel_threads() == 2
        torch.set_num_threads(1)
        assert probes.parallel_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_two_processes_build_a_library_at_once_past_a_stale_lock(tmp_path) -> None:
    """Workers started together share one build; torch's `lock` file, which a killed build
    leaves behind, does not hold them up."""
    source = tmp_path / "tiny.cpp"
    source.write_text(
        "#include <torch/library.h>\n"
        "int64_t answer() { return 42; }\n"
        "TORCH_LIBRARY(spate_lock_check, m) { m.def(\"answer() -> int\", &answer); }\n"
    )
    build_root = tmp_path / "extensions"
    environment = {**os.environ, "TORCH_EXTENSIONS_DIR": str(build_root)}
    name = f"spate_lock_check_{cpu_ops._cpu_signature([source], cpu_ops.CFLAGS)}"
    (build_root / name).mkdir(parents=True)
    (build_root / name / "lock").write_text("")  # as a build killed midway leaves it
    script = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from kernels import cpu_ops\n"
        "source = Path(sys.argv[1])\n"
        "print(cpu_ops.build_library('spate_lock_check', [source], [source]))\n"
        "print(torch.ops.spate_lock_check.answer())\n"
    )
    builds = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(source)], cwd=REPO_ROOT, env=environment,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]
    for build in builds:
        out, err = build.communicate(timeout=600)
        assert build.returncode == 0, err
        assert out.split() == [name, "42"]


def test_a_library_built_again_in_a_process_is_the_one_already_loaded(tmp_path) -> None:
    """Two tests (or a test and the worker) may each build the same op library in one
    process: the second build must neither rebuild it under a new name nor load a second
    copy, whose registration of the same op namespace aborts the process."""
    source = tmp_path / "tiny.cpp"
    source.write_text(
        "#include <torch/library.h>\n"
        "int64_t answer() { return 42; }\n"
        "TORCH_LIBRARY(spate_reload_check, m) { m.def(\"answer() -> int\", &answer); }\n"
    )
    build_root = tmp_path / "extensions"
    script = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from kernels import cpu_ops\n"
        "source = Path(sys.argv[1])\n"
        "names = [cpu_ops.build_library('spate_reload_check', [source], [source])\n"
        "         for _ in range(2)]\n"
        "# torch's own loader again, as a build in another module of this process would\n"
        "# reach it: its flags must read the same as the first build's.\n"
        "cpu_ops._loaded_libraries.clear()\n"
        "names.append(cpu_ops.build_library('spate_reload_check', [source], [source]))\n"
        "assert len(set(names)) == 1, names\n"
        "assert cpu_ops.LDFLAGS == ['-fopenmp'], cpu_ops.LDFLAGS\n"
        "print(torch.ops.spate_reload_check.answer())\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(source)], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=600, env={**os.environ, "TORCH_EXTENSIONS_DIR": str(build_root)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["42"]
    assert sorted(path.name for path in build_root.rglob("*.so")) == [
        f"spate_reload_check_{cpu_ops._cpu_signature([source], cpu_ops.CFLAGS)}.so"]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _other_isa() -> str | None:
    """An x86 target whose vector code differs from this CPU's: AVX2 + FMA under AVX-512
    (two 8-lane halves where the native build has one 16-lane register), the baseline
    x86-64 (SSE2, plain vectors and std::fma) under AVX2."""
    if platform.machine() != "x86_64":
        return None
    flags = _cpu_flags()
    if {"avx512f", "avx2", "fma"} <= flags:
        return "x86-64-v3"
    if {"avx2", "fma"} <= flags:
        return "x86-64"
    return None


@pytest.mark.skipif(_other_isa() is None, reason="needs an x86 CPU with AVX2 or AVX-512")
def test_the_ops_give_the_same_bits_built_for_another_isa(make_paged_batch) -> None:
    """Workers on different CPUs resume each other's responses: the ops' bits must not
    depend on the vector width they were compiled for (16 fixed lanes, one rounding per
    fused multiply-add, lane_sum's tree). The same sources built for another ISA must
    agree bit for bit: the quantized linear and decode attention, the ops with code of
    their own for AVX-512 and for AVX2."""
    registration = PROBES / "isa_check.cpp"
    sources = [registration, *(cpu_ops.SOURCE_DIR / name for name in ISA_CHECK_SOURCES)]
    flags = [flag for flag in cpu_ops.CFLAGS if not flag.startswith("-march")]
    cpu_ops.build_library(
        "spate_isa_check", sources, [registration, *cpu_ops.library_files()],
        cflags=[*flags, f"-march={_other_isa()}"],
    )
    other = torch.ops.spate_isa_check
    generator = torch.Generator().manual_seed(0)
    for bits, rows, columns in ((4, 960, 576), (8, 576, 1536)):
        codes = torch.randint(0, 256, (rows, columns * bits // 8), generator=generator,
                              dtype=torch.uint8)
        if bits == 8:
            codes = codes.view(torch.int8)
        scales = torch.rand(rows, columns // 32, generator=generator) * 0.01
        mins = (torch.rand(rows, columns // 32, generator=generator) - 0.5) * 0.1
        for offset, with_mins in ((0, True), (8, False)) if bits == 4 else ((0, False),):
            for batch in (1, 2, 3, 5, 8, 33):
                x = torch.randn(batch, columns, generator=generator)
                args = (x, codes, scales, mins if with_mins else None, bits, offset)
                assert torch.equal(cpu_ops.quantized_linear(*args), other.quantized_linear(*args)), (
                    bits, offset, batch)
    for dtype in DTYPES:
        for head_dim in (64, 80, 32):
            paged = make_paged_batch([1, 17, 0, 90, 33], block_size=16, num_kv_heads=3,
                                     head_dim=head_dim, dtype=dtype)
            q = randn(5, 9, head_dim, seed=8, dtype=dtype)
            args = (q, paged.k_cache, paged.v_cache, paged.block_tables, paged.context_lens, 0.125)
            together = cpu_ops.paged_decode_attention(*args)
            assert torch.equal(together, other.paged_decode_attention(*args)), (dtype, head_dim)
            for row in range(5):  # alone, a row's heads attend one at a time
                alone = other.paged_decode_attention(
                    q[row : row + 1], paged.k_cache, paged.v_cache,
                    paged.block_tables[row : row + 1], paged.context_lens[row : row + 1], 0.125)
                assert torch.equal(alone[0], together[row]), (dtype, head_dim, row)


def test_a_changed_header_names_another_library(tmp_path) -> None:
    """The library's name hashes every source and header it is built from, so editing a
    header alone (paged_attention.h, where both attention ops live) builds a new one
    rather than loading the old."""
    files = cpu_ops.library_files()
    assert cpu_ops.SOURCE_DIR / "paged_attention.h" in files
    copies = []
    for path in files:
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    before = cpu_ops._cpu_signature(copies, cpu_ops.CFLAGS)
    assert before == cpu_ops._cpu_signature(files, cpu_ops.CFLAGS)
    header = tmp_path / "paged_attention.h"
    header.write_text(header.read_text() + "\n// edited\n")
    assert cpu_ops._cpu_signature(copies, cpu_ops.CFLAGS) != before
