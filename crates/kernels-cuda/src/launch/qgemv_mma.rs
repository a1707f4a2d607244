//! The integer tensor-core GEMV (kernels/qgemv_mma.cu) for 1-8 lhs rows of Q4_0/Q4_1/Q4_K and
//! one row of Q6_K:
//! its shared-memory plan, persistent grid, TMA weight maps and sibling segments, and the
//! launch. A child of quant.rs, whose path selection sends products here.

use super::*;

/// Matches QM_WARPS, QM_CHUNK, QM_MAX_ST and Qm (SLOT) in qgemv_mma.cu.
const QM_WARPS: usize = 8;
const QM_CHUNK: usize = 256;
const QM_MAX_ST: usize = 4;
/// Shared memory for the lhs fragments (96 bytes per 32 elements and lhs row, plus 16 bytes of
/// per-unit terms) beyond which qmatmul keeps to qgemv_stream.cu: K times the kernel's rows
/// (1, 2, 4 for 3-4 rows, 8 for 5-8) up to about 33000: K = 4096 at 8 rows.
pub(super) const QM_PREP_BUDGET: usize = 116 * 1024;

/// The kernel's lhs rows (MR in qgemv_mma.cu) for m rows: 1, 2, 4 (for 3 and 4) or 8 (5 to 8).
pub(super) fn mma_rows(m: usize) -> usize {
    match m {
        0..=2 => m,
        3..=4 => 4,
        _ => 8,
    }
}

/// The integer tensor-core GEMV's shared memory for m lhs rows and `stages` weight stages per
/// warp: (the lhs fragments and per-unit terms, the whole: those, 128 zero bytes, each warp's
/// stages and mbarriers, and the group sums, two per lane and pair of rows).
pub(super) fn mma_gemv_smem(enc: Encoding, m: usize, k: usize, stages: usize) -> (usize, usize) {
    let slot = slot_bytes(enc);
    let mr = mma_rows(m);
    let prep = (k / 32) * mr * (96 + 16);
    let sums = QM_WARPS * 64 * 4 * mr.div_ceil(2);
    (prep, (prep + 128).next_multiple_of(128) + QM_WARPS * stages * (16 * slot + 8) + sums)
}

/// A row chunk's pitch in a weight stage, the TMA box's width: the chunk's bytes in whole 16
/// (Qm::SLOT; Q6_K's 210 in 224).
fn slot_bytes(enc: Encoding) -> usize {
    let (elems, bytes) = enc.block();
    (QM_CHUNK / elems * bytes).next_multiple_of(16)
}

/// Whether rows of `row_bytes` hold K elements of `enc` in whole blocks, on 16 bytes (TMA's
/// boxes): then a 256-element chunk holds whole pairs of 32-element units (K / 32 a multiple of
/// 8 for Q4_0, of 4 for Q4_1; Q4_K and Q6_K whole super-blocks), as the one-row kernels take them.
fn rows_fit(enc: Encoding, k: usize, row_bytes: usize) -> bool {
    let (elems, bytes) = enc.block();
    k > 0 && k.is_multiple_of(elems) && row_bytes == k / elems * bytes && row_bytes.is_multiple_of(16)
}

/// K parts per tile (a power of two up to 8 and at most `chunks`) for `tiles` tiles over
/// `slots` resident warps: 8 when even that keeps to one part per warp, else the largest up to 4
/// that keeps to two. Parts interleave K's chunks, so more parts read each row in longer runs;
/// on an H200 at 32000 x 4096 four parts ran 3% faster than two, and 8 no faster than 4.
fn auto_split(tiles: usize, chunks: usize, slots: usize) -> usize {
    let max_split = (1..=QM_WARPS.min(chunks)).filter(|s| s.is_power_of_two()).max().unwrap_or(1);
    if max_split == 8 && tiles * 8 <= slots {
        return 8;
    }
    let mut split = max_split.min(4);
    while split > 1 && tiles * split > 2 * slots {
        split /= 2;
    }
    split
}

