//! gemm_skinny on a GPU against a host f64 reference: every M x K x N of the decode grid for
//! bf16/f16/f32 on the planner's path and the other one, each epilogue part, forced split
//! counts, batches (shared B folded into rows, shared A, both batched), unaligned operands,
//! guard bytes around C, determinism and a caller-provided workspace. Skips without a GPU (or
//! without libnvrtc); MAX_REQUIRE_GPU=1 turns a skip into a failure.

mod common;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use max_graph::DType;
use max_kernels_cuda::launch::epilogue::{Act, Epilogue};
use max_kernels_cuda::launch::gemm_skinny::{self, Force, Path};

use common::{Rng, act, context, f16_value};

fn stream() -> Option<Arc<CudaStream>> {
    let ctx = context()?;
    Some(ctx.new_stream().unwrap_or_else(|e| panic!("cuStreamCreate: {e}")))
}

// ---- host values in each dtype ---------------------------------------------------------------

/// `x` truncated to the dtype: the bytes to upload and the exact value they hold.
fn encode(dtype: DType, x: f32, out: &mut Vec<u8>) -> f64 {
    match dtype {
        DType::Float32 => {
            out.extend_from_slice(&x.to_le_bytes());
            x as f64
        }
        DType::BFloat16 => {
            let h = (x.to_bits() >> 16) as u16;
            out.extend_from_slice(&h.to_le_bytes());
            f32::from_bits((h as u32) << 16) as f64
        }
        _ => {
            let b = x.to_bits();
            let sign = ((b >> 31) << 15) as u16;
            let e = ((b >> 23) & 0xFF) as i32 - 127;
            let h = if e < -14 { sign } else { sign | (((e + 15) as u16) << 10) | ((b >> 13) & 0x3FF) as u16 };
            out.extend_from_slice(&h.to_le_bytes());
            f16_value(h)
        }
    }
}

fn decode(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    match dtype {
        DType::Float32 => {
            f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]) as f64
        }
        DType::BFloat16 => f32::from_bits((u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]) as u32) << 16) as f64,
        _ => f16_value(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])),
    }
}

/// A device matrix (or batch of them) and its exact host values; `shift` elements of padding
/// in front make the device pointer deliberately unaligned.
struct Mat {
    host: Vec<f64>,
    dev: CudaSlice<u8>,
    offset: u64,
}

impl Mat {
    fn new(s: &Arc<CudaStream>, dtype: DType, len: usize, scale: f32, shift: usize, rng: &mut Rng) -> Mat {
        let w = dtype.size_in_bytes();
        let mut bytes = vec![0u8; shift * w];
        let host = (0..len).map(|_| encode(dtype, rng.unit() * scale, &mut bytes)).collect();
        bytes.resize(bytes.len() + 16, 0);
        let dev = s.clone_htod(&bytes).unwrap_or_else(|e| panic!("upload: {e}"));
        Mat { host, dev, offset: (shift * w) as u64 }
    }
    fn ptr(&self, s: &Arc<CudaStream>) -> u64 {
        self.dev.device_ptr(s).0 + self.offset
    }
}

// ---- the reference ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Epi {
    bias: bool,
    act: Act,
    residual: bool,
}

const NO_EPI: Epi = Epi { bias: false, act: Act::None, residual: false };
const ACTS: [Act; 7] = [Act::None, Act::Relu, Act::Gelu, Act::GeluTanh, Act::Silu, Act::Sigmoid, Act::GeluQuick];

/// A rotating choice of epilogue so the grid covers each part.
fn epi_variant(i: usize) -> Epi {
    let act = ACTS[i % ACTS.len()];
    Epi { bias: i % 3 == 1, act, residual: i % 4 == 2 }
}

struct Case {
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    shared_a: bool,
    shared_b: bool,
    epi: Epi,
    force: Force,
    shift: usize,
}

impl Case {
    fn new(dtype: DType, m: usize, n: usize, k: usize) -> Case {
        Case {
            dtype,
            m,
            n,
            k,
            batch: 1,
            shared_a: false,
            shared_b: false,
            epi: NO_EPI,
            force: Force::default(),
            shift: 0,
        }
    }
    fn strides(&self) -> (usize, usize, usize) {
        let (m, n, k) = (self.m, self.n, self.k);
        (if self.shared_a { 0 } else { m * k }, if self.shared_b { 0 } else { k * n }, m * n)
    }
}

const GUARD: usize = 16;

