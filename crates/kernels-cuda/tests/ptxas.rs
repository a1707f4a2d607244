//! `ptxas -v` for sm_90a over every kernel we ship: each family of `sources::ALL` and generated
//! fused elementwise kernels for a sample of groups (compiled to PTX by NVRTC through the same
//! code as the engine: `compile` for families, `fused::compile_check`, i.e. `fused::source`,
//! for groups). Fails on any spill store or load, any local memory, any stack frame outside
//! `STACK_ALLOWED`, and on every line of ptxas output that is not one of its plain `-v`
//! reports: that catches every warning and every advisory, the wgmma serialization notices
//! ("Potential Performance Loss: wgmma.mma_async instructions are serialized ...", printed as
//! `ptxas info : (C75xx)`) in particular.
//!
//! ptxas comes from `MAX_PTXAS` (scripts/test points it at the nvidia-cuda-nvcc wheel), else
//! from `PATH`. Without ptxas or libnvrtc the tests pass with a note, unless
//! MAX_REQUIRE_NVRTC=1 (scripts/test sets it), so the check cannot silently skip in CI.
//! `cargo test -p max-kernels-cuda --test ptxas -- --nocapture` prints the per-kernel table.
//!
//! Each family's NVRTC compile and ptxas run happen on every core, and a family that passed is
//! remembered under target/tmp/ptxas-cache by a hash of its source, the compiler options, this
//! file and both tools' versions (see `Cache`), so an unchanged family is not checked again. The
//! PTX itself comes through tests/common's `ptx`, shared with the other test binaries that read
//! the same families (compiled once per source and compiler).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use max_graph::DType;
use max_graph::ops::OpKind;
use max_kernels_cuda::fused::{Arg, FusedSpec, Node, compile_check};
use max_kernels_cuda::{Target, compile, sources};

mod common;

const ARCH: &str = "sm_90a";

/// (module, function, most bytes) allowed a nonzero stack frame, with the reason; every other
/// function must have none (none of the families has one, checked with CUDA 13.0.88).
const STACK_ALLOWED: &[(&str, &str, u64)] = &[
    // sinf/cosf (and sin/cos) reduce huge arguments (|x| > 105615) with the Payne-Hanek slow
    // path of CUDA's math library, which keeps its 7-word (f64: 5-word) product in a local
    // array: 32 (40) bytes of stack, touched only on that rare path. Fused groups with sin or
    // cos have it in each of their four entry points.
    ("fused:f32_sincos_r2", "fused", 32),
    ("fused:f32_sincos_r2", "fused_contig", 32),
    ("fused:f32_sincos_r2", "fused_vec", 32),
    ("fused:f32_sincos_r2", "fused_vec2", 32),
    ("fused:f64_sincos_r3", "fused", 40),
    ("fused:f64_sincos_r3", "fused_contig", 40),
    ("fused:f64_sincos_r3", "fused_vec", 40),
    ("fused:f64_sincos_r3", "fused_vec2", 40),
];

fn required() -> bool {
    std::env::var("MAX_REQUIRE_NVRTC").as_deref() == Ok("1")
}

