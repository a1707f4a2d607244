//! The readers on files written by the real `safetensors` and `gguf` Python packages
//! (tests/data, made by make_fixtures.py): every tensor's name, type, shape, range and bytes,
//! and every GGUF metadata key, type and value, as manifest.tsv (what those packages read
//! back) records them. Also the mapped-file layer: Buffers over the map, alignment copies,
//! and files that cannot be mapped.

use std::path::{Path, PathBuf};

use max_runtime::weights::{GgufFile, MappedFile, MetaValue, SafetensorsFile};
use max_runtime::{Buffer, DType};
use sha2::{Digest, Sha256};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

struct Row {
    file: String,
    name: String,
    kind: String,
    shape: Vec<usize>,
    offset: usize,
    nbytes: usize,
    sha: String,
}

fn manifest() -> (Vec<Row>, Vec<[String; 4]>) {
    let text = std::fs::read_to_string(data_dir().join("manifest.tsv")).expect("manifest.tsv");
    let (mut tensors, mut meta) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        match f[0] {
            "tensor" => tensors.push(Row {
                file: f[1].into(),
                name: f[2].into(),
                kind: f[3].into(),
                shape: f[4].split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect(),
                offset: f[5].parse().unwrap(),
                nbytes: f[6].parse().unwrap(),
                sha: f[7].into(),
            }),
            "meta" => meta.push([f[1].into(), f[2].into(), f[3].into(), f[4].into()]),
            other => panic!("bad manifest line kind {other}"),
        }
    }
    (tensors, meta)
}

fn hex_sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes a host buffer holds (contiguous).
fn buffer_bytes(b: &Buffer) -> Vec<u8> {
    assert!(b.is_contiguous() && b.device().is_host());
    if b.nbytes() == 0 {
        return Vec::new();
    }
    // SAFETY: a contiguous host buffer of nbytes bytes, alive for the call.
    unsafe { std::slice::from_raw_parts(b.addr() as *const u8, b.nbytes()) }.to_vec()
}

#[test]
fn safetensors_tensors_match_the_writer() {
    let (rows, _) = manifest();
    let path = data_dir().join("tiny.safetensors");
    let raw = std::fs::read(&path).unwrap();
    let f = SafetensorsFile::open(&path).unwrap();
    let rows: Vec<&Row> = rows.iter().filter(|r| r.file == "tiny.safetensors").collect();
    assert_eq!(f.tensors().len(), rows.len());
    for r in rows {
        let t = f.get(&r.name).unwrap_or_else(|| panic!("{} missing", r.name));
        assert_eq!((&t.st_dtype, &t.shape, t.offset, t.nbytes), (&r.kind, &r.shape, r.offset, r.nbytes), "{}", r.name);
        assert_eq!(hex_sha(&raw[t.offset..t.offset + t.nbytes]), r.sha, "{}", r.name);
        let b = f.buffer(&r.name).unwrap();
        assert_eq!(b.shape(), r.shape.as_slice(), "{}", r.name);
        assert_eq!(hex_sha(&buffer_bytes(&b)), r.sha, "{}", r.name);
    }
    assert_eq!(f.get("position_ids").unwrap().dtype, Some(DType::Int64));
    assert_eq!(f.get("encoder.layer.0.mask").unwrap().dtype, Some(DType::Bool));
    assert_eq!(f.metadata(), [("format".to_string(), "pt".to_string())]);
}