/// The weights as a 2-D TMA tensor of bytes [n, row_bytes] in boxes of `rows` rows x `chunk`
/// bytes (qgemv_mma.cu's QmMap: 16 rows, or 8 for a gated pair; qgemm_sm90.cu's: 64 or 32);
/// out-of-range rows and bytes read as zeros.
pub(crate) fn weight_map(w: u64, row_bytes: usize, n: usize, chunk: u32, rows: u32) -> Result<TmaMap> {
    tma::tiled(
        sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        w,
        &[row_bytes as u64, n as u64],
        &[row_bytes as u64],
        &[chunk, rows],
        sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
    )
    .map_err(Error::driver("cuTensorMapEncodeTiled"))
}

/// (K parts per tile, blocks) of qgemv_mma.cu for n weight rows of k elements with `resident`
/// blocks fitting at once: tiles of 16 rows go round-robin over the warps; with fewer tiles than
/// warps, `split` warps share a tile, each taking 1/split of K's chunks (at least one each).
/// `qgemv.split` (1, 2, 4 or 8) and `qgemv.grid` (tests: several tiles per warp) force them.
fn mma_grid(n: usize, k: usize, resident: usize, tuning: &max_tuning::Tuning) -> (usize, usize) {
    let tiles = n.div_ceil(16);
    let chunks = k.div_ceil(QM_CHUNK);
    let mut split = auto_split(tiles, chunks, resident * QM_WARPS);
    if let Some(s) = tuning.int(max_tuning::Knob::QgemvSplit).filter(|s| *s <= QM_WARPS) {
        split = s;
        while split > chunks {
            split /= 2;
        }
    }
    let cap = tuning.int(max_tuning::Knob::QgemvGrid).unwrap_or(usize::MAX);
    (split, tiles.div_ceil(QM_WARPS / split).min(resident).min(cap))
}

/// Every CTA of qgemv_mma.cu turns the whole lhs (K x its rows) into fragments before its first
/// tile; in clusters of two CTAs, each does half and copies it into the other's shared memory.
/// That pays from this many elements (K times the kernel's rows) on: an H200, the 8B-shaped Q4_0
/// model's products in one process (ncu, us a call, one CTA / clusters of two): the down
/// projection at one row (K = 14336) 20.96 / 19.68, q/k/v 13.76 / 13.25, gate/up (K = 4096)
/// 29.25 / 29.66, o 10.27 / 10.66; decode at 8 rows (K = 4096) 1,115 -> 1,170 tok/s. Every
/// one-row product in clusters (q/k/v's gain included) decoded at 365.2 tok/s against 371.1 with
/// this threshold. Clusters of four or eight measured 0.85x at one row: the persistent grid (as
/// many blocks as fit) loses co-resident blocks to the clusters' placement.
const CLUSTER_MIN_PREP: usize = 12 * 1024;

/// (CTAs per cluster, blocks) for a grid of `blocks` (mma_grid's) with `resident` fitting at
/// once and `prep` lhs elements to prepare (K times the kernel's rows): two where `prep` is at
/// least CLUSTER_MIN_PREP (`qgemv.cluster` forces 1 or 2), none for a grid of one block or a
/// kernel built without (`clusters` false: Q4_K's at 2 rows, whose registers leave no room);
/// the grid becomes a multiple of the cluster, rounded up where that still fits at once (and
/// within `qgemv.grid`), else down.
fn mma_cluster(
    (blocks, resident): (usize, usize),
    prep: usize,
    clusters: bool,
    tuning: &max_tuning::Tuning,
) -> (usize, usize) {
    let want = tuning.int(max_tuning::Knob::QgemvCluster).unwrap_or(if prep >= CLUSTER_MIN_PREP { 2 } else { 1 });
    let c = if blocks < 2 || !clusters { 1 } else { want };
    let limit = resident.min(tuning.int(max_tuning::Knob::QgemvGrid).unwrap_or(usize::MAX));
    let up = blocks.next_multiple_of(c);
    (c, if up <= limit.max(c) { up } else { blocks / c * c })
}

