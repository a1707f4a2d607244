//! GGUF v2/v3 files (llama.cpp's format), read with our own parser.
//!
//! Layout, all little-endian: magic "GGUF", u32 version, u64 tensor count, u64 metadata count;
//! the metadata (key string, u32 value type, value); the tensor infos (name string, u32 rank,
//! u64 dims innermost first, u32 GGML type, u64 offset into the data section); padding to the
//! alignment (metadata `general.alignment`, default 32); the data section. A string is a u64
//! length and that many bytes; an array is a u32 element type, a u64 count and the elements.
//!
//! Every count and length is checked against the bytes left before anything is read or
//! allocated for it, so memory stays proportional to the file (a count of 2^60 in a small file
//! is an error, not an allocation). Tensors must lie inside the file at offsets that are
//! multiples of the alignment, must not overlap, and must have a whole number of blocks per row.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use super::MappedFile;
use crate::{Buffer, DType, Error, Result};

pub use super::gguf_types::GgmlType;

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml itself stops at 4 dimensions; the Python writer allows more, so a little room.
pub const MAX_DIMS: u32 = 8;
/// Arrays of arrays nest at most this deep (ggml writes none; the format allows them).
pub const MAX_NESTING: usize = 8;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(MetaArray),
}

impl MetaValue {
    /// The GGUF type name: `"UINT32"`, `"ARRAY[STRING]"`, `"ARRAY[ARRAY[INT32]]"`.
    pub fn type_name(&self) -> String {
        match self {
            MetaValue::U8(_) => "UINT8".into(),
            MetaValue::I8(_) => "INT8".into(),
            MetaValue::U16(_) => "UINT16".into(),
            MetaValue::I16(_) => "INT16".into(),
            MetaValue::U32(_) => "UINT32".into(),
            MetaValue::I32(_) => "INT32".into(),
            MetaValue::F32(_) => "FLOAT32".into(),
            MetaValue::Bool(_) => "BOOL".into(),
            MetaValue::Str(_) => "STRING".into(),
            MetaValue::U64(_) => "UINT64".into(),
            MetaValue::I64(_) => "INT64".into(),
            MetaValue::F64(_) => "FLOAT64".into(),
            MetaValue::Array(a) => a.type_name(),
        }
    }
}

/// A metadata array: one vector per element type, so a long array of small numbers costs
/// what it costs in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Array(Vec<MetaArray>),
}

impl MetaArray {
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `"ARRAY[<element type>]"`; an empty array of arrays cannot say what its arrays hold.
    pub fn type_name(&self) -> String {
        let inner = match self {
            MetaArray::U8(_) => "UINT8".to_string(),
            MetaArray::I8(_) => "INT8".into(),
            MetaArray::U16(_) => "UINT16".into(),
            MetaArray::I16(_) => "INT16".into(),
            MetaArray::U32(_) => "UINT32".into(),
            MetaArray::I32(_) => "INT32".into(),
            MetaArray::F32(_) => "FLOAT32".into(),
            MetaArray::Bool(_) => "BOOL".into(),
            MetaArray::Str(_) => "STRING".into(),
            MetaArray::U64(_) => "UINT64".into(),
            MetaArray::I64(_) => "INT64".into(),
            MetaArray::F64(_) => "FLOAT64".into(),
            MetaArray::Array(v) => v.first().map(MetaArray::type_name).unwrap_or_else(|| "ARRAY".into()),
        };
        format!("ARRAY[{inner}]")
    }
}

/// GGUF value type codes, with the fewest bytes one value of the type takes in a file.
fn value_type(code: u32) -> Option<(&'static str, u64)> {
    Some(match code {
        0 => ("UINT8", 1),
        1 => ("INT8", 1),
        2 => ("UINT16", 2),
        3 => ("INT16", 2),
        4 => ("UINT32", 4),
        5 => ("INT32", 4),
        6 => ("FLOAT32", 4),
        7 => ("BOOL", 1),
        8 => ("STRING", 8),
        9 => ("ARRAY", 12),
        10 => ("UINT64", 8),
        11 => ("INT64", 8),
        12 => ("FLOAT64", 8),
        _ => return None,
    })
}

