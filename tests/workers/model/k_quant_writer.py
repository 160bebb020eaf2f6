"""Q4_K and Q6_K blocks from float weights, in numpy (gguf-py only dequantizes them): a
plain min/max quantizer in llama.cpp's block layouts, good enough to make a tiny model's
Q4_K_M-style file. The tests judge spate against gguf-py's dequantization of whatever
these write, so the quantizer's own quality only has to keep the model sensible."""

from __future__ import annotations

import numpy as np


def _fp16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)[..., None].view(np.uint8)


def quantize_q4_k(weight: np.ndarray) -> np.ndarray:
    """[rows, K] float -> [rows, K / 256 * 144] uint8 Q4_K blocks."""
    rows, columns = weight.shape
    x = weight.astype(np.float32).reshape(rows, columns // 256, 8, 32)
    low = np.minimum(x.min(axis=-1), 0.0)
    scale = (x.max(axis=-1) - low) / 15.0
    d = _fp16(scale.max(axis=-1) / 63.0).astype(np.float32)
    dmin = _fp16(-low.min(axis=-1) / 63.0).astype(np.float32)
    sc = np.clip(np.rint(scale / np.maximum(d, 1e-12)[..., None]), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(-low / np.maximum(dmin, 1e-12)[..., None]), 0, 63).astype(np.uint8)
    step = np.maximum(d[..., None] * sc, 1e-12)[..., None]
    q = np.clip(np.rint((x + (dmin[..., None] * m)[..., None]) / step), 0, 15).astype(np.uint8)
    packed = np.empty((rows, columns // 256, 12), dtype=np.uint8)
    packed[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    packed[..., 4:8] = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    packed[..., 8:12] = (sc[..., 4:] & 15) | ((m[..., 4:] & 15) << 4)
    chunks = q.reshape(rows, columns // 256, 4, 2, 32)  # 64 weights a chunk: 32 low, 32 high
    nibbles = (chunks[..., 0, :] | (chunks[..., 1, :] << 4)).reshape(rows, columns // 256, 128)
    blocks = np.concatenate(
        [_fp16_bytes(d), _fp16_bytes(dmin), packed, nibbles], axis=-1
    )
    return blocks.reshape(rows, -1)


def quantize_q6_k(weight: np.ndarray) -> np.ndarray:
    """[rows, K] float -> [rows, K / 256 * 210] uint8 Q6_K blocks."""
    rows, columns = weight.shape
    blocks_per_row = columns // 256
    x = weight.astype(np.float32).reshape(rows, blocks_per_row, 16, 16)
    scale = np.abs(x).max(axis=-1) / 31.0
    d = _fp16(scale.max(axis=-1) / 127.0).astype(np.float32)
    sc = np.clip(np.rint(scale / np.maximum(d, 1e-12)[..., None]), -128, 127).astype(np.int8)
    step = np.maximum(d[..., None] * sc, 1e-12)[..., None]
    q = (np.clip(np.rint(x / step), -32, 31) + 32).astype(np.uint8)
    q = q.reshape(rows, blocks_per_row, 2, 128)  # two halves of 128 weights
    ql = (q[..., :64] & 15) | ((q[..., 64:] & 15) << 4)  # [.., 2, 64]
    quarters = q.reshape(rows, blocks_per_row, 2, 4, 32) >> 4
    qh = quarters[..., 0, :] | (quarters[..., 1, :] << 2) | (quarters[..., 2, :] << 4)
    qh = qh | (quarters[..., 3, :] << 6)  # [.., 2, 32]
    blocks = np.concatenate(
        [
            ql.reshape(rows, blocks_per_row, 128),
            qh.reshape(rows, blocks_per_row, 64),
            sc.view(np.uint8),
            _fp16_bytes(d),
        ],
        axis=-1,
    )
    return blocks.reshape(rows, -1)