#[test]
fn gguf_tensors_and_metadata_match_the_writer() {
    let (rows, meta) = manifest();
    for (name, version, alignment) in [("tiny.gguf", 3, 32), ("tiny_align64_v2.gguf", 2, 64)] {
        let path = data_dir().join(name);
        let raw = std::fs::read(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        let l = f.layout();
        assert_eq!((l.version, l.alignment), (version, alignment));
        let rows: Vec<&Row> = rows.iter().filter(|r| r.file == name).collect();
        assert_eq!(l.tensors.len(), rows.len());
        for (t, r) in l.tensors.iter().zip(&rows) {
            assert_eq!(t.name, r.name);
            assert_eq!(t.ggml_type.name(), r.kind, "{}", r.name);
            let dims: Vec<usize> = t.dims.iter().rev().map(|d| *d as usize).collect();
            assert_eq!(dims, r.shape, "{}", r.name);
            assert_eq!((t.file_offset, t.nbytes), (r.offset, r.nbytes), "{}", r.name);
            assert_eq!(t.file_offset % alignment as usize, 0);
            assert_eq!(hex_sha(&raw[t.file_offset..t.file_offset + t.nbytes]), r.sha, "{}", r.name);
            let b = f.buffer(&r.name).unwrap();
            assert_eq!(hex_sha(&buffer_bytes(&b)), r.sha, "{}", r.name);
            match t.ggml_type.dtype() {
                Some(d) => assert_eq!((b.dtype(), b.shape()), (d, r.shape.as_slice()), "{}", r.name),
                None => {
                    let (elems, bytes) = t.ggml_type.block();
                    let mut want = r.shape.clone();
                    *want.last_mut().unwrap() = want.last().unwrap() / elems * bytes;
                    assert_eq!((b.dtype(), b.shape()), (DType::UInt8, want.as_slice()), "{}", r.name);
                }
            }
        }
        let meta: Vec<&[String; 4]> = meta.iter().filter(|m| m[0] == name).collect();
        assert_eq!(l.metadata.len(), meta.len());
        for ((key, value), m) in l.metadata.iter().zip(meta) {
            assert_eq!((key, value.type_name()), (&m[1], m[2].clone()));
            let text = match value {
                MetaValue::U8(v) => v.to_string(),
                MetaValue::I8(v) => v.to_string(),
                MetaValue::U16(v) => v.to_string(),
                MetaValue::I16(v) => v.to_string(),
                MetaValue::U32(v) => v.to_string(),
                MetaValue::I32(v) => v.to_string(),
                MetaValue::F32(v) => v.to_string(),
                MetaValue::Bool(v) => v.to_string(),
                MetaValue::Str(v) => v.clone(),
                MetaValue::U64(v) => v.to_string(),
                MetaValue::I64(v) => v.to_string(),
                MetaValue::F64(v) => v.to_string(),
                MetaValue::Array(a) => a.len().to_string(),
            };
            assert_eq!(text, m[3], "{key}");
        }
    }
}

#[test]
fn gguf_block_tensors_dequantize() {
    let f = GgufFile::open(&data_dir().join("tiny.gguf")).unwrap();
    for (name, enc, shape) in [
        ("blk.0.q4_0", "Q4_0", [2, 64]),
        ("blk.0.q4_1", "Q4_1", [2, 64]),
        ("blk.0.q8_0", "Q8_0", [2, 64]),
        ("blk.0.q4_k", "Q4_K", [1, 256]),
        ("blk.0.q5_k", "Q5_K", [1, 256]),
        ("blk.0.q6_k", "Q6_K", [2, 256]),
    ] {
        assert_eq!(f.get(name).unwrap().ggml_type.encoding(), Some(enc));
        let out = max_runtime::weights::dequantize(&f.buffer(name).unwrap(), enc).unwrap();
        assert_eq!((out.dtype(), out.shape()), (DType::Float32, shape.as_slice()), "{name}");
    }
    // Q5_0 is read (its bytes are valid) but is not an encoding MAX computes with.
    assert_eq!(f.get("blk.0.q5_0").unwrap().ggml_type.encoding(), None);
    assert!(max_runtime::weights::dequantize(&f.buffer("blk.0.q5_0").unwrap(), "Q5_0").is_err());
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("max-weights-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn unaligned_tensors_are_copied_aligned_and_writes_stay_private() {
    // Alignment 1 puts the f32 tensor at an odd file offset.
    let mut g = GgufBuilder { alignment: 1, ..Default::default() };
    g.kv_u32("general.alignment", 1).tensor("u", &[3], 24, vec![1, 2, 3]).tensor("f", &[2], 0, {
        let mut v = 1.5f32.to_le_bytes().to_vec();
        v.extend_from_slice(&(-2.0f32).to_le_bytes());
        v
    });
    let bytes = g.build();
    let p = temp_file("unaligned.gguf", &bytes);
    let f = GgufFile::open(&p).unwrap();
    assert_ne!(f.get("f").unwrap().file_offset % 4, 0);
    let b = f.buffer("f").unwrap();
    assert_eq!(b.addr() % 4, 0);
    assert_eq!(buffer_bytes(&b)[..4], 1.5f32.to_le_bytes());
    // A write through a view of the map changes this process's copy, never the file.
    let u = f.buffer("u").unwrap();
    u.fill_bits(9).unwrap();
    assert_eq!(buffer_bytes(&u), [9, 9, 9]);
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
}

#[test]
fn files_that_cannot_be_mapped_are_value_errors() {
    let missing = data_dir().join("no-such-file.gguf");
    let e = GgufFile::open(&missing).unwrap_err().to_string();
    assert!(e.contains("cannot open") && e.contains("no-such-file.gguf"), "{e}");
    let e = SafetensorsFile::open(&data_dir()).unwrap_err().to_string();
    assert!(e.contains("is not a regular file"), "{e}");
    let empty = temp_file("empty.safetensors", &[]);
    let e = SafetensorsFile::open(&empty).unwrap_err().to_string();
    assert!(e.contains("fewer than the 8"), "{e}");
    let empty = temp_file("empty.gguf", &[]);
    let e = GgufFile::open(&empty).unwrap_err().to_string();
    assert!(e.contains("magic number needs 4 bytes"), "{e}");
    let m = MappedFile::open(&data_dir().join("tiny.gguf")).unwrap();
    assert!(m.view(m.len() - 4, 8, DType::UInt8, &[8]).is_err());
    assert!(m.view(usize::MAX, 2, DType::UInt8, &[2]).is_err());
    assert!(m.view(0, 8, DType::Float32, &[3]).is_err());
}

mod seeds;
use seeds::GgufBuilder;