/// One tensor info, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    pub name: String,
    /// ggml order: innermost (contiguous) dimension first.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Relative to the data section, as stored.
    pub offset: u64,
    /// Absolute byte offset in the file.
    pub file_offset: usize,
    pub nbytes: usize,
}

impl GgufTensor {
    /// The shape in numpy order (outermost first); for block types the last dimension counts
    /// bytes (whole blocks), as the quantized ops take them.
    pub fn array_shape(&self) -> Vec<usize> {
        let mut shape: Vec<usize> = self.dims.iter().rev().map(|d| *d as usize).collect();
        let (elems, bytes) = self.ggml_type.block();
        if let (true, Some(last)) = (self.ggml_type.is_block(), shape.last_mut()) {
            *last = *last / elems * bytes;
        }
        shape
    }
}

/// A parsed GGUF file.
#[derive(Clone, Debug, Default)]
pub struct GgufLayout {
    pub version: u32,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// In file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// In file order.
    pub tensors: Vec<GgufTensor>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    label: &'a str,
}

impl<'a> Reader<'a> {
    fn err(&self, msg: String) -> Error {
        Error::Value(format!("{}: not a valid GGUF file: {msg}", self.label))
    }

    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(self.err(format!(
                "{} needs {n} bytes at offset {} but the file has {} bytes",
                what(),
                self.pos,
                self.buf.len()
            )));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `min` bytes each, checked against the bytes left.
    fn count(&mut self, min: u64, what: &dyn Fn() -> String) -> Result<u64> {
        let n = self.u64(what)?;
        if n.checked_mul(min).is_none_or(|b| b > self.left()) {
            return Err(self.err(format!(
                "{} is {n}, more than the {} bytes left in the file can hold",
                what(),
                self.left()
            )));
        }
        Ok(n)
    }

    fn raw_string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        self.take(len, &|| format!("{} ({len} bytes)", what()))
    }

    /// A name (key or tensor name): must be UTF-8.
    fn name(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let raw = self.raw_string(what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(self.err(format!("{} is not valid UTF-8 ({e}): {:?}", what(), String::from_utf8_lossy(raw)))),
        }
    }

    /// A string value: invalid UTF-8 is replaced (U+FFFD) rather than refused, since some
    /// tokenizers store raw byte tokens and the tensors do not depend on them.
    fn text(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        Ok(String::from_utf8_lossy(self.raw_string(what)?).into_owned())
    }

    fn numbers<T, const N: usize>(
        &mut self,
        n: u64,
        what: &dyn Fn() -> String,
        conv: fn([u8; N]) -> T,
    ) -> Result<Vec<T>> {
        let bytes = self.take(n * N as u64, what)?;
        Ok(bytes.chunks_exact(N).map(|c| conv(c.try_into().unwrap_or([0u8; N]))).collect())
    }

    fn bool(&mut self, what: &dyn Fn() -> String) -> Result<bool> {
        match self.array::<1>(what)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(format!("{} is a bool stored as {b} (must be 0 or 1)", what()))),
        }
    }

    fn value(&mut self, code: u32, depth: usize, what: &dyn Fn() -> String) -> Result<MetaValue> {
        Ok(match code {
            0 => MetaValue::U8(self.array::<1>(what)?[0]),
            1 => MetaValue::I8(self.array::<1>(what)?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(what)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(what)?)),
            4 => MetaValue::U32(self.u32(what)?),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(what)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(what)?)),
            7 => MetaValue::Bool(self.bool(what)?),
            8 => MetaValue::Str(self.text(what)?),
            9 => MetaValue::Array(self.array_value(depth, what)?),
            10 => MetaValue::U64(self.u64(what)?),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(what)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(what)?)),
            _ => return Err(self.err(format!("{} has unknown value type {code}", what()))),
        })
    }

    fn array_value(&mut self, depth: usize, what: &dyn Fn() -> String) -> Result<MetaArray> {
        if depth >= MAX_NESTING {
            return Err(self.err(format!("{} nests arrays more than {MAX_NESTING} deep", what())));
        }
        let code = self.u32(&|| format!("the element type of {}", what()))?;
        let Some((_, min)) = value_type(code) else {
            return Err(self.err(format!("{} has unknown element type {code}", what())));
        };
        let n = self.count(min, &|| format!("the element count of {}", what()))?;
        let each = |i: u64| move || format!("element {i} of {}", what());
        Ok(match code {
            0 => MetaArray::U8(self.numbers(n, what, |b: [u8; 1]| b[0])?),
            1 => MetaArray::I8(self.numbers(n, what, |b: [u8; 1]| b[0] as i8)?),
            2 => MetaArray::U16(self.numbers(n, what, u16::from_le_bytes)?),
            3 => MetaArray::I16(self.numbers(n, what, i16::from_le_bytes)?),
            4 => MetaArray::U32(self.numbers(n, what, u32::from_le_bytes)?),
            5 => MetaArray::I32(self.numbers(n, what, i32::from_le_bytes)?),
            6 => MetaArray::F32(self.numbers(n, what, f32::from_le_bytes)?),
            10 => MetaArray::U64(self.numbers(n, what, u64::from_le_bytes)?),
            11 => MetaArray::I64(self.numbers(n, what, i64::from_le_bytes)?),
            12 => MetaArray::F64(self.numbers(n, what, f64::from_le_bytes)?),
            7 => MetaArray::Bool((0..n).map(|i| self.bool(&each(i))).collect::<Result<_>>()?),
            8 => MetaArray::Str((0..n).map(|i| self.text(&each(i))).collect::<Result<_>>()?),
            _ => MetaArray::Array((0..n).map(|i| self.array_value(depth + 1, &each(i))).collect::<Result<_>>()?),
        })
    }
}