/// Blocks of `f` (256 threads, `smem` bytes) resident at once in clusters of two (cached per
/// device, kernel and smem): twice the driver's count of co-resident clusters, or `resident`
/// (without clusters) where it cannot say or answers far below that. Each SM of a GPC may hold
/// several blocks, but a cluster's two must be placed in one GPC at once: a persistent grid of
/// more would leave clusters waiting for a whole round of tiles.
fn resident_in_pairs(stream: &Arc<CudaStream>, f: &CudaFunction, name: &str, smem: u32, resident: usize) -> usize {
    type Cache = Mutex<Option<HashMap<(usize, String, u32), usize>>>;
    static CACHE: Cache = Mutex::new(None);
    let key = (stream.context().ordinal(), name.to_string(), smem);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return v;
    }
    let fallback = resident / 2 * 2;
    let v = match crate::launch::active_clusters(stream, f, 2, fallback.max(2), (256, smem)) {
        Some(count) if 2 * count * 4 >= fallback * 3 => (2 * count).min(fallback),
        _ => fallback,
    };
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, v);
    v
}

/// (stages, shared memory, resident blocks) of qgemv_mma.cu's launch `name` (its encoding and
/// rows) for m rows of K (see pick_stages), worked out once per device, kernel, K and
/// `qgemv.stages`.
fn mma_stages(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    name: &str,
    (enc, m, k): (Encoding, usize, usize),
    tuning: &max_tuning::Tuning,
) -> Result<(usize, u32, usize)> {
    type Key = (usize, String, usize, Option<usize>);
    type Cache = Mutex<Option<HashMap<Key, (usize, u32, usize)>>>;
    static CACHE: Cache = Mutex::new(None);
    let forced = tuning.int(max_tuning::Knob::QgemvStages);
    let key = (stream.context().ordinal(), name.to_string(), k, forced);
    if let Some(&v) = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(v);
    }
    let smem = |st: usize| mma_gemv_smem(enc, m, k, st).1 as u32;
    // (occupancy is asked for after the kernel may take that much shared memory)
    let mut resident = [None; QM_MAX_ST + 1];
    for (st, r) in resident.iter_mut().enumerate().skip(2) {
        if crate::allow_smem(stream.context(), f, smem(st)).is_ok() {
            *r = Some(resident_blocks(stream, f, name, smem(st))?);
        }
    }
    let st = pick_stages(|st| resident[st], forced, m == 1);
    let v = (st, smem(st), resident[st].unwrap_or(1));
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new).insert(key, v);
    Ok(v)
}

/// Weight stages per warp: 2 (3 for one lhs row where the block holds them), or the most up to
/// QM_MAX_ST that keep the resident blocks that count allows (`resident(st)`, None where the
/// device's block cannot hold st): at long K the lhs fragments hold an SM to 1-2 blocks and
/// leave room for more bytes in flight. At one row a third stage paid even where it cost a
/// block per SM (K = 4096: four blocks of two stages, three of three, when the one-row kernels
/// held 64 registers; an H200, the 8B-shaped Q4_0 model's decode at one sequence 368.0 -> 382.1
/// tok/s; at 80 registers they hold three blocks whatever the stages). `forced`
/// (`qgemv.stages`) wins where the device allows it.
fn pick_stages(resident: impl Fn(usize) -> Option<usize>, forced: Option<usize>, one_row: bool) -> usize {
    if let Some(st) = forced.filter(|st| (2..=QM_MAX_ST).contains(st) && resident(*st).is_some()) {
        return st;
    }
    let floor = if one_row && resident(3).is_some() { 3 } else { 2 };
    let base = resident(floor);
    (floor + 1..=QM_MAX_ST).take_while(|st| resident(*st).is_some() && resident(*st) >= base).last().unwrap_or(floor)
}

/// Sibling products one qgemv_mma.cu launch serves at most (QM_SEGS).
pub const QM_SEGS: usize = 3;

/// The weights of each segment of a qgemv_mma.cu launch (QmMaps); unused maps are zeros.
#[repr(C)]
struct QmMaps([TmaMap; QM_SEGS]);
// SAFETY: plain-old-data with the layout of qgemv_mma.cu's `QmMaps` (64-byte aligned maps).
unsafe impl cudarc::driver::DeviceRepr for QmMaps {}

