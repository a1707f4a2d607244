//! The Hopper conv2d launcher's tuning knobs, read from the environment at every call.

/// The launcher's tuning knobs (None / false: chosen per shape, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    /// The column-tile width, 64, 128 or 256 (`MAX_CONV_SM90_BN`).
    pub bn: Option<usize>,
    /// At most this many persistent blocks (`MAX_CONV_SM90_GRID`; default one per SM).
    pub grid: Option<usize>,
    /// Splits of the reduction, 1 = never split (`MAX_CONV_SM90_SPLITK`).
    pub splits: Option<usize>,
    /// No residual prefetch (`MAX_CONV_SM90_PREFETCH=0`).
    pub no_prefetch: bool,
    /// How far padded convs may fold the filter into the channels ([`super::pad`]):
    /// `MAX_CONV_SM90_FOLD=0` keeps them unfolded, `=1` folds the columns only; unset, the
    /// rows may fold too.
    pub fold: Option<usize>,
    /// The staged epilogue (`MAX_CONV_SM90_STAGED=1`; see kernels/conv_sm90.cu).
    pub staged: bool,
    /// 1x1 convs with stride 1 and no padding read x through a tiled map of [M, C] instead of
    /// the im2col one (on unless `MAX_CONV_SM90_TILED_A=0`).
    pub tiled_a: bool,
    /// Results stored straight from the fragments instead of as 16-byte vectors staged through
    /// shared memory (`MAX_CONV_SM90_VEC=0`).
    pub no_vec: bool,
    /// No prefetch of each warp's residual rows at the start of a tile
    /// (`MAX_CONV_SM90_LINE_PREFETCH=0`).
    pub no_line_prefetch: bool,
    /// Launches under programmatic stream serialization (on unless `MAX_CONV_SM90_PDL=0`): the
    /// grid may start while the stream's previous kernel drains, and lets the next one start as
    /// its blocks leave.
    pub pdl: bool,
    /// A 16-byte aligned residual added in the fragments instead of read as 16-byte vectors
    /// on the way out (`MAX_CONV_SM90_RESVEC=0`).
    pub no_res_vec: bool,
    /// The consumer warpgroups take alternate tiles (`MAX_CONV_SM90_PINGPONG=1`) or share every
    /// tile (`=0`); unset, [`super::pingpong`] decides. Tile widths up to 128 only.
    pub pingpong: Option<bool>,
    /// Rows per tile: 256 (`MAX_CONV_SM90_BM=256`; tile widths up to 128, unsplit), 192 over
    /// three consumer warpgroups (`=192`; 128 wide, unsplit: the width is forced to 128 unless
    /// `MAX_CONV_SM90_BN` says otherwise) or 128 (`=128`); unset, [`super::tile_rows`] decides.
    pub rows: Option<usize>,
    /// A fused residual read from global memory by the epilogue (`MAX_CONV_SM90_RES_RING=0`)
    /// instead of loaded by TMA into the ring after each tile's k-steps, where the tile form
    /// allows that ([`super::ring_fits`]).
    pub no_res_ring: bool,
    /// The kernel entry with every epilogue option even where the lean one (biases, relu, the
    /// residual in the ring) would do (`MAX_CONV_SM90_LEAN=0`).
    pub no_lean: bool,
    /// Clusters of two CTAs sharing each k-step's A tile by multicast, for 192-row tiles (plain
    /// or lean) and 128 x 64 ping-pong tiles (plain) with an even number of column tiles
    /// (`MAX_CONV_SM90_CLUSTER=2`; `=1`: none; unset: 192-row tiles where they pay).
    pub cluster: Option<usize>,
    /// The lean epilogue stores its results from the staging buffer instead of from the
    /// residual's ring slots, where it writes them over the residual (`MAX_CONV_SM90_TMA_OUT=0`).
    pub no_tma_out: bool,
    /// Rows per plain 128 x 64 ping-pong tile (unclustered), a multiple of 16 up to 128
    /// (`MAX_CONV_SM90_TM`; 128: full tiles); unset, [`super::short_rows`] decides where every
    /// block has one unit.
    pub tm: Option<usize>,
    /// The lean epilogue loads its biases after the mainloop instead of when a warp starts a tile
    /// (`MAX_CONV_SM90_EARLY_BIAS=0`).
    pub late_bias: bool,
    /// The lean epilogue's residual loaded into ring slots after each tile's k-steps instead of
    /// into a buffer of its own (`MAX_CONV_SM90_RES_BUF=0`).
    pub no_res_buf: bool,
    /// The lean epilogue's results, written over the residual's slots, stored from there by TMA
    /// instead of as 16-byte vectors from the threads (`MAX_CONV_SM90_STORE_TMA=1`; clusters
    /// always store by TMA).
    pub store_tma: bool,
    /// The lean epilogue with relu and the residual in its slots adds it in f32 instead of on
    /// pairs of the element type after rounding relu's output (`MAX_CONV_SM90_PACKED=0`).
    pub no_packed: bool,
}