/// ptxas and libnvrtc, or `None` (with a note) when either is missing and not required.
fn tools() -> Option<PathBuf> {
    if let Err(e) = max_kernels_cuda::ensure_nvrtc() {
        assert!(!required(), "MAX_REQUIRE_NVRTC=1 but {e}");
        eprintln!("skipping the ptxas check: {e}");
        return None;
    }
    let ptxas = std::env::var_os("MAX_PTXAS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("ptxas"));
    match Command::new(&ptxas).arg("--version").output() {
        Ok(o) if o.status.success() => Some(ptxas),
        other => {
            let why = match other {
                Ok(o) => format!("exited with {}", o.status),
                Err(e) => e.to_string(),
            };
            let msg = format!("ptxas ({}) is not usable: {why}; set MAX_PTXAS", ptxas.display());
            assert!(!required(), "MAX_REQUIRE_NVRTC=1 but {msg}");
            eprintln!("skipping the ptxas check: {msg}");
            None
        }
    }
}

/// One function's report: an entry point, or a device function ptxas kept out of line.
#[derive(Default)]
struct Props {
    name: String,
    entry: bool,
    registers: u64,
    barriers: u64,
    smem: u64,
    lmem: u64,
    stack: u64,
    /// Its own stack frame plus those of the functions it calls.
    cumulative_stack: u64,
    spill_stores: u64,
    spill_loads: u64,
}

fn num(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// Parses `ptxas -v` output into per-function reports and problems (lines it does not know).
fn parse(out: &str) -> (Vec<Props>, Vec<String>) {
    let (mut funcs, mut problems) = (Vec::<Props>::new(), Vec::new());
    let quoted = |s: &str| s.trim().trim_matches('\'').to_string();
    let find = |funcs: &mut Vec<Props>, name: &str, entry: bool| -> usize {
        match funcs.iter().position(|f| f.name == name) {
            Some(i) => {
                funcs[i].entry |= entry;
                i
            }
            None => {
                funcs.push(Props { name: name.to_string(), entry, ..Props::default() });
                funcs.len() - 1
            }
        }
    };
    // A device function kept out of line is reported under each entry that calls it: the
    // largest report counts.
    let (mut entry, mut props): (Option<usize>, Option<usize>) = (None, None);
    for line in out.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let info = t.strip_prefix("ptxas info").map(|r| r.trim_start().trim_start_matches(':').trim());
        let known = if let Some(rest) = info.and_then(|r| r.strip_prefix("Compiling entry function ")) {
            let name = quoted(rest.rsplit_once(" for ").map_or(rest, |(n, _)| n));
            entry = Some(find(&mut funcs, &name, true));
            true
        } else if let Some(rest) = info.and_then(|r| r.strip_prefix("Function properties for ")) {
            props = Some(find(&mut funcs, &quoted(rest), false));
            true
        } else if t.contains("bytes stack frame") && props.is_some() {
            let p = &mut funcs[props.unwrap_or_default()];
            let mut ok = true;
            for part in t.split(',') {
                let (n, what) = part.trim().split_once(' ').unwrap_or(("", ""));
                match (num(n), what) {
                    (Some(n), "bytes stack frame") => p.stack = p.stack.max(n),
                    (Some(n), "bytes spill stores") => p.spill_stores = p.spill_stores.max(n),
                    (Some(n), "bytes spill loads") => p.spill_loads = p.spill_loads.max(n),
                    _ => ok = false,
                }
            }
            ok
        } else if let Some(rest) = info.and_then(|r| r.strip_prefix("Used ")) {
            match entry {
                Some(e) => {
                    let p = &mut funcs[e];
                    let mut ok = true;
                    for part in format!("used {rest}").split(',') {
                        let words: Vec<&str> = part.split_whitespace().collect();
                        match words.as_slice() {
                            ["used", n, "registers"] => p.registers = num(n).unwrap_or(u64::MAX),
                            ["used", n, "barriers"] => p.barriers = num(n).unwrap_or(u64::MAX),
                            [n, "bytes", "smem"] => p.smem = num(n).unwrap_or(u64::MAX),
                            [n, "bytes", "lmem"] => p.lmem = num(n).unwrap_or(u64::MAX),
                            [n, "bytes", "cumulative", "stack", "size"] => {
                                p.cumulative_stack = num(n).unwrap_or(u64::MAX)
                            }
                            [_, "bytes", w] if w.starts_with("cmem[") => {}
                            _ => ok = false,
                        }
                    }
                    ok
                }
                None => false,
            }
        } else {
            info.is_some_and(|r| {
                r.starts_with("Compile time = ") || r.strip_suffix(" bytes gmem").is_some_and(|n| num(n).is_some())
            })
        };
        if !known {
            let what = if t.contains("wgmma") && t.contains("serialized") {
                "wgmma serialization"
            } else if t.to_ascii_lowercase().contains("warning") {
                "warning"
            } else {
                "unexpected ptxas output"
            };
            problems.push(format!("{what}: {t}"));
        }
    }
    (funcs, problems)
}

/// Runs ptxas on one module's PTX; returns its functions, or an error with ptxas' output.
fn ptxas_v(ptxas: &Path, module: &str, ptx: &[u8]) -> Result<(Vec<Props>, Vec<String>), String> {
    // One folder per module and process (tests run in parallel threads), removed afterwards.
    let dir = std::env::temp_dir().join(format!("max-ptxas-{}-{}", std::process::id(), module.replace(':', "-")));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (src, cubin) = (dir.join("kernel.ptx"), dir.join("kernel.cubin"));
    let out = std::fs::write(&src, ptx).map_err(|e| e.to_string()).and_then(|()| {
        Command::new(ptxas)
            .args(["-arch", ARCH, "-v"])
            .arg(&src)
            .arg("-o")
            .arg(&cubin)
            .output()
            .map_err(|e| format!("running {}: {e}", ptxas.display()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("ptxas failed on {module} ({}):\n{text}", out.status));
    }
    let (funcs, mut problems) = parse(&text);
    if !funcs.iter().any(|f| f.entry) {
        problems.push(format!("no entry function reported:\n{text}"));
    }
    Ok((funcs, problems))
}

const HEADER: &str =
    "module               function                                regs  bar   smem  stack spill st spill ld";

/// One module's table rows and problems (ptxas run on its PTX, every function's report checked).
fn check_module(ptxas: &Path, module: &str, ptx: &[u8]) -> (String, Vec<String>) {
    let mut rows = String::new();
    let (funcs, notes) = match ptxas_v(ptxas, module, ptx) {
        Ok(r) => r,
        Err(e) => return (rows, vec![e]),
    };
    let mut problems: Vec<String> = notes.into_iter().map(|n| format!("{module}: {n}")).collect();
    for f in &funcs {
        let name = if f.entry { f.name.clone() } else { format!("({})", f.name) };
        let _ = writeln!(
            rows,
            "{module:<20} {name:<38} {:>5} {:>4} {:>6} {:>6} {:>8} {:>8}",
            f.registers,
            f.barriers,
            f.smem,
            f.stack.max(f.cumulative_stack),
            f.spill_stores,
            f.spill_loads
        );
        let at = format!("{module}: {}", f.name);
        if f.spill_stores != 0 || f.spill_loads != 0 {
            problems.push(format!("{at}: {} bytes spill stores, {} bytes spill loads", f.spill_stores, f.spill_loads));
        }
        if f.lmem != 0 {
            problems.push(format!("{at}: {} bytes lmem", f.lmem));
        }
        let stack = f.stack.max(f.cumulative_stack);
        let allowed = STACK_ALLOWED.iter().find(|(m, n, _)| *m == module && *n == f.name).map_or(0, |(_, _, b)| *b);
        if stack > allowed {
            problems.push(format!(
                "{at}: {} bytes stack frame, {} cumulative (STACK_ALLOWED: {allowed})",
                f.stack, f.cumulative_stack
            ));
        }
    }
    (rows, problems)
}

/// Prints the table and fails listing every problem found.
fn report(results: Vec<(String, Vec<String>)>) {
    let table: String = std::iter::once(format!("{HEADER}\n")).chain(results.iter().map(|r| r.0.clone())).collect();
    let problems: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
    println!("ptxas -arch={ARCH} -v\n{table}");
    assert!(problems.is_empty(), "ptxas check failed:\n  {}\n{table}", problems.join("\n  "));
}

/// Checks modules on every core (ptxas is a process per module).
fn check(ptxas: &Path, modules: Vec<(String, Vec<u8>)>) {
    report(parallel(modules.len(), |i| check_module(ptxas, &modules[i].0, &modules[i].1)));
}

/// `work(0..n)` on every core (CI has two), results in index order.
fn parallel<T: Send>(n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let workers = std::thread::available_parallelism().map_or(2, |c| c.get()).min(n.max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, T)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= n {
                            return mine;
                        }
                        mine.push((i, work(i)));
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    done.sort_by_key(|d| d.0);
    done.into_iter().map(|d| d.1).collect()
}

/// Where a family that passed is remembered: `target/tmp/ptxas-cache/<family>-<key>`, the key a
/// SHA-256 of everything its result depends on (its full source, the NVRTC options in
/// compile.rs, this check's own source, NVRTC's version and ptxas' `--version`), so a change to
/// any of them checks it again. The file holds its table rows. Deleting the directory checks
/// every family again; a fresh clone (CI) has none, so every family is checked there.
struct Cache {
    dir: PathBuf,
    tools: String,
}

impl Cache {
    fn new(ptxas: &Path) -> Cache {
        let version = Command::new(ptxas).arg("--version").output().map(|o| o.stdout).unwrap_or_default();
        let tools = format!(
            "nvrtc {:?}\nptxas {}\narch {ARCH}\n",
            max_kernels_cuda::nvrtc_version().ok(),
            String::from_utf8_lossy(&version)
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ptxas-cache");
        Cache { dir, tools }
    }

    fn path(&self, family: &sources::Family) -> PathBuf {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in
            [self.tools.as_str(), include_str!("ptxas.rs"), include_str!("../src/compile.rs"), &family.full_source()]
        {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let key: String = h.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{}-{key}", family.name))
    }

    fn get(&self, family: &sources::Family) -> Option<String> {
        std::fs::read_to_string(self.path(family)).ok()
    }

    /// Remembers a clean family (a write that fails only costs a recheck next time).
    fn put(&self, family: &sources::Family, rows: &str) {
        let path = self.path(family);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let _ = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(&tmp, rows))
            .and_then(|()| std::fs::rename(&tmp, &path));
    }
}

#[test]
fn every_family_is_clean_under_ptxas() {
    let Some(ptxas) = tools() else { return };
    // MAX_PTXAS_ONLY=conv_sm90,gemm (family name prefixes) checks only those, while a kernel is
    // being worked on; CI leaves it unset.
    let only = std::env::var("MAX_PTXAS_ONLY").unwrap_or_default();
    let prefixes: Vec<&str> = only.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    let families: Vec<_> =
        sources::ALL.iter().filter(|f| prefixes.is_empty() || prefixes.iter().any(|p| f.name.starts_with(p))).collect();
    // NVRTC is thread-safe for distinct programs: each core compiles a family and runs ptxas
    // on it; families unchanged since they last passed come from the cache.
    let cache = Cache::new(&ptxas);
    let (hits, results): (Vec<bool>, Vec<(String, Vec<String>)>) = parallel(families.len(), |i| {
        let f = families[i];
        if let Some(rows) = cache.get(f) {
            return (true, (rows, Vec::new()));
        }
        let ptx = match common::ptx(f, ARCH) {
            Ok(ptx) => ptx,
            Err(e) => return (false, (String::new(), vec![e.to_string()])),
        };
        if !String::from_utf8_lossy(&ptx).contains(&format!(".target {ARCH}")) {
            return (false, (String::new(), vec![format!("{} PTX is not for {ARCH}", f.name)]));
        }
        let (rows, problems) = check_module(&ptxas, f.name, &ptx);
        if problems.is_empty() {
            cache.put(f, &rows);
        }
        (false, (rows, problems))
    })
    .into_iter()
    .unzip();
    let cached = hits.iter().filter(|h| **h).count();
    println!("{} families, {cached} unchanged since they last passed (target/tmp/ptxas-cache)", families.len());
    report(results);
}

fn node(op: OpKind, args: Vec<Arg>, dtype: DType) -> Node {
    Node { op, args, dtype, approximate: None }
}

/// A sample of fused groups: each dtype class, op kinds of every sort, ranks 1 to 6 (the
/// general entry point's index math is generated per rank; broadcasting and scalars are
/// strides and a mask at launch, the same code), and the widest group the launcher takes.
fn fused_samples() -> Vec<(&'static str, FusedSpec)> {
    use Arg::{Input as I, Node as N};
    use DType::*;
    let gelu = |a: Arg, d: DType, mode: &str| Node {
        op: OpKind::Gelu,
        args: vec![a],
        dtype: d,
        approximate: Some(mode.into()),
    };
    vec![
        // f32 x + y with y broadcast along rows (an [M, N] + [N] bias add).
        (
            "f32_add_r2",
            FusedSpec {
                inputs: vec![Float32, Float32],
                nodes: vec![node(OpKind::Add, vec![I(0), I(1)], Float32)],
                rank: 2,
            },
        ),
        // bf16 gelu_tanh(x * w + s) then tanh, s a scalar input.
        (
            "bf16_chain_r3",
            FusedSpec {
                inputs: vec![BFloat16, BFloat16, BFloat16],
                nodes: vec![
                    node(OpKind::Mul, vec![I(0), I(1)], BFloat16),
                    node(OpKind::Add, vec![N(0), I(2)], BFloat16),
                    gelu(N(1), BFloat16, "tanh"),
                    node(OpKind::Tanh, vec![N(2)], BFloat16),
                ],
                rank: 3,
            },
        ),
        // f16 where(x > y, x, y == x ? y : -x) (compare, select, negate).
        (
            "f16_where_r4",
            FusedSpec {
                inputs: vec![Float16, Float16],
                nodes: vec![
                    node(OpKind::Greater, vec![I(0), I(1)], Bool),
                    node(OpKind::Equal, vec![I(1), I(0)], Bool),
                    node(OpKind::Negate, vec![I(0)], Float16),
                    node(OpKind::Where, vec![N(1), I(1), N(2)], Float16),
                    node(OpKind::Where, vec![N(0), I(0), N(3)], Float16),
                ],
                rank: 4,
            },
        ),
        // Mixed casts: f16, i32, bf16 in; f32 arithmetic; f8e4m3 out.
        (
            "cast_mix_r5",
            FusedSpec {
                inputs: vec![Float16, Int32, BFloat16],
                nodes: vec![
                    node(OpKind::Cast, vec![I(0)], Float32),
                    node(OpKind::Cast, vec![I(1)], Float32),
                    node(OpKind::Add, vec![N(0), N(1)], Float32),
                    node(OpKind::Cast, vec![N(2)], BFloat16),
                    node(OpKind::Mul, vec![N(3), I(2)], BFloat16),
                    node(OpKind::Cast, vec![N(4)], Float8E4m3fn),
                ],
                rank: 5,
            },
        ),
        // Integers: i64 and i32 with wrapping arithmetic, floor division, modulo, max, pow.
        (
            "int_r6",
            FusedSpec {
                inputs: vec![Int64, Int32],
                nodes: vec![
                    node(OpKind::Cast, vec![I(1)], Int64),
                    node(OpKind::Mul, vec![I(0), N(0)], Int64),
                    node(OpKind::FloorDiv, vec![N(1), N(0)], Int64),
                    node(OpKind::Mod, vec![N(2), I(0)], Int64),
                    node(OpKind::Maximum, vec![N(3), N(0)], Int64),
                    node(OpKind::Pow, vec![N(4), N(0)], Int64),
                ],
                rank: 6,
            },
        ),
        // f64 transcendental chain, rank 1.
        (
            "f64_math_r1",
            FusedSpec {
                inputs: vec![Float64, Float64],
                nodes: vec![
                    node(OpKind::Div, vec![I(0), I(1)], Float64),
                    node(OpKind::Exp, vec![N(0)], Float64),
                    node(OpKind::Log1p, vec![N(1)], Float64),
                    node(OpKind::Sqrt, vec![N(2)], Float64),
                ],
                rank: 1,
            },
        ),
        // f32 activations: silu, exact gelu (erf), sigmoid, rsqrt, quick gelu.
        (
            "f32_act_r2",
            FusedSpec {
                inputs: vec![Float32],
                nodes: vec![
                    node(OpKind::Silu, vec![I(0)], Float32),
                    gelu(N(0), Float32, "none"),
                    node(OpKind::Sigmoid, vec![N(1)], Float32),
                    node(OpKind::Rsqrt, vec![N(2)], Float32),
                    gelu(N(3), Float32, "quick"),
                ],
                rank: 2,
            },
        ),
        // Rotary-style sin/cos (a stack frame: see STACK_ALLOWED).
        (
            "f32_sincos_r2",
            FusedSpec {
                inputs: vec![Float32, Float32],
                nodes: vec![
                    node(OpKind::Sin, vec![I(0)], Float32),
                    node(OpKind::Cos, vec![I(0)], Float32),
                    node(OpKind::Mul, vec![N(0), I(1)], Float32),
                    node(OpKind::Mul, vec![N(1), I(1)], Float32),
                    node(OpKind::Add, vec![N(2), N(3)], Float32),
                ],
                rank: 2,
            },
        ),
        (
            "f64_sincos_r3",
            FusedSpec {
                inputs: vec![Float64],
                nodes: vec![node(OpKind::Sin, vec![I(0)], Float64), node(OpKind::Cos, vec![N(0)], Float64)],
                rank: 3,
            },
        ),
        // The widest group: MAX_INPUTS f32 inputs summed, at MAX_RANK (most index math).
        ("wide_16in_r8", {
            let n = max_kernels_cuda::fused::MAX_INPUTS;
            let mut nodes = vec![node(OpKind::Add, vec![I(0), I(1)], Float32)];
            for i in 2..n {
                nodes.push(node(OpKind::Add, vec![N(i - 2), I(i)], Float32));
            }
            FusedSpec { inputs: vec![Float32; n], nodes, rank: max_kernels_cuda::fused::MAX_RANK }
        }),
    ]
}

#[test]
fn fused_kernels_are_clean_under_ptxas() {
    let Some(ptxas) = tools() else { return };
    let modules = fused_samples()
        .into_iter()
        .map(|(label, spec)| {
            let ptx = compile_check(&spec, ARCH).unwrap_or_else(|e| panic!("{label}: {e}"));
            (format!("fused:{label}"), ptx)
        })
        .collect();
    check(&ptxas, modules);
}

#[test]
fn the_parser_flags_spills_warnings_and_wgmma_serialization() {
    let out = "ptxas info    : 36 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 2112 bytes smem, 384 bytes cmem[0]
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'k'
ptxas warning : Registers are spilled to local memory in function 'k', 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compile time = 1.5 ms
";
    let (funcs, problems) = parse(out);
    assert_eq!(funcs.len(), 1);
    let k = &funcs[0];
    assert!(k.entry && k.name == "k");
    assert_eq!((k.registers, k.barriers, k.smem), (255, 1, 2112));
    assert_eq!((k.stack, k.spill_stores, k.spill_loads), (8, 4, 4));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("wgmma serialization"), "{problems:?}");
    assert!(problems[1].starts_with("warning"), "{problems:?}");
}

#[test]
fn the_check_sees_a_real_stack_frame() {
    let Some(ptxas) = tools() else { return };
    // Data-dependent writes into a local array: it has to live on the stack.
    let source = "extern \"C\" __global__ void k(float* o, const int* idx, int i) {
        float a[64];
        for (int j = 0; j < 64; ++j) a[j] = o[j];
        for (int j = 0; j < 64; ++j) a[idx[j] & 63] += 1.0f;
        o[0] = a[i & 63];
    }";
    let fam = sources::Family { name: "stack_probe", source };
    let ptx = compile(&fam, ARCH, Target::Ptx).unwrap_or_else(|e| panic!("{e}"));
    let (funcs, problems) = ptxas_v(&ptxas, "stack_probe", &ptx).unwrap_or_else(|e| panic!("{e}"));
    assert!(problems.is_empty(), "{problems:?}");
    let k = funcs.iter().find(|f| f.name == "k" && f.entry).expect("entry k reported");
    assert!(k.stack >= 256 && k.registers > 0, "stack {} registers {}", k.stack, k.registers);
}