/// The segments of a qgemv_mma.cu launch: output and rows of each, its first tile of 16 rows
/// (the last entry the launch's tile count), and how many there are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
struct QmSegs {
    out: [u64; QM_SEGS],
    n: [i32; QM_SEGS],
    first: [i32; QM_SEGS + 1],
    count: i32,
    norm: QNorm,
    early: i32,
    gated: i32,
    stages: i32,
    pad: i32,
    rope: QRope,
}
// SAFETY: plain-old-data with the layout of qgemv_mma.cu's `QmSegs`.
unsafe impl cudarc::driver::DeviceRepr for QmSegs {}

impl QmSegs {
    /// The segments of `parts` (weights, output, rows; at most QM_SEGS, rows < 2^31 in all).
    fn new(parts: &[(u64, u64, usize)]) -> QmSegs {
        let mut s = QmSegs {
            out: [0; QM_SEGS],
            n: [0; QM_SEGS],
            first: [0; QM_SEGS + 1],
            count: 0,
            norm: QNorm::default(),
            early: 0,
            gated: 0,
            stages: 2,
            pad: 0,
            rope: QRope::default(),
        };
        let mut first = 0usize;
        for (i, &(_, out, n)) in parts.iter().take(QM_SEGS).enumerate() {
            (s.out[i], s.n[i], s.first[i]) = (out, n as i32, first as i32);
            first += n.div_ceil(16);
        }
        s.count = parts.len().min(QM_SEGS) as i32;
        for f in &mut s.first[s.count as usize..] {
            *f = first as i32;
        }
        s
    }

    /// Tiles of 16 weight rows over all segments.
    fn tiles(&self) -> usize {
        self.first[self.count as usize] as usize
    }
}