/// Runs the case on prepared A and B (B may be reused across cases) and checks C; returns C's
/// bytes for determinism checks.
fn run(s: &Arc<CudaStream>, c: &Case, a: &Mat, b: &Mat, rng: &mut Rng, ws: Option<(u64, usize)>) -> Vec<u8> {
    let (dtype, m, n, k, batch) = (c.dtype, c.m, c.n, c.k, c.batch);
    let w = dtype.size_in_bytes();
    let out_len = batch * m * n;
    let bias = Mat::new(s, dtype, n, 1.0, c.shift, rng);
    let res = Mat::new(s, dtype, out_len, 1.0, c.shift, rng);
    let epi = Epilogue::new(c.epi.bias.then(|| bias.ptr(s)), c.epi.act, c.epi.residual.then(|| res.ptr(s)));
    // C between guard elements, all bytes 0x7F beforehand
    let cbuf = s.clone_htod(&vec![0x7Fu8; (out_len + 2 * GUARD) * w + c.shift * w]).unwrap_or_else(|e| panic!("{e}"));
    let cptr = cbuf.device_ptr(s).0 + ((GUARD + c.shift) * w) as u64;
    let what = format!(
        "{dtype} m={m} n={n} k={k} batch={batch} shared_a={} shared_b={} {:?} {:?} shift={}",
        c.shared_a, c.shared_b, c.epi, c.force, c.shift
    );
    gemm_skinny::gemm_skinny_forced(
        s,
        dtype,
        (a.ptr(s), b.ptr(s), cptr),
        (m, n, k),
        batch,
        c.strides(),
        &epi,
        ws,
        c.force,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    s.synchronize().unwrap_or_else(|e| panic!("{what}: {e}"));
    let bytes = s.clone_dtoh(&cbuf).unwrap_or_else(|e| panic!("{e}"));
    let body = &bytes[(GUARD + c.shift) * w..(GUARD + c.shift + out_len) * w];
    let (head, tail) = (&bytes[..(GUARD + c.shift) * w], &bytes[(GUARD + c.shift + out_len) * w..]);
    assert!(head.iter().chain(tail).all(|&x| x == 0x7F), "{what}: wrote outside C");

    let (eps_out, eps_acc, tiny) = match dtype {
        DType::Float32 => (4e-7, 1e-5, 1e-30),
        DType::BFloat16 => (2f64.powi(-8), 2e-5, 1e-30),
        _ => (2f64.powi(-10), 2e-5, 1e-7),
    };
    let (sa, sb, _) = c.strides();
    let check = |z: usize, r: usize, col: usize| {
        let (pa, pb) = (z * sa + r * k, z * sb + col);
        let (mut acc, mut mag) = (0.0f64, 0.0f64);
        for kk in 0..k {
            let p = a.host[pa + kk] * b.host[pb + kk * n];
            acc += p;
            mag += p.abs();
        }
        let i = z * m * n + r * n + col;
        let mut x = acc;
        if c.epi.bias {
            x += bias.host[col];
            mag += bias.host[col].abs();
        }
        x = act(c.epi.act, x);
        if c.epi.residual {
            x += res.host[i];
            mag += res.host[i].abs();
        }
        let got = decode(dtype, body, i);
        let tol = eps_out * x.abs() + eps_acc * mag + tiny;
        assert!((got - x).abs() <= tol, "{what}: C[{z}][{r}][{col}] = {got}, expected {x} (tolerance {tol})");
    };
    if out_len <= 8192 {
        for i in 0..out_len {
            check(i / (m * n), i / n % m, i % n);
        }
    } else {
        // tile edges of both kernels in the first and last rows and batches, then random points
        let mut cols: Vec<usize> = [0, 1, 7, 8, 127, 128, 255, 256, 511, 512].into_iter().filter(|&x| x < n).collect();
        cols.extend([n - 1, n.saturating_sub(2), n / 2]);
        for z in [0, batch - 1] {
            for r in [0, m / 2, m - 1] {
                for &col in &cols {
                    check(z, r, col);
                }
            }
        }
        for _ in 0..1500 {
            let i = (rng.next() % out_len as u64) as usize;
            check(i / (m * n), i / n % m, i % n);
        }
    }
    body.to_vec()
}

/// The products of one test: A fresh per case, B per (dtype, k, n).
fn operands(s: &Arc<CudaStream>, c: &Case, rng: &mut Rng) -> (Mat, Mat) {
    let (na, nb) = (if c.shared_a { 1 } else { c.batch }, if c.shared_b { 1 } else { c.batch });
    let a = Mat::new(s, c.dtype, na * c.m * c.k, 1.0, c.shift, rng);
    let b = Mat::new(s, c.dtype, nb * c.k * c.n, 1.0, c.shift, rng);
    (a, b)
}

const DTYPES: [DType; 3] = [DType::BFloat16, DType::Float16, DType::Float32];
const MS: [usize; 8] = [1, 2, 3, 7, 16, 17, 64, 128];
const KS: [usize; 5] = [1, 5, 64, 4096 + 8, 1000];
const NS: [usize; 5] = [1, 7, 256, 4096, 11008];

fn plan_path(c: &Case, force: Force) -> Option<Path> {
    gemm_skinny::plan(c.dtype, (c.m, c.n, c.k), c.batch, c.strides(), (0, 0), 132, force).map(|p| p.path)
}

/// The whole decode grid for one dtype: the planner's path, plus the other path where it can
/// take the product, with a rotating epilogue.
fn grid(dtype: DType) {
    let Some(s) = stream() else { return };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ dtype.size_in_bytes() as u64);
    let mut variant = 0;
    for k in KS {
        for n in NS {
            let b = Mat::new(&s, dtype, k * n, 1.0, 0, &mut rng);
            for m in MS {
                let a = Mat::new(&s, dtype, m * k, 1.0, 0, &mut rng);
                let auto = plan_path(&Case::new(dtype, m, n, k), Force::default());
                for path in [None, Some(Path::Simt), Some(Path::Mma)] {
                    let mut c = Case::new(dtype, m, n, k);
                    c.force.path = path;
                    if path.is_some() && (path == auto || plan_path(&c, c.force).is_none()) {
                        continue;
                    }
                    if auto.is_none() {
                        continue; // f32 with more than 64 rows: not this kernel's job
                    }
                    c.epi = epi_variant(variant);
                    variant += 1;
                    run(&s, &c, &a, &b, &mut rng, None);
                }
            }
        }
    }
}

