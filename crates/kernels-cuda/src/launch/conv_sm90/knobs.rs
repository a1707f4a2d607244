//! The Hopper conv2d launcher's tuning knobs: the `conv.*` entries of the tuning registry as
//! the launcher reads them (one snapshot per call).

use max_tuning::{Knob, Tuning};

/// The launcher's tuning knobs (None / false: chosen per shape, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// The column-tile width, 64, 128 or 256 (`conv.bn`).
    pub bn: Option<usize>,
    /// At most this many persistent blocks (`conv.grid`; default one per SM).
    pub grid: Option<usize>,
    /// Splits of the reduction, 1 = never split (`conv.splitk`).
    pub splits: Option<usize>,
    /// No residual prefetch (`conv.prefetch=0`).
    pub no_prefetch: bool,
    /// How far padded convs may fold the filter into the channels ([`super::pad`]):
    /// `conv.fold=0` keeps them unfolded, `=1` folds the columns only; unset, the
    /// rows may fold too.
    pub fold: Option<usize>,
    /// 1x1 convs with stride 1 and no padding read x through a tiled map of [M, C] instead of
    /// the im2col one (on unless `conv.tiled_a=0`).
    pub tiled_a: bool,
    /// Results stored straight from the fragments instead of as 16-byte vectors staged through
    /// shared memory (`conv.vec=0`).
    pub no_vec: bool,
    /// No prefetch of each warp's residual rows at the start of a tile
    /// (`conv.line_prefetch=0`).
    pub no_line_prefetch: bool,
    /// Launches under programmatic stream serialization (on unless `conv.pdl=0`): the
    /// grid may start while the stream's previous kernel drains, and lets the next one start as
    /// its blocks leave.
    pub pdl: bool,
    /// A 16-byte aligned residual added in the fragments instead of read as 16-byte vectors
    /// on the way out (`conv.res_vec=0`).
    pub no_res_vec: bool,
    /// The consumer warpgroups take alternate tiles (`conv.pingpong=1`) or share every
    /// tile (`=0`); unset, [`super::pingpong`] decides. Tile widths up to 128 only.
    pub pingpong: Option<bool>,
    /// Rows per tile: 256 (`conv.bm=256`; tile widths up to 128, unsplit), 192 over
    /// three consumer warpgroups (`=192`; 128 wide, unsplit: the width is forced to 128 unless
    /// `conv.bn` says otherwise) or 128 (`=128`); unset, [`super::tile_rows`] decides.
    pub rows: Option<usize>,
    /// A fused residual read from global memory by the epilogue (`conv.res_ring=0`)
    /// instead of loaded by TMA into the ring after each tile's k-steps, where the tile form
    /// allows that ([`super::ring_fits`]).
    pub no_res_ring: bool,
    /// The kernel entry with every epilogue option even where the lean one (biases, relu, the
    /// residual in the ring) would do (`conv.lean=0`).
    pub no_lean: bool,
    /// Clusters of two CTAs sharing each k-step's A tile by multicast, for 192-row tiles (plain
    /// or lean) and 128 x 64 ping-pong tiles (plain) with an even number of column tiles
    /// (`conv.cluster=2`; `=1`: none; unset: 192-row tiles where they pay).
    pub cluster: Option<usize>,
    /// The lean epilogue stores its results from the staging buffer instead of from the
    /// residual's ring slots, where it writes them over the residual (`conv.tma_out=0`).
    pub no_tma_out: bool,
    /// Rows per plain 128 x 64 ping-pong tile (unclustered), a multiple of 16 up to 128
    /// (`conv.tm`; 128: full tiles); unset, [`super::short_rows`] decides where every
    /// block has one unit.
    pub tm: Option<usize>,
    /// The lean epilogue loads its biases after the mainloop instead of when a warp starts a tile
    /// (`conv.early_bias=0`).
    pub late_bias: bool,
    /// The lean epilogue's residual loaded into ring slots after each tile's k-steps instead of
    /// into a buffer of its own (`conv.res_buf=0`).
    pub no_res_buf: bool,
    /// The lean epilogue's results, written over the residual's slots, stored from there by TMA
    /// instead of as 16-byte vectors from the threads (`conv.store_tma=1`; clusters
    /// always store by TMA).
    pub store_tma: bool,
    /// The lean epilogue with relu and the residual in its slots adds it in f32 instead of on
    /// pairs of the element type after rounding relu's output (`conv.packed=0`).
    pub no_packed: bool,
}

impl Knobs {
    /// The knobs as the tuning registry sets them (`conv.*`; see max_tuning's declarations).
    pub fn from_tuning(t: &Tuning) -> Knobs {
        let off = |k: Knob| t.flag(k) == Some(false);
        Knobs {
            bn: t.int(Knob::ConvBn),
            grid: t.int(Knob::ConvGrid),
            splits: t.int(Knob::ConvSplitk),
            no_prefetch: off(Knob::ConvPrefetch),
            fold: t.int(Knob::ConvFold),
            // Measured on an H200 (ResNet-50 batch 32): the 53-conv stack 1523 us with it, 1559
            // without, no layer slower by more than noise.
            tiled_a: !off(Knob::ConvTiledA),
            no_vec: off(Knob::ConvVec),
            no_res_vec: off(Knob::ConvResVec),
            no_line_prefetch: off(Knob::ConvLinePrefetch),
            // Measured on an H200 (ResNet-50 batch 32, back-to-back launches): the 53-conv stack
            // 1014 us without it, 908 with it; the 1x1 layers about 2 us faster each.
            pdl: !off(Knob::ConvPdl),
            pingpong: t.flag(Knob::ConvPingpong),
            rows: t.int(Knob::ConvBm),
            // Measured on an H200 (fused ResNet-50 blocks at batch 32, with it / without, us):
            // 56x56 64 -> 256 40.2 / 43.4; 28x28 3x3 128 16.5 / 16.5; 14x14 256 -> 1024 15.6 / 15.3.
            no_res_ring: off(Knob::ConvResRing),
            no_lean: off(Knob::ConvLean),
            cluster: t.int(Knob::ConvCluster),
            no_tma_out: off(Knob::ConvTmaOut),
            no_res_buf: off(Knob::ConvResBuf),
            late_bias: off(Knob::ConvEarlyBias),
            store_tma: t.flag(Knob::ConvStoreTma) == Some(true),
            no_packed: off(Knob::ConvPacked),
            tm: t.int(Knob::ConvTm),
        }
    }
}