/// qmatmul of `lhs` by each part's weights (`n` rows of `row_bytes`, 16-byte aligned) into its
/// output, one launch of qgemv_mma.cu; `res` is added to a single part's result; `fold`'s norm
/// (gamma 0: none) normalises the lhs first, and a gated pair (gate, up) stores silu(gate) * up
/// into the gate part's output, a tile being 8 rows of each. lhs, outputs, res and the norm
/// weight are of `dtype` (f32, bf16, f16).
#[allow(clippy::too_many_arguments)]
pub(super) fn qgemv_mma(
    stream: &Arc<CudaStream>,
    enc: Encoding,
    dtype: DType,
    lhs: u64,
    parts: &[(u64, u64, usize)],
    res: u64,
    fold: QFold,
    (m, k, row_bytes): (usize, usize, usize),
    tuning: &max_tuning::Tuning,
) -> Result<()> {
    let bad_pair = fold.gated && (parts.len() != 2 || parts[0].2 != parts[1].2 || res != 0);
    if parts.is_empty() || parts.len() > QM_SEGS || (res != 0 && parts.len() > 1) || bad_pair {
        return Err(Error::Unsupported(format!("qgemv_mma: {} sibling products", parts.len())));
    }
    if !rows_fit(enc, k, row_bytes) {
        return Err(Error::Unsupported(format!(
            "qgemv_mma: {} weight rows of {row_bytes} bytes for K = {k} (whole blocks, a multiple of 16 bytes)",
            suffix(enc)
        )));
    }
    let name = format!("qgemv_mma_{}_m{}{}", suffix(enc), mma_rows(m), act_suffix(dtype)?);
    let f = function(stream.context(), &QGEMV_MMA, &name)?;
    let (stages, smem, resident) = mma_stages(stream, &f, &name, (enc, m, k), tuning)?;
    crate::allow_smem(stream.context(), &f, smem)?;
    let mut segs = QmSegs::new(if fold.gated { &parts[..1] } else { parts });
    segs.norm = fold.norm;
    segs.rope = fold.rope;
    segs.stages = stages as i32;
    if fold.gated {
        // tiles of 8 rows of each weight (the count in units of 16 rows for the grid below)
        segs.gated = 1;
        for f in &mut segs.first[1..] {
            *f = parts[0].2.div_ceil(8) as i32;
        }
    }
    let (split, blocks) = mma_grid(segs.tiles() * 16, k, resident, tuning);
    let clusters = !(enc == Encoding::Q4K && m == 2);
    let (cluster, mut blocks) = mma_cluster((blocks, resident), k * mma_rows(m), clusters, tuning);
    if cluster == 2 {
        blocks = blocks.min(resident_in_pairs(stream, &f, &name, smem, resident).max(2));
    }
    let mut maps = QmMaps([TmaMap([0; 16]), TmaMap([0; 16]), TmaMap([0; 16])]);
    let box_rows = if fold.gated { 8 } else { 16 };
    for (map, &(w, _, n)) in maps.0.iter_mut().zip(parts) {
        *map = weight_map(w, row_bytes, n, slot_bytes(enc) as u32, box_rows)?;
    }
    let (mut lhs, mut res) = (lhs, res);
    let (mut ms, mut ks, mut sp) = (m as i32, k as i32, split as i32);
    let mut params: [*mut std::ffi::c_void; 7] = [
        &mut maps as *mut QmMaps as *mut _,
        &mut segs as *mut QmSegs as *mut _,
        &mut lhs as *mut u64 as *mut _,
        &mut ms as *mut i32 as *mut _,
        &mut ks as *mut i32 as *mut _,
        &mut sp as *mut i32 as *mut _,
        &mut res as *mut u64 as *mut _,
    ];
    // Programmatic stream serialization: the grid may launch while the previous kernel drains
    // (the kernel waits with griddepcontrol.wait before touching anything it may have written).
    let pdl = super::super::pdl::Pdl::with(tuning, &QGEMV_MMA, &name, Some(max_tuning::Knob::QgemvPdl));
    // The first weight stages before the wait, where the weights are constants (no kernel of
    // the program writes them): only worth it, and only meaningful, when the grid may start
    // early.
    segs.early = (pdl.on() && fold.consts && tuning.flag_or(max_tuning::Knob::QgemvEarlyWeights, true)) as i32;
    // SAFETY: the parameters match the kernel's (QmMaps, QmSegs, lhs, m, k, split, res) by value
    // and live across the call (the driver copies them); each map describes its part's n rows
    // of row_bytes (k elements, 16-byte aligned rows) and its out holds m x n of dtype; lhs holds
    // m x k of dtype (res m x n); the rows and k fit in i32 (select_path; k is bounded by the fragment budget).
    unsafe {
        let dims = (blocks as u32, 256, smem);
        super::super::launch_ex_cluster(
            stream,
            &f,
            dims,
            &mut params,
            pdl,
            cluster as u32,
            "cuLaunchKernelEx(qgemv_mma)",
        )
    }?;
    super::super::record::record("qgemv", || {
        let fields = vec![
            ("mma", 1),
            ("split", split as i64),
            ("blocks", blocks as i64),
            ("cluster", cluster as i64),
            ("pdl", pdl.on() as i64),
            ("segments", parts.len() as i64),
            ("early", segs.early as i64),
            ("norm", (fold.norm.gamma != 0) as i64),
            ("gated", segs.gated as i64),
            ("rope", segs.rope.on() as i64),
            ("stages", stages as i64),
        ];
        (name.clone(), fields)
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use max_tuning::Tuning;

    use super::*;

    #[test]
    fn weight_rows_hold_whole_blocks_on_16_bytes() {
        assert!(rows_fit(Encoding::Q4_0, 4096, 4096 / 32 * 18));
        assert!(!rows_fit(Encoding::Q4_0, 1152, 1152 / 32 * 18)); // 648 bytes
        assert!(rows_fit(Encoding::Q4_1, 1152, 1152 / 32 * 20));
        assert!(!rows_fit(Encoding::Q4_1, 1152, 1152 / 32 * 20 + 16)); // padded rows
        assert!(rows_fit(Encoding::Q4K, 4096, 16 * 144));
        assert!(!rows_fit(Encoding::Q4K, 4000, 4000 / 32 * 18));
        assert!(!rows_fit(Encoding::Q4_0, 0, 0));
    }

    #[test]
    fn mma_segments_tile_the_launch_in_order() {
        let s = QmSegs::new(&[(1, 10, 4096), (2, 20, 1024), (3, 30, 1000)]);
        assert_eq!(s.first, [0, 256, 320, 383]);
        assert_eq!((s.count, s.tiles(), s.n, s.out), (3, 383, [4096, 1024, 1000], [10, 20, 30]));
        let one = QmSegs::new(&[(1, 10, 45)]);
        assert_eq!((one.first, one.count, one.tiles()), ([0, 3, 3, 3], 1, 3));
    }

    #[test]
    fn segments_match_the_kernel_layout() {
        // qgemv_mma.cu's QmSegs: out[3], n[3], first[4], count, QNorm (8-aligned), early, gated
        assert_eq!(std::mem::offset_of!(QmSegs, norm), 56);
        assert_eq!(std::mem::offset_of!(QmSegs, early), 80);
        assert_eq!(std::mem::offset_of!(QmSegs, stages), 88);
        assert_eq!(std::mem::offset_of!(QmSegs, rope), 96);
        assert_eq!(std::mem::size_of::<QRope>(), 96);
        assert_eq!(std::mem::size_of::<QmSegs>(), 192);
    }

    #[test]
    fn more_stages_where_they_cost_no_block_and_three_at_one_row() {
        // An H200-like SM: 228 KiB, 1 KiB reserved a block, 227 KiB at most a block.
        let sm = |enc, m, k| {
            move |st: usize| {
                let b = mma_gemv_smem(enc, m, k, st).1 + 1024;
                (b <= 228 * 1024).then(|| (228 * 1024 / b).min(4) * 132)
            }
        };
        // K = 4096, one row: four blocks at two stages, three at three, which one row takes;
        // two rows keep two.
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 1, 4096), None, true), 3);
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 2, 4096), None, false), 2);
        // the down projection of an 8B model (K = 14336): two blocks either way
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 1, 14336), None, true), 3);
        // eight rows of K = 4096: one block, room for four stages
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 8, 4096), None, false), 4);
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 8, 4096), Some(2), false), 2);
        assert_eq!(pick_stages(sm(Encoding::Q4_0, 1, 4096), Some(2), true), 2);
        // a forced count the block cannot hold is not taken
        let tight = |st: usize| (st <= 2).then_some(132);
        assert_eq!(pick_stages(tight, Some(4), false), 2);
        assert_eq!(pick_stages(tight, None, true), 2);
    }

    #[test]
    fn clusters_of_two_where_the_lhs_preparation_is_long() {
        let cl = |blocks, resident, prep, spec: &str| {
            mma_cluster((blocks, resident), prep, true, &Tuning::parse(spec).unwrap())
        };
        // one row of K = 4096: none; K = 14336, or 8 rows of 4096: two
        assert_eq!(cl(528, 528, 4096, ""), (1, 528));
        assert_eq!(cl(263, 264, 14336, ""), (2, 264));
        assert_eq!(cl(125, 132, 8 * 4096, ""), (2, 126));
        // rounded up within the resident blocks, down past them
        assert_eq!(cl(263, 263, 14336, ""), (2, 262));
        assert_eq!(cl(263, 263, 4096, "qgemv.cluster=2"), (2, 262));
        assert_eq!(cl(100, 528, 14336, "qgemv.cluster=1"), (1, 100));
        // a grid capped by qgemv.grid stays within it
        assert_eq!(cl(3, 528, 14336, "qgemv.grid=3"), (2, 2));
        // a grid of one block, or a kernel without clusters: none
        assert_eq!(cl(1, 528, 14336, "qgemv.cluster=2"), (1, 1));
        let forced = Tuning::parse("qgemv.cluster=2").unwrap();
        assert_eq!(mma_cluster((263, 264), 14336, false, &forced), (1, 263));
    }

    #[test]
    fn qgemv_knobs_change_the_grid() {
        let grid = |spec: &str| mma_grid(4096, 4096, 264, &Tuning::parse(spec).unwrap());
        let (split, blocks) = grid("");
        assert_eq!((split, blocks), (auto_split(256, 16, 264 * QM_WARPS), 256usize.div_ceil(QM_WARPS / split)));
        assert_eq!(grid("qgemv.split=1").0, 1);
        assert_ne!(grid("qgemv.split=1"), grid(""));
        assert_eq!(grid("qgemv.grid=3").1, 3);
        // A forced split halves until each part has a chunk of K.
        assert_eq!(mma_grid(4096, 512, 264, &Tuning::parse("qgemv.split=8").unwrap()).0, 2);
    }
}