#[test]
fn grid_bf16() {
    grid(DType::BFloat16);
}

#[test]
fn grid_f16() {
    grid(DType::Float16);
}

#[test]
fn grid_f32() {
    grid(DType::Float32);
}

/// Every epilogue part and activation, on both paths, with one split (the main kernel applies
/// the epilogue) and several (the reduction does).
#[test]
fn every_epilogue_on_both_paths_and_split_counts() {
    let Some(s) = stream() else { return };
    let mut rng = Rng(7);
    for dtype in DTYPES {
        for (m, n, k) in [(3, 264, 1000), (17, 136, 4104)] {
            let mut c = Case::new(dtype, m, n, k);
            let (a, b) = operands(&s, &c, &mut rng);
            for path in [Path::Simt, Path::Mma] {
                for splits in [1, 3] {
                    c.force = Force { path: Some(path), splits: Some(splits), simt_m: None };
                    if plan_path(&c, c.force).is_none() {
                        continue;
                    }
                    for act in ACTS {
                        for (bias, residual) in [(false, false), (true, false), (false, true), (true, true)] {
                            c.epi = Epi { bias, act, residual };
                            run(&s, &c, &a, &b, &mut rng, None);
                        }
                    }
                }
            }
        }
    }
}

/// Forced split counts, including more splits than K has rows for (the planner trims them),
/// give the same values; a split count is deterministic run to run.
#[test]
fn split_counts_and_determinism() {
    let Some(s) = stream() else { return };
    let mut rng = Rng(11);
    for dtype in DTYPES {
        for (m, n, k) in [(1, 4096, 4104), (16, 11008, 1000), (64, 256, 4104), (7, 7, 64)] {
            let mut c = Case::new(dtype, m, n, k);
            c.epi = Epi { bias: true, act: Act::Silu, residual: true };
            let (a, b) = operands(&s, &c, &mut rng);
            for path in [Path::Simt, Path::Mma] {
                for splits in [1, 2, 5, 64, 10_000] {
                    c.force = Force { path: Some(path), splits: Some(splits), simt_m: None };
                    if plan_path(&c, c.force).is_none() {
                        continue;
                    }
                    let mut r1 = Rng(99);
                    let first = run(&s, &c, &a, &b, &mut r1, None);
                    let mut r2 = Rng(99);
                    let again = run(&s, &c, &a, &b, &mut r2, None);
                    assert_eq!(first, again, "{dtype} {m}x{n}x{k} {path:?} splits {splits}: not deterministic");
                }
            }
        }
    }
}

