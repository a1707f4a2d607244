//! The GGUF reader on files built byte by byte: every metadata type, tensor layout, and each
//! kind of damage giving a clear error.

mod seeds;

use max_runtime::weights::gguf::{GgufLayout, parse};
use max_runtime::weights::{GgmlType, MetaArray, MetaValue};
use seeds::{GgufBuilder, gguf_seed, gguf_string, vt};

fn ok(bytes: &[u8]) -> GgufLayout {
    parse(bytes, "t.gguf").unwrap_or_else(|e| panic!("{e}"))
}

fn fails(bytes: &[u8], want: &str) {
    let e = parse(bytes, "bad.gguf").expect_err(want).to_string();
    assert!(e.starts_with("bad.gguf: not a valid GGUF file: "), "{e}");
    assert!(e.contains(want), "{e:?} does not mention {want:?}");
}

fn meta<'a>(l: &'a GgufLayout, key: &str) -> &'a MetaValue {
    &l.metadata.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key}")).1
}

#[test]
fn every_metadata_type_reads_back() {
    let l = ok(&gguf_seed(None));
    assert_eq!((l.version, l.alignment), (3, 32));
    assert_eq!(meta(&l, "general.architecture"), &MetaValue::Str("llama".into()));
    assert_eq!(meta(&l, "u8"), &MetaValue::U8(7));
    assert_eq!(meta(&l, "i8"), &MetaValue::I8(-2));
    assert_eq!(meta(&l, "u16"), &MetaValue::U16(500));
    assert_eq!(meta(&l, "i16"), &MetaValue::I16(-500));
    assert_eq!(meta(&l, "i32"), &MetaValue::I32(-7));
    assert_eq!(meta(&l, "f32"), &MetaValue::F32(1.5));
    assert_eq!(meta(&l, "bool"), &MetaValue::Bool(true));
    assert_eq!(meta(&l, "u64"), &MetaValue::U64(u64::MAX));
    assert_eq!(meta(&l, "i64"), &MetaValue::I64(i64::MIN));
    assert_eq!(meta(&l, "f64"), &MetaValue::F64(2.25));
    assert_eq!(meta(&l, "tokens"), &MetaValue::Array(MetaArray::Str(vec!["a".into(), "".into(), "ccc".into()])));
    assert_eq!(
        meta(&l, "nested"),
        &MetaValue::Array(MetaArray::Array(vec![
            MetaArray::I32(vec![1, -2, 3, -4]),
            MetaArray::Bool(vec![false, true])
        ]))
    );
    let keys: Vec<&str> = l.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys[..3], ["general.architecture", "u8", "i8"]);
}

#[test]
fn tensors_have_shapes_types_and_ranges() {
    let bytes = gguf_seed(Some(64));
    let l = ok(&bytes);
    assert_eq!(l.alignment, 64);
    assert_eq!(l.data_offset % 64, 0);
    let t = |n: &str| l.tensors.iter().find(|t| t.name == n).unwrap();
    assert_eq!(t("token_embd.weight").array_shape(), [3, 8]);
    assert_eq!((t("token_embd.weight").nbytes, t("token_embd.weight").ggml_type), (96, GgmlType::F32));
    assert_eq!(t("blk.0.q40").array_shape(), [2, 36]);
    assert_eq!(t("blk.0.q4k").array_shape(), [1, 144]);
    assert_eq!(t("blk.0.q6k").array_shape(), [210]);
    assert_eq!(t("blk.0.bf16").ggml_type.dtype(), Some(max_runtime::DType::BFloat16));
    assert_eq!(t("empty").nbytes, 0);
    for x in &l.tensors {
        assert_eq!(x.file_offset as u64, l.data_offset + x.offset);
        assert_eq!(x.offset % 64, 0);
    }
    // The bytes are where the builder put them.
    let q80 = t("blk.0.q80");
    assert_eq!(&bytes[q80.file_offset..q80.file_offset + 34], &seeds::blocks(1, 34, 4)[..]);
}

#[test]
fn header_damage() {
    let good = gguf_seed(None);
    let mut b = good.clone();
    b[0] = b'X';
    fails(&b, "not the GGUF magic");
    for (v, want) in [(1u32, "version 1 is not supported"), (4, "version 4"), (3u32.swap_bytes(), "big-endian")] {
        let mut b = good.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        fails(&b, want);
    }
    fails(&good[..3], "the magic number needs 4 bytes");
    let mut b = good.clone();
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    fails(&b, "the tensor count is 1152921504606846976, more than");
    let mut b = good.clone();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    fails(&b, "the metadata count is 18446744073709551615");
}

#[test]
fn every_truncation_is_an_error() {
    let good = gguf_seed(None);
    for n in 0..good.len() {
        assert!(parse(&good[..n], "cut.gguf").is_err(), "a file cut at {n} of {} bytes parsed", good.len());
    }
}

fn one_kv(key: &[u8], ty: u32, value: Vec<u8>) -> Vec<u8> {
    let mut g = GgufBuilder::default();
    g.kv.push((key.to_vec(), ty, value));
    g.build()
}

