//! Small, valid weight files built byte by byte (a GGUF writer and a safetensors writer), the
//! seeds of the fuzz harness and the inputs of the reader tests.

#![allow(dead_code)]

/// GGUF value type codes.
pub mod vt {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STR: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

pub fn gguf_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A tensor of a GgufBuilder: name, dims (innermost first), GGML type code, data, and an
/// offset that overrides the builder's placement.
pub type TensorSpec = (Vec<u8>, Vec<u64>, u32, Vec<u8>, Option<u64>);

/// A GGUF file under construction. Tensor data is placed in order at aligned offsets unless
/// an offset is forced.
pub struct GgufBuilder {
    pub version: u32,
    pub alignment: u64,
    pub kv: Vec<(Vec<u8>, u32, Vec<u8>)>,
    pub tensors: Vec<TensorSpec>,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        GgufBuilder { version: 3, alignment: 32, kv: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufBuilder {
    /// A metadata entry with a raw, already encoded value.
    pub fn kv(&mut self, key: &str, ty: u32, value: Vec<u8>) -> &mut Self {
        self.kv.push((key.as_bytes().to_vec(), ty, value));
        self
    }

    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.kv(key, vt::U32, v.to_le_bytes().to_vec())
    }

    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        let mut b = Vec::new();
        gguf_string(&mut b, v.as_bytes());
        self.kv(key, vt::STR, b)
    }

    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.as_bytes().to_vec(), dims.to_vec(), ggml_type, data, None));
        self
    }

    pub fn build(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, ty, v) in &self.kv {
            gguf_string(&mut out, k);
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(v);
        }
        let mut offsets = Vec::new();
        let mut next = 0u64;
        for (_, _, _, data, forced) in &self.tensors {
            let off = forced.unwrap_or(next);
            offsets.push(off);
            // A forced offset far outside any file (a damage test) places no data.
            if off < 1 << 20 {
                next = next.max((off + data.len() as u64).div_ceil(self.alignment) * self.alignment);
            }
        }
        for ((name, dims, ty, _, _), off) in self.tensors.iter().zip(&offsets) {
            gguf_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        let data_start = (out.len() as u64).div_ceil(self.alignment) * self.alignment;
        out.resize(data_start as usize, 0);
        for ((_, _, _, data, _), off) in self.tensors.iter().zip(&offsets) {
            if *off >= 1 << 20 {
                continue;
            }
            let at = (data_start + off) as usize;
            if out.len() < at + data.len() {
                out.resize(at + data.len(), 0);
            }
            out[at..at + data.len()].copy_from_slice(data);
        }
        // Like gguf-py, the file ends padded to the alignment.
        out.resize(out.len().max((data_start + next) as usize), 0);
        out
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Blocks of a GGUF block type with finite f16 scales (the pattern elsewhere).
pub fn blocks(n: usize, block_bytes: usize, seed: u8) -> Vec<u8> {
    let mut b = pattern(n * block_bytes, seed);
    for blk in b.chunks_mut(block_bytes) {
        blk[0] = 0x00;
        blk[1] = 0x3c; // f16 1.0
    }
    b
}

/// A GGUF seed holding every metadata value type (nested arrays too) and tensors of several
/// GGML types.
pub fn gguf_seed(alignment: Option<u32>) -> Vec<u8> {
    let mut g = GgufBuilder::default();
    g.kv_str("general.architecture", "llama");
    if let Some(a) = alignment {
        g.alignment = a as u64;
        g.kv_u32("general.alignment", a);
    }
    g.kv("u8", vt::U8, vec![7]);
    g.kv("i8", vt::I8, vec![0xfe]);
    g.kv("u16", vt::U16, 500u16.to_le_bytes().to_vec());
    g.kv("i16", vt::I16, (-500i16).to_le_bytes().to_vec());
    g.kv("i32", vt::I32, (-7i32).to_le_bytes().to_vec());
    g.kv("f32", vt::F32, 1.5f32.to_le_bytes().to_vec());
    g.kv("bool", vt::BOOL, vec![1]);
    g.kv("u64", vt::U64, u64::MAX.to_le_bytes().to_vec());
    g.kv("i64", vt::I64, i64::MIN.to_le_bytes().to_vec());
    g.kv("f64", vt::F64, 2.25f64.to_le_bytes().to_vec());
    let mut arr = vt::STR.to_le_bytes().to_vec();
    arr.extend_from_slice(&3u64.to_le_bytes());
    for s in ["a", "", "ccc"] {
        gguf_string(&mut arr, s.as_bytes());
    }
    g.kv("tokens", vt::ARRAY, arr);
    let mut ints = vt::I32.to_le_bytes().to_vec();
    ints.extend_from_slice(&4u64.to_le_bytes());
    for v in [1i32, -2, 3, -4] {
        ints.extend_from_slice(&v.to_le_bytes());
    }
    g.kv("ints", vt::ARRAY, ints.clone());
    let mut nested = vt::ARRAY.to_le_bytes().to_vec();
    nested.extend_from_slice(&2u64.to_le_bytes());
    nested.extend_from_slice(&ints);
    nested.extend_from_slice(&vt::BOOL.to_le_bytes());
    nested.extend_from_slice(&2u64.to_le_bytes());
    nested.extend_from_slice(&[0, 1]);
    g.kv("nested", vt::ARRAY, nested);
    g.tensor("token_embd.weight", &[8, 3], 0, pattern(8 * 3 * 4, 1));
    g.tensor("blk.0.attn_norm.weight", &[8], 1, pattern(16, 2));
    g.tensor("blk.0.q40", &[64, 2], 2, blocks(4, 18, 3));
    g.tensor("blk.0.q80", &[32, 1], 8, blocks(1, 34, 4));
    g.tensor("blk.0.q4k", &[256, 1], 12, blocks(1, 144, 5));
    g.tensor("blk.0.q6k", &[256], 14, blocks(1, 210, 6));
    g.tensor("blk.0.bf16", &[4, 2], 30, pattern(16, 7));
    g.tensor("blk.0.i32", &[3], 26, pattern(12, 8));
    g.tensor("empty", &[0, 4], 0, Vec::new());
    g.build()
}

pub fn safetensors_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A safetensors seed: several dtypes, a scalar, an empty tensor and metadata.
pub fn safetensors_seed() -> Vec<u8> {
    let header = concat!(
        r#"{"__metadata__":{"format":"pt"},"#,
        r#""a.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"#,
        r#""a.bias":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},"#,
        r#""b":{"dtype":"I64","shape":[],"data_offsets":[30,38]},"#,
        r#""c":{"dtype":"U8","shape":[0,5],"data_offsets":[38,38]},"#,
        r#""d":{"dtype":"F16","shape":[1,1,5],"data_offsets":[38,48]}}"#
    );
    let padded = format!("{header:<width$}", width = header.len().div_ceil(8) * 8);
    safetensors_file(&padded, &pattern(48, 9))
}