/// Batches: shared B (folded into rows), shared A with batched B, both batched; with bias,
/// activation and a batched residual.
#[test]
fn batches() {
    let Some(s) = stream() else { return };
    let mut rng = Rng(13);
    for dtype in DTYPES {
        for (m, n, k) in [(1, 4096, 1000), (7, 256, 64), (17, 7, 4104), (16, 4096, 4104), (3, 11008, 5)] {
            for (shared_a, shared_b) in [(false, true), (true, false), (false, false)] {
                for path in [None, Some(Path::Simt), Some(Path::Mma)] {
                    let mut c = Case::new(dtype, m, n, k);
                    (c.batch, c.shared_a, c.shared_b) = (3, shared_a, shared_b);
                    c.force.path = path;
                    c.epi = Epi { bias: true, act: Act::GeluTanh, residual: true };
                    if plan_path(&c, c.force).is_none() {
                        continue;
                    }
                    let (a, b) = operands(&s, &c, &mut rng);
                    run(&s, &c, &a, &b, &mut rng, None);
                }
            }
        }
    }
}

/// Operands one element off 16-byte alignment (scalar loads), K = 0, M = 1 with N = 1.
#[test]
fn unaligned_and_degenerate_shapes() {
    let Some(s) = stream() else { return };
    let mut rng = Rng(17);
    for dtype in DTYPES {
        for (m, n, k, shift) in
            [(1, 4096, 1000, 1), (16, 256, 4104, 1), (5, 7, 64, 1), (3, 7, 0, 0), (1, 1, 1, 0), (1, 1, 4104, 0)]
        {
            for batch in [1, 2] {
                let mut c = Case::new(dtype, m, n, k);
                (c.batch, c.shift) = (batch, shift);
                c.epi = Epi { bias: true, act: Act::Relu, residual: true };
                let (a, b) = operands(&s, &c, &mut rng);
                run(&s, &c, &a, &b, &mut rng, None);
            }
        }
    }
}

/// A caller-provided workspace gives the same bytes as the pool's.
#[test]
fn caller_workspace() {
    let Some(s) = stream() else { return };
    let mut rng = Rng(19);
    for dtype in DTYPES {
        let c = Case::new(dtype, 16, 4096, 4104);
        let (a, b) = operands(&s, &c, &mut rng);
        let need = gemm_skinny::workspace_bytes(&s, dtype, (16, 4096, 4104), 1, c.strides(), (a.ptr(&s), b.ptr(&s)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(need > 0, "{dtype}: expected a split-K plan");
        let ws = s.alloc_zeros::<u8>(need).unwrap_or_else(|e| panic!("{e}"));
        let mut r1 = Rng(5);
        let pool = run(&s, &c, &a, &b, &mut r1, None);
        let mut r2 = Rng(5);
        let own = run(&s, &c, &a, &b, &mut r2, Some((ws.device_ptr(&s).0, need)));
        assert_eq!(pool, own, "{dtype}");
    }
}

/// Every kernel the planner can name exists in the compiled family, and none uses local memory
/// (checked on the PTX, no GPU needed).
#[test]
fn planned_kernels_exist() {
    use max_kernels_cuda::{Target, compile, ensure_nvrtc, sources};
    common::add_venv_nvrtc();
    if let Err(e) = ensure_nvrtc() {
        if std::env::var("MAX_REQUIRE_NVRTC").as_deref() == Ok("1") {
            panic!("MAX_REQUIRE_NVRTC=1 but {e}");
        }
        eprintln!("skipping: {e}");
        return;
    }
    let ptx = compile(&sources::GEMM_SKINNY, "sm_90a", Target::Ptx).unwrap_or_else(|e| panic!("{e}"));
    let ptx = String::from_utf8_lossy(&ptx);
    let mut names = std::collections::BTreeSet::new();
    for dtype in DTYPES {
        for m in 1..=128 {
            for (n, b) in [(4096, 0), (4095, 0), (4096, 2)] {
                for path in [Some(Path::Simt), Some(Path::Mma), None] {
                    let force = Force { path, splits: None, simt_m: None };
                    if let Some(p) = gemm_skinny::plan(dtype, (m, n, 4096), 1, (0, 0, 0), (0, b), 132, force) {
                        names.insert(p.kernel);
                    }
                }
            }
        }
        names.insert(format!(
            "skinny_reduce_{}",
            if dtype == DType::BFloat16 {
                "bf16"
            } else if dtype == DType::Float16 {
                "f16"
            } else {
                "f32"
            }
        ));
    }
    assert_eq!(names.len(), 3 * 10 + 2 * 4 + 3, "{names:?}");
    for n in &names {
        assert!(ptx.contains(&format!(".entry {n}(")), "missing kernel {n}");
    }
    assert!(!ptx.contains(".local"), "a kernel uses local memory");
}
