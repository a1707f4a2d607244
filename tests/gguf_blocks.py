"""GGUF block decoding in numpy, written from ggml's block layouts (not from this project's
kernels), for the GPU qmatmul tests: the f32 weights a uint8 [rows, blocks * block_size] array
holds, each element computed in float32 in ggml's order of operations."""

import numpy as np

from max.graph.quantization import QuantizationEncoding as Q


def _f16(b, off):
    """The f16 field at byte `off` of every block, as float32 [rows, blocks, 1]."""
    return b[..., off : off + 2].copy().view(np.float16).astype(np.float32)


def _scale_min(scales):
    """ggml's get_scale_min_k4 for the 8 sub-blocks: 6-bit scales and mins from 12 bytes."""
    q = scales.astype(np.uint32)
    sc = np.empty(q.shape[:-1] + (8,), np.uint32)
    mn = np.empty_like(sc)
    sc[..., :4] = q[..., 0:4] & 63
    mn[..., :4] = q[..., 4:8] & 63
    sc[..., 4:] = (q[..., 8:12] & 0xF) | ((q[..., 0:4] >> 6) << 4)
    mn[..., 4:] = (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)
    return sc.astype(np.float32), mn.astype(np.float32)


def decode(enc, raw):
    """float32 [rows, blocks * elements] of uint8 blocks [rows, blocks * block_size]."""
    rows = raw.shape[0]
    b = raw.reshape(rows, -1, enc.block_size)
    if enc in (Q.Q4_0, Q.Q4_1):
        qs = b[..., 2:18] if enc == Q.Q4_0 else b[..., 4:20]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.float32)
        if enc == Q.Q4_0:
            out = (q - np.float32(8)) * _f16(b, 0)
        else:
            out = _f16(b, 0) * q + _f16(b, 2)
    elif enc == Q.Q8_0:
        out = b[..., 2:34].view(np.int8).astype(np.float32) * _f16(b, 0)
    elif enc in (Q.Q4_K, Q.Q5_K):
        sc, mn = _scale_min(b[..., 4:16])
        d1 = _f16(b, 0) * sc  # [rows, blocks, 8]
        m1 = _f16(b, 2) * mn
        qs = b[..., 16:144] if enc == Q.Q4_K else b[..., 48:176]
        pairs = qs.reshape(rows, -1, 4, 32)  # 4 runs of 32 bytes, each two sub-blocks
        q = np.stack([pairs & 0xF, pairs >> 4], axis=3).reshape(rows, -1, 8, 32).astype(np.uint32)
        if enc == Q.Q5_K:
            qh = b[..., 16:48].astype(np.uint32)  # [rows, blocks, 32]
            hi = (qh[:, :, None, :] >> np.arange(8, dtype=np.uint32)[None, None, :, None]) & 1
            q = q | (hi << 4)
        out = (d1[..., None] * q.astype(np.float32) - m1[..., None]).reshape(rows, -1, 256)
    elif enc == Q.Q6_K:
        ql = b[..., 0:128].reshape(rows, -1, 2, 2, 32)  # half h, run (p & 1), l
        qh = b[..., 128:192].reshape(rows, -1, 2, 32).astype(np.uint32)
        nib = np.stack([ql & 0xF, ql >> 4], axis=3)  # [rows, blocks, h, p >> 1, p & 1, l]
        nib = nib.reshape(rows, -1, 2, 4, 32).astype(np.uint32)  # p = 2 * (p >> 1) + (p & 1)
        hi = (qh[:, :, :, None, :] >> (2 * np.arange(4, dtype=np.uint32))[None, None, None, :, None]) & 3
        q = (nib | (hi << 4)).astype(np.float32) - np.float32(32)
        sc = b[..., 192:208].view(np.int8).astype(np.float32)  # one per 16 elements
        scale = (_f16(b, 208) * sc).repeat(16, axis=-1).reshape(rows, -1, 2, 4, 32)
        out = (scale * q).reshape(rows, -1, 256)
    else:
        raise ValueError(f"no decoder for {enc}")
    return out.reshape(rows, -1).astype(np.float32)