/// Parses the GGUF file `bytes`; `label` (the path) prefixes every error.
pub fn parse(bytes: &[u8], label: &str) -> Result<GgufLayout> {
    let mut r = Reader { buf: bytes, pos: 0, label };
    let magic = r.array::<4>(&|| "the magic number".into())?;
    if &magic != MAGIC {
        return Err(r.err(format!("it starts with {magic:02x?}, not the GGUF magic \"GGUF\"")));
    }
    let version = r.u32(&|| "the version".into())?;
    if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
        return Err(r.err("it is a big-endian GGUF file; only little-endian files are supported".into()));
    }
    if version != 2 && version != 3 {
        return Err(r.err(format!("GGUF version {version} is not supported (only versions 2 and 3)")));
    }
    // The smallest tensor info: empty name (8), rank (4), type (4), offset (8).
    let n_tensors = r.count(24, &|| "the tensor count".into())?;
    // The smallest metadata entry: empty key (8), type (4), a one-byte value.
    let n_kv = r.count(13, &|| "the metadata count".into())?;

    let mut metadata = Vec::new();
    let mut keys = HashSet::new();
    for i in 0..n_kv {
        let key = r.name(&|| format!("the key of metadata entry {i}"))?;
        let what = || format!("metadata {key:?}");
        let code = r.u32(&|| format!("the value type of {}", what()))?;
        let value = r.value(code, 0, &what)?;
        if !keys.insert(key.clone()) {
            return Err(r.err(format!("metadata key {key:?} appears twice")));
        }
        metadata.push((key, value));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, MetaValue::U32(a))) if a.is_power_of_two() => *a as u64,
        Some((_, v)) => {
            return Err(r.err(format!("general.alignment must be a UINT32 power of two, got {v:?}")));
        }
    };

    let mut infos = Vec::new();
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let name = r.name(&|| format!("the name of tensor info {i}"))?;
        let what = || format!("tensor {name:?}");
        let rank = r.u32(&|| format!("the rank of {}", what()))?;
        if rank > MAX_DIMS {
            return Err(r.err(format!("{} has {rank} dimensions (at most {MAX_DIMS})", what())));
        }
        let mut dims = Vec::with_capacity(rank as usize);
        for d in 0..rank {
            let n = r.u64(&|| format!("dimension {d} of {}", what()))?;
            if n > i64::MAX as u64 {
                return Err(r.err(format!("{} has dimension {d} of {n}, beyond what ggml can index", what())));
            }
            dims.push(n);
        }
        let code = r.u32(&|| format!("the GGML type of {}", what()))?;
        let ggml_type =
            GgmlType::from_code(code).ok_or_else(|| r.err(format!("{} has unknown GGML type {code}", what())))?;
        let offset = r.u64(&|| format!("the data offset of {}", what()))?;
        if !names.insert(name.clone()) {
            return Err(r.err(format!("tensor name {name:?} appears twice")));
        }
        infos.push((name, dims, ggml_type, offset));
    }

    let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    let mut tensors = Vec::with_capacity(infos.len());
    for (name, dims, ggml_type, offset) in infos {
        let nbytes = tensor_bytes(&dims, ggml_type).map_err(|m| r.err(format!("tensor {name:?} {m}")))?;
        if offset % alignment != 0 {
            return Err(r.err(format!(
                "tensor {name:?} has data offset {offset}, not a multiple of the alignment {alignment}"
            )));
        }
        let start = data_offset.checked_add(offset);
        if start.and_then(|s| s.checked_add(nbytes)).is_none_or(|end| end > file_len) {
            return Err(r.err(format!(
                "tensor {name:?} ({nbytes} bytes at data offset {offset}, file offset {}) extends past the end \
                 of the file ({file_len} bytes)",
                data_offset as u128 + offset as u128
            )));
        }
        let file_offset = (data_offset + offset) as usize;
        tensors.push(GgufTensor { name, dims, ggml_type, offset, file_offset, nbytes: nbytes as usize });
    }
    check_overlaps(&tensors).map_err(|m| r.err(m))?;
    Ok(GgufLayout { version, alignment, data_offset, metadata, tensors })
}

