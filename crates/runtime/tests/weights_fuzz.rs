//! A mutation fuzzer for both weight-file parsers (`gguf::parse`, `safetensors::parse`), run
//! as part of `cargo test`. It mutates valid seeds (the byte-built files of seeds/mod.rs and
//! the files the real Python packages wrote, tests/data) and checks that every input either
//! parses into a layout whose ranges are consistent with the file, or fails with an error;
//! a panic (including an allocation failure or an overflow caught by a debug build) fails the
//! test and leaves the input in target/fuzz-failures/.
//!
//! Deterministic for a given seed and input count. Environment:
//! - MAX_FUZZ_SECS: time budget per reader (default 10; CI runs the default),
//! - MAX_FUZZ_ITERS: stop after this many inputs per reader (default: only the time budget),
//! - MAX_FUZZ_SEED: the generator seed (default 0x5eed).
//!
//! Long local run: `MAX_FUZZ_SECS=3600 MAX_FUZZ_ITERS=1000000 cargo test --release -p
//! max-runtime --test weights_fuzz -- --nocapture`.

mod seeds;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use max_runtime::weights::{gguf, safetensors};

/// splitmix64: small, fast and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 { 0 } else { (self.next() % n as u64) as usize }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Values that sit on the boundaries parsers get wrong.
fn interesting(rng: &mut Rng, len: usize) -> u64 {
    const FIXED: [u64; 24] = [
        0,
        1,
        2,
        3,
        4,
        7,
        8,
        12,
        13,
        24,
        31,
        32,
        33,
        64,
        255,
        256,
        65535,
        (1 << 31) - 1,
        1 << 31,
        (1 << 32) - 1,
        1 << 32,
        1 << 62,
        1 << 63,
        u64::MAX,
    ];
    match rng.below(4) {
        0 => len as u64 + rng.below(3) as u64 - 1,
        1 => rng.next() % 4096,
        _ => FIXED[rng.below(FIXED.len())],
    }
}

/// A position, most often in the first 512 bytes, where headers and tensor infos live.
fn pos(rng: &mut Rng, len: usize) -> usize {
    if rng.chance(70) { rng.below(len.min(512)) } else { rng.below(len) }
}