impl Knobs {
    /// The knobs as the environment sets them (read at every call, so a process can switch).
    pub fn from_env() -> Knobs {
        Knobs {
            bn: env_usize("MAX_CONV_SM90_BN").filter(|b| [64, 128, 256].contains(b)),
            grid: env_usize("MAX_CONV_SM90_GRID").filter(|&g| g > 0),
            splits: env_usize("MAX_CONV_SM90_SPLITK").filter(|&n| n > 0),
            no_prefetch: env_usize("MAX_CONV_SM90_PREFETCH") == Some(0),
            fold: env_usize("MAX_CONV_SM90_FOLD").filter(|&f| f <= 2),
            staged: env_usize("MAX_CONV_SM90_STAGED") == Some(1),
            // Measured on an H200 (ResNet-50 batch 32): the 53-conv stack 1523 us with it, 1559
            // without, no layer slower by more than noise.
            tiled_a: env_usize("MAX_CONV_SM90_TILED_A") != Some(0),
            no_vec: env_usize("MAX_CONV_SM90_VEC") == Some(0),
            no_res_vec: env_usize("MAX_CONV_SM90_RESVEC") == Some(0),
            no_line_prefetch: env_usize("MAX_CONV_SM90_LINE_PREFETCH") == Some(0),
            // Measured on an H200 (ResNet-50 batch 32, back-to-back launches): the 53-conv stack
            // 1014 us without it, 908 with it; the 1x1 layers about 2 us faster each.
            pdl: env_usize("MAX_CONV_SM90_PDL") != Some(0),
            pingpong: env_usize("MAX_CONV_SM90_PINGPONG").filter(|&v| v <= 1).map(|v| v == 1),
            rows: env_usize("MAX_CONV_SM90_BM").filter(|b| [128, 192, 256].contains(b)),
            // Measured on an H200 (fused ResNet-50 blocks at batch 32, with it / without, us):
            // 56x56 64 -> 256 40.2 / 43.4; 28x28 3x3 128 16.5 / 16.5; 14x14 256 -> 1024 15.6 / 15.3.
            no_res_ring: env_usize("MAX_CONV_SM90_RES_RING") == Some(0),
            no_lean: env_usize("MAX_CONV_SM90_LEAN") == Some(0),
            cluster: env_usize("MAX_CONV_SM90_CLUSTER").filter(|c| [1, 2].contains(c)),
            no_tma_out: env_usize("MAX_CONV_SM90_TMA_OUT") == Some(0),
            no_res_buf: env_usize("MAX_CONV_SM90_RES_BUF") == Some(0),
            late_bias: env_usize("MAX_CONV_SM90_EARLY_BIAS") == Some(0),
            store_tma: env_usize("MAX_CONV_SM90_STORE_TMA") == Some(1),
            no_packed: env_usize("MAX_CONV_SM90_PACKED") == Some(0),
            tm: env_usize("MAX_CONV_SM90_TM").filter(|&t| t % 16 == 0 && (16..=128).contains(&t)),
        }
    }
}

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}