/// Bytes of a tensor of `dims` (ggml order), overflow-checked; rows must be whole blocks.
fn tensor_bytes(dims: &[u64], t: GgmlType) -> std::result::Result<u64, String> {
    let (elems, bytes) = t.block();
    let row = dims.first().copied().unwrap_or(1);
    if row % elems as u64 != 0 {
        return Err(format!("of type {} has rows of {row} elements, not a multiple of its block of {elems}", t.name()));
    }
    let mut blocks = row / elems as u64;
    for (i, d) in dims.iter().enumerate().skip(1) {
        blocks = blocks
            .checked_mul(*d)
            .ok_or_else(|| format!("has dimensions {dims:?} whose product overflows (at {i})"))?;
    }
    blocks.checked_mul(bytes as u64).ok_or_else(|| format!("of dimensions {dims:?} needs more than 2^64 bytes"))
}

fn check_overlaps(tensors: &[GgufTensor]) -> std::result::Result<(), String> {
    let mut spans: Vec<(usize, usize, &str)> = tensors
        .iter()
        .filter(|t| t.nbytes > 0)
        .map(|t| (t.file_offset, t.file_offset + t.nbytes, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, end_a, a), (start, end_b, b)) = (w[0], w[1]);
        if start < end_a {
            let end = end_a.min(end_b);
            return Err(format!("tensors {a:?} and {b:?} overlap (bytes {start}..{end} belong to both)"));
        }
    }
    Ok(())
}

/// A mapped GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    file: Arc<MappedFile>,
    layout: GgufLayout,
    index: HashMap<String, usize>,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = MappedFile::open(path)?;
        let layout = parse(file.bytes(), &path.display().to_string())?;
        let index = layout.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(GgufFile { file, layout, index })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn layout(&self) -> &GgufLayout {
        &self.layout
    }

    pub fn get(&self, name: &str) -> Option<&GgufTensor> {
        self.index.get(name).map(|i| &self.layout.tensors[*i])
    }

    /// The tensor as a host Buffer viewing the map: its own dtype for plain types, uint8
    /// `[..., bytes_per_row]` for block types.
    pub fn buffer(&self, name: &str) -> Result<Buffer> {
        let shown = self.file.path().display();
        let t = self.get(name).ok_or_else(|| Error::Value(format!("{shown}: no tensor named {name:?}")))?;
        let dtype = t.ggml_type.dtype().unwrap_or(DType::UInt8);
        self.file.view(t.file_offset, t.nbytes, dtype, &t.array_shape())
    }
}
