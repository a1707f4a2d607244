//! Safetensors files: an 8-byte little-endian header length, a JSON header naming each tensor's
//! dtype, shape and byte range in the data section, then the data section.
//!
//! The `safetensors` crate parses and validates the header (UTF-8, JSON, a 100 MB cap, ranges
//! that tile the data section exactly in offset order, sizes that match dtype and shape with
//! overflow checks). On top of that we check the header length against the file before the
//! crate sees it (for a clearer message), map each dtype to ours, and keep only names, dtypes,
//! shapes and absolute byte ranges: the tensors stay in the map.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors};

use super::MappedFile;
use crate::{Buffer, DType, Error, Result};

/// One tensor of a safetensors file: where its bytes are in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensor {
    pub name: String,
    /// The file's dtype name (`"F32"`, `"BF16"`, ...).
    pub st_dtype: String,
    /// Ours, or None for a safetensors dtype MAX has no layout for (packed F4/F6, C64).
    pub dtype: Option<DType>,
    pub shape: Vec<usize>,
    /// Absolute byte offset in the file.
    pub offset: usize,
    pub nbytes: usize,
}

/// The parsed header of a safetensors file.
#[derive(Clone, Debug, Default)]
pub struct StLayout {
    /// In file (offset) order.
    pub tensors: Vec<StTensor>,
    /// The `__metadata__` strings, sorted by key.
    pub metadata: Vec<(String, String)>,
}

fn dtype_of(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::UInt8,
        Dtype::I8 => DType::Int8,
        Dtype::U16 => DType::UInt16,
        Dtype::I16 => DType::Int16,
        Dtype::U32 => DType::UInt32,
        Dtype::I32 => DType::Int32,
        Dtype::U64 => DType::UInt64,
        Dtype::I64 => DType::Int64,
        Dtype::F16 => DType::Float16,
        Dtype::BF16 => DType::BFloat16,
        Dtype::F32 => DType::Float32,
        Dtype::F64 => DType::Float64,
        Dtype::F8_E5M2 => DType::Float8E5m2,
        Dtype::F8_E4M3 => DType::Float8E4m3fn,
        Dtype::F8_E8M0 => DType::Float8E8m0fnu,
        Dtype::F8_E4M3FNUZ => DType::Float8E4m3fnuz,
        Dtype::F8_E5M2FNUZ => DType::Float8E5m2fnuz,
        // F4 and F6 pack several elements per byte, where MAX's float4/float6 take a byte each.
        _ => return None,
    })
}

fn describe(e: SafeTensorError) -> String {
    match e {
        SafeTensorError::InvalidOffset(name) => format!(
            "tensor {name:?} has a byte range that does not follow the previous tensor's \
             (ranges must tile the data section in order, without gaps or overlaps)"
        ),
        SafeTensorError::TensorInvalidInfo => {
            "a tensor's byte range does not match the size of its dtype and shape".to_string()
        }
        SafeTensorError::MetadataIncompleteBuffer => {
            "the tensors' byte ranges do not end exactly at the end of the file".to_string()
        }
        SafeTensorError::ValidationOverflow => "a tensor's shape overflows when multiplied out".to_string(),
        SafeTensorError::MisalignedSlice => "a tensor of a sub-byte dtype does not fill whole bytes".to_string(),
        other => format!("{other}"),
    }
}

/// Parses the header of the safetensors file `bytes`; `label` (the path) prefixes errors.
pub fn parse(bytes: &[u8], label: &str) -> Result<StLayout> {
    let bad = |msg: String| Error::Value(format!("{label}: not a valid safetensors file: {msg}"));
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(bad(format!("it has {} bytes, fewer than the 8 of the header length", bytes.len())));
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(le);
    let room = (bytes.len() - 8) as u64;
    if n > room {
        return Err(bad(format!("the header length {n} is larger than the {room} bytes after it")));
    }
    let (header_len, meta) = SafeTensors::read_metadata(bytes).map_err(|e| bad(describe(e)))?;
    let data_start = 8 + header_len;
    let mut tensors = Vec::new();
    for name in meta.offset_keys() {
        let Some(info) = meta.info(&name) else { continue };
        let (begin, end) = info.data_offsets;
        // read_metadata checked that the ranges tile the data section up to the file's end.
        let offset = data_start
            .checked_add(begin)
            .filter(|o| end >= begin && o.checked_add(end - begin).is_some_and(|e| e <= bytes.len()))
            .ok_or_else(|| bad(format!("tensor {name:?} has bytes {begin}..{end} outside the file")))?;
        tensors.push(StTensor {
            st_dtype: format!("{:?}", info.dtype),
            dtype: dtype_of(info.dtype),
            shape: info.shape.clone(),
            offset,
            nbytes: end - begin,
            name,
        });
    }
    let mut metadata: Vec<(String, String)> =
        meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
    metadata.sort();
    Ok(StLayout { tensors, metadata })
}

