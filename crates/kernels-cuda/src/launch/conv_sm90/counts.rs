//! The Hopper conv2d launcher's counters: how many launches took each path in this process
//! (tests and the Python bindings read them to check that a shape took the path it should).

use std::sync::atomic::{AtomicU64, Ordering};

/// Launches of the kernel in this process (tests check that a shape took this path).
pub(super) static LAUNCHES: AtomicU64 = AtomicU64::new(0);

pub fn launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Of [`launches`], those that split the reduction (split-K).
pub(super) static SPLIT: AtomicU64 = AtomicU64::new(0);

pub fn split_launches() -> u64 {
    SPLIT.load(Ordering::Relaxed)
}

/// Of [`launches`], those whose consumer warpgroups took alternate tiles (ping-pong).
pub(super) static PINGPONG: AtomicU64 = AtomicU64::new(0);

pub fn pingpong_launches() -> u64 {
    PINGPONG.load(Ordering::Relaxed)
}

/// Of [`launches`], those with tiles of 256 rows.
pub(super) static WIDE: AtomicU64 = AtomicU64::new(0);

pub fn wide_launches() -> u64 {
    WIDE.load(Ordering::Relaxed)
}

/// Of [`launches`], those whose plain ping-pong tiles have fewer than 128 rows.
pub(super) static SHORT: AtomicU64 = AtomicU64::new(0);

pub fn short_launches() -> u64 {
    SHORT.load(Ordering::Relaxed)
}

/// Of [`launches`], those with tiles of 192 rows (three consumer warpgroups).
pub(super) static TRIO: AtomicU64 = AtomicU64::new(0);

pub fn trio_launches() -> u64 {
    TRIO.load(Ordering::Relaxed)
}

/// Of [`launches`], those that loaded the residual into the ring (see the kernel's header).
pub(super) static RES_RING: AtomicU64 = AtomicU64::new(0);

pub fn res_ring_launches() -> u64 {
    RES_RING.load(Ordering::Relaxed)
}

/// Of [`launches`], those that took an entry compiled with the lean epilogue (`_lean`: biases,
/// relu or none, the residual in the ring or absent; see kernels/conv_sm90.cuh).
pub(super) static LEAN: AtomicU64 = AtomicU64::new(0);

pub fn lean_launches() -> u64 {
    LEAN.load(Ordering::Relaxed)
}

/// Of [`launches`], those launched as clusters of two CTAs sharing the A tile by multicast.
pub(super) static CLUSTER: AtomicU64 = AtomicU64::new(0);

pub fn cluster_launches() -> u64 {
    CLUSTER.load(Ordering::Relaxed)
}

/// Of [`launches`], those whose lean epilogue wrote its results over the residual's slots and
/// stored them from there (see kernels/conv_sm90.cuh, `ring_out`).
pub(super) static TMA_OUT: AtomicU64 = AtomicU64::new(0);

pub fn tma_out_launches() -> u64 {
    TMA_OUT.load(Ordering::Relaxed)
}

/// Of [`tma_out_launches`], those that added the residual on pairs of the element type to relu's
/// rounded output (see kernels/conv_sm90.cuh, `ring_out`).
pub(super) static PACKED: AtomicU64 = AtomicU64::new(0);

pub fn packed_launches() -> u64 {
    PACKED.load(Ordering::Relaxed)
}

/// Of [`tma_out_launches`], those whose threads stored the results from the slots as 16-byte
/// vectors (the others stored them by TMA).
pub(super) static VECTOR: AtomicU64 = AtomicU64::new(0);

pub fn vector_out_launches() -> u64 {
    VECTOR.load(Ordering::Relaxed)
}

/// Of [`launches`], those whose residual went to a shared-memory buffer of its own instead of to
/// ring slots (kernels/conv_sm90.cu, "Residual buffer").
pub(super) static RES_BUF: AtomicU64 = AtomicU64::new(0);

pub fn res_buf_launches() -> u64 {
    RES_BUF.load(Ordering::Relaxed)
}

/// Of [`launches`], those that ran as a GEMM (1x1 convs, see `gemm.rs`).
pub fn gemm_launches() -> u64 {
    super::gemm::GEMM.load(Ordering::Relaxed)
}

/// Of [`launches`], those that ran on channel-padded copies ([`super::pad`]).
pub fn padded_launches() -> u64 {
    super::pad::PADDED.load(Ordering::Relaxed)
}