fn write_int(rng: &mut Rng, buf: &mut [u8], width: usize) {
    if buf.len() < width {
        return;
    }
    let at = pos(rng, buf.len() - width + 1);
    let v = if rng.chance(30) {
        // Nudge the value already there (a count or offset off by a little).
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(&buf[at..at + width]);
        let delta = rng.below(65) as u64;
        let old = u64::from_le_bytes(old);
        if rng.chance(50) { old.wrapping_add(delta) } else { old.wrapping_sub(delta) }
    } else {
        interesting(rng, buf.len())
    };
    buf[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

const TOKENS: [&[u8]; 16] = [
    b"\"F32\"",
    b"\"BF16\"",
    b"\"U8\"",
    b"\"F4\"",
    b"\"F8_E4M3\"",
    b"\"C64\"",
    b"\"X9\"",
    b"[]",
    b"[0,0]",
    b"18446744073709551615",
    b"-1",
    b"1e999",
    b"\"__metadata__\"",
    b"{",
    b"\"",
    b",",
];

/// One to four mutations of a random seed (sometimes spliced with another).
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], json: bool) -> Vec<u8> {
    let mut b = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(if json { 11 } else { 9 }) {
            0 if len > 0 => {
                let at = pos(rng, len);
                b[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = pos(rng, len);
                b[at] = [0, 1, 0x7f, 0x80, 0xff, rng.next() as u8][rng.below(6)];
            }
            2 => write_int(rng, &mut b, 4),
            3 | 4 => write_int(rng, &mut b, 8),
            5 => b.truncate(rng.below(len + 1)),
            6 => {
                let n = rng.below(64);
                b.extend((0..n).map(|_| rng.next() as u8));
            }
            7 if len > 0 => {
                // Delete or duplicate a chunk.
                let at = pos(rng, len);
                let n = rng.below((len - at).min(32) + 1);
                if rng.chance(50) {
                    b.drain(at..at + n);
                } else {
                    let chunk = b[at..at + n].to_vec();
                    b.splice(at..at, chunk);
                }
            }
            8 => {
                let other = &seeds[rng.below(seeds.len())];
                let (cut, from) = (rng.below(len + 1), rng.below(other.len() + 1));
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            // Safetensors: edit the JSON as text, then (usually) fix the header length so the
            // edit reaches the JSON parser and the range checks behind it.
            _ if len > 8 => {
                let header_end = 8 + (u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as usize).min(len - 8);
                let at = 8 + rng.below(header_end - 8 + 1);
                let token = TOKENS[rng.below(TOKENS.len())];
                let n = rng.below(4).min(header_end.saturating_sub(at));
                b.splice(at..at + n, token.iter().copied());
                if rng.chance(80) {
                    let new_len = (header_end - 8 + token.len() - n) as u64;
                    b[..8].copy_from_slice(&new_len.to_le_bytes());
                }
            }
            _ => {}
        }
    }
    b
}

/// A parsed GGUF layout must describe ranges inside the file, aligned, sized by their
/// dims and type, and disjoint.
fn check_gguf(bytes: &[u8]) -> bool {
    let Ok(l) = gguf::parse(bytes, "fuzz.gguf") else { return false };
    let mut spans = Vec::new();
    for t in &l.tensors {
        assert!(l.alignment.is_power_of_two());
        assert_eq!(t.file_offset as u64, l.data_offset + t.offset);
        assert_eq!(t.offset % l.alignment, 0);
        assert!(t.file_offset + t.nbytes <= bytes.len(), "{} out of the file", t.name);
        let (elems, bsize) = t.ggml_type.block();
        let count: u128 = t.dims.iter().map(|d| *d as u128).product();
        assert_eq!(count / elems as u128 * bsize as u128, t.nbytes as u128, "{}", t.name);
        let shape = t.array_shape();
        let item = t.ggml_type.dtype().map_or(1, |d| d.size_in_bytes());
        assert_eq!(shape.iter().product::<usize>() * item, t.nbytes, "{}", t.name);
        if t.nbytes > 0 {
            spans.push((t.file_offset, t.file_offset + t.nbytes));
        }
    }
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlapping tensors accepted");
    true
}

/// A parsed safetensors layout must describe disjoint ranges inside the file, each the size
/// its dtype and shape give.
fn check_safetensors(bytes: &[u8]) -> bool {
    let Ok(l) = safetensors::parse(bytes, "fuzz.safetensors") else { return false };
    let mut spans = Vec::new();
    for t in &l.tensors {
        assert!(t.offset.checked_add(t.nbytes).is_some_and(|e| e <= bytes.len()), "{} out of the file", t.name);
        if let Some(d) = t.dtype {
            let count = t.shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
            assert_eq!(count.and_then(|c| c.checked_mul(d.size_in_bytes())), Some(t.nbytes), "{}", t.name);
        }
        if t.nbytes > 0 {
            spans.push((t.offset, t.offset + t.nbytes));
        }
    }
    spans.sort_unstable();
    assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0), "overlapping tensors accepted");
    true
}

fn run(name: &str, seeds: Vec<Vec<u8>>, json: bool, check: fn(&[u8]) -> bool) {
    let budget = Duration::from_secs(env_u64("MAX_FUZZ_SECS", 10));
    let max_iters = env_u64("MAX_FUZZ_ITERS", u64::MAX);
    let seed = env_u64("MAX_FUZZ_SEED", 0x5eed);
    let mut rng = Rng(seed ^ name.len() as u64);
    for s in &seeds {
        assert!(check(s), "{name}: a seed does not parse");
    }
    let start = Instant::now();
    let (mut iters, mut accepted) = (0u64, 0u64);
    while iters < max_iters && (iters % 256 != 0 || start.elapsed() < budget) {
        let input = mutate(&mut rng, &seeds, json);
        match catch_unwind(AssertUnwindSafe(|| check(&input))) {
            Ok(ok) => accepted += ok as u64,
            Err(_) => {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-{seed}-{iters}.bin"));
                let _ = std::fs::write(&path, &input);
                panic!("{name}: input {iters} (seed {seed}) panicked; saved to {}", path.display());
            }
        }
        iters += 1;
    }
    eprintln!(
        "{name} fuzz: {iters} inputs ({accepted} parsed, {} rejected) in {:.1} s, seed {seed}",
        iters - accepted,
        start.elapsed().as_secs_f64()
    );
    assert!(iters > 0);
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)).expect("fixture")
}

#[test]
fn fuzz_gguf() {
    let mut v2 = seeds::GgufBuilder { version: 2, ..Default::default() };
    v2.kv_str("general.name", "v2").tensor("t", &[64, 2], 8, seeds::blocks(4, 34, 1));
    let seeds = vec![
        seeds::gguf_seed(None),
        seeds::gguf_seed(Some(64)),
        v2.build(),
        fixture("tiny.gguf"),
        fixture("tiny_align64_v2.gguf"),
    ];
    run("gguf", seeds, false, check_gguf);
}

#[test]
fn fuzz_safetensors() {
    let seeds = vec![seeds::safetensors_seed(), fixture("tiny.safetensors")];
    run("safetensors", seeds, true, check_safetensors);
}