/// A mapped safetensors file.
#[derive(Debug)]
pub struct SafetensorsFile {
    file: Arc<MappedFile>,
    layout: StLayout,
    index: HashMap<String, usize>,
}

impl SafetensorsFile {
    pub fn open(path: &Path) -> Result<SafetensorsFile> {
        let file = MappedFile::open(path)?;
        let layout = parse(file.bytes(), &path.display().to_string())?;
        let index = layout.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        Ok(SafetensorsFile { file, layout, index })
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    pub fn tensors(&self) -> &[StTensor] {
        &self.layout.tensors
    }

    pub fn metadata(&self) -> &[(String, String)] {
        &self.layout.metadata
    }

    pub fn get(&self, name: &str) -> Option<&StTensor> {
        self.index.get(name).map(|i| &self.layout.tensors[*i])
    }

    /// The tensor as a host Buffer viewing the map.
    pub fn buffer(&self, name: &str) -> Result<Buffer> {
        let shown = self.file.path().display();
        let t = self.get(name).ok_or_else(|| Error::Value(format!("{shown}: no tensor named {name:?}")))?;
        let dtype = t.dtype.ok_or_else(|| {
            Error::Value(format!(
                "{shown}: tensor {name:?} has dtype {}, which has no max.dtype.DType equivalent",
                t.st_dtype
            ))
        })?;
        self.file.view(t.offset, t.nbytes, dtype, &t.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn parses_names_dtypes_and_absolute_ranges() {
        let h = r#"{"__metadata__":{"k":"v"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        let bytes = file(h, &[0u8; 12]);
        let l = parse(&bytes, "t.safetensors").unwrap();
        let names: Vec<&str> = l.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(l.tensors[1].offset, 8 + h.len() + 4);
        assert_eq!((l.tensors[1].dtype, l.tensors[1].nbytes), (Some(DType::Float32), 8));
        assert_eq!(l.metadata, [("k".to_string(), "v".to_string())]);
    }

    #[test]
    fn damaged_headers_are_value_errors_naming_the_file() {
        let good = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![1, 2, 3], "fewer than the 8"),
            (u64::MAX.to_le_bytes().to_vec(), "larger than"),
            (file(good, &[0u8; 7]), "end exactly"),
            (file(r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, &[0u8; 8]), "does not match"),
            (file(r#"{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,8]}}"#, &[0u8; 8]), "JSON"),
            (file("{\"a\": 1", &[]), "JSON"),
            (
                file(
                    r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
                    &[0u8; 8],
                ),
                "does not follow",
            ),
            (
                file(r#"{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#, &[0u8; 8]),
                "overflow",
            ),
        ];
        for (bytes, want) in cases {
            let e = parse(&bytes, "bad.safetensors").unwrap_err().to_string();
            assert!(e.starts_with("bad.safetensors: "), "{e}");
            assert!(e.contains(want), "{e} (wanted {want:?})");
        }
        let mut bad_utf8 = file(good, &[0u8; 8]);
        bad_utf8[10] = 0xff;
        assert!(parse(&bad_utf8, "u.safetensors").unwrap_err().to_string().contains("UTF-8"));
    }

    #[test]
    fn packed_dtypes_have_no_dtype() {
        let h = r#"{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}"#;
        let l = parse(&file(h, &[0u8; 2]), "f4").unwrap();
        assert_eq!((l.tensors[0].dtype, l.tensors[0].st_dtype.as_str()), (None, "F4"));
    }
}