#[test]
fn metadata_damage() {
    fails(&one_kv(b"k", 13, vec![0]), "metadata \"k\" has unknown value type 13");
    fails(&one_kv(b"\xff\xfe", vt::U8, vec![0]), "the key of metadata entry 0 is not valid UTF-8");
    fails(&one_kv(b"b", vt::BOOL, vec![2]), "metadata \"b\" is a bool stored as 2");
    let mut long = Vec::new();
    long.extend_from_slice(&(u64::MAX - 3).to_le_bytes());
    fails(&one_kv(b"s", vt::STR, long), "metadata \"s\" (18446744073709551612 bytes) needs");
    let mut arr = vt::U64.to_le_bytes().to_vec();
    arr.extend_from_slice(&(1u64 << 61).to_le_bytes());
    fails(&one_kv(b"a", vt::ARRAY, arr), "the element count of metadata \"a\" is 2305843009213693952, more than");
    let mut arr = 99u32.to_le_bytes().to_vec();
    arr.extend_from_slice(&1u64.to_le_bytes());
    fails(&one_kv(b"a", vt::ARRAY, arr), "metadata \"a\" has unknown element type 99");
    // Arrays nested past the limit.
    let mut deep = Vec::new();
    for _ in 0..20 {
        deep.extend_from_slice(&vt::ARRAY.to_le_bytes());
        deep.extend_from_slice(&1u64.to_le_bytes());
    }
    deep.extend_from_slice(&vt::U8.to_le_bytes());
    deep.extend_from_slice(&0u64.to_le_bytes());
    fails(&one_kv(b"d", vt::ARRAY, deep), "nests arrays more than 8 deep");
    let mut g = GgufBuilder::default();
    g.kv_u32("x", 1).kv_u32("x", 2);
    fails(&g.build(), "metadata key \"x\" appears twice");
    // String values with bad UTF-8 are kept, lossily.
    let mut s = Vec::new();
    gguf_string(&mut s, b"a\xffb");
    let l = ok(&one_kv(b"s", vt::STR, s));
    assert_eq!(l.metadata[0].1, MetaValue::Str("a\u{fffd}b".into()));
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for a in [0u32, 3, 48] {
        let mut g = GgufBuilder::default();
        g.kv_u32("general.alignment", a);
        fails(&g.build(), "general.alignment must be a UINT32 power of two");
    }
    let mut g = GgufBuilder::default();
    g.kv("general.alignment", vt::U64, 32u64.to_le_bytes().to_vec());
    fails(&g.build(), "general.alignment must be a UINT32");
    let mut g = GgufBuilder::default();
    g.kv_u32("general.alignment", 1).tensor("t", &[3], 1, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(ok(&g.build()).alignment, 1);
}

fn one_tensor(dims: &[u64], ty: u32, data: Vec<u8>) -> Vec<u8> {
    let mut g = GgufBuilder::default();
    g.tensor("w", dims, ty, data);
    g.build()
}

#[test]
fn tensor_info_damage() {
    fails(&one_tensor(&[4], 99, vec![0; 16]), "tensor \"w\" has unknown GGML type 99");
    fails(&one_tensor(&[4], 4, vec![0; 16]), "unknown GGML type 4");
    fails(&one_tensor(&[1; 9], 0, vec![0; 4]), "has 9 dimensions (at most 8)");
    fails(&one_tensor(&[1 << 63], 0, vec![]), "dimension 0 of 9223372036854775808");
    fails(&one_tensor(&[1 << 40, 1 << 40], 0, vec![]), "whose product overflows");
    fails(&one_tensor(&[1 << 62], 0, vec![]), "needs more than 2^64 bytes");
    fails(&one_tensor(&[1 << 40], 0, vec![]), "extends past the end of the file");
    fails(&one_tensor(&[48], 2, vec![0; 36]), "rows of 48 elements, not a multiple of its block of 32");
    let mut g = GgufBuilder::default();
    g.tensors.push((b"\xc3\x28".to_vec(), vec![1], 0, vec![0; 4], None));
    fails(&g.build(), "the name of tensor info 0 is not valid UTF-8");
    let mut g = GgufBuilder::default();
    g.tensor("w", &[1], 0, vec![0; 4]).tensor("w", &[1], 0, vec![0; 4]);
    fails(&g.build(), "tensor name \"w\" appears twice");
}

#[test]
fn offsets_must_be_aligned_inside_and_disjoint() {
    let mut g = GgufBuilder::default();
    g.tensor("a", &[16], 0, vec![1; 64]).tensor("b", &[16], 0, vec![2; 64]);
    g.tensors[1].4 = Some(32);
    fails(&g.build(), "tensors \"a\" and \"b\" overlap (bytes");
    g.tensors[1].4 = Some(8);
    fails(&g.build(), "tensor \"b\" has data offset 8, not a multiple of the alignment 32");
    g.tensors[1].4 = Some(u64::MAX - 31);
    fails(&g.build(), "extends past the end of the file");
    // Zero-size tensors may share an offset with anything.
    let mut g = GgufBuilder::default();
    g.tensor("a", &[16], 0, vec![1; 64]).tensor("z", &[0], 0, vec![]);
    g.tensors[1].4 = Some(0);
    assert_eq!(ok(&g.build()).tensors.len(), 2);
}

#[test]
fn a_file_without_tensors_or_metadata() {
    let l = ok(&GgufBuilder::default().build());
    assert!(l.tensors.is_empty() && l.metadata.is_empty());
    let mut v2 = GgufBuilder { version: 2, ..Default::default() };
    v2.tensor("t", &[2], 26, vec![1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(ok(&v2.build()).version, 2);
}
