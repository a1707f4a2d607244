//! Weight files read in place: safetensors (through the `safetensors` crate) and GGUF v2/v3
//! (our own reader, gguf.rs). A file is mapped once; its tensors become host Buffers viewing
//! the map, so nothing is copied until a tensor moves to a device.
//!
//! Every byte of a file is untrusted: the parsers check each length, count, offset and size
//! against the file before using or allocating for it, and report damage as `Error::Value`
//! naming the file and the tensor or key. The parsers work on a plain byte slice (no I/O), which
//! is what the fuzz harness (tests/weights_fuzz.rs) drives.
//!
//! The map is private copy-on-write over a file opened read-only: a write through a Buffer
//! changes this process's copy of one page and never the file, where a read-only map would
//! make such a write a segmentation fault. MAP_NORESERVE keeps a map larger than RAM from being
//! refused by overcommit accounting. A file truncated by someone else while mapped is the one
//! hazard no check can cover (its pages then raise SIGBUS when touched).

pub mod gguf;
mod gguf_types;
mod progress;
pub mod safetensors;

use crate::cpu::quant::Decode;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};

use crate::{Buffer, DType, Device, Error, Result};

pub use gguf::{GgmlType, GgufFile, GgufLayout, GgufTensor, MetaArray, MetaValue};
pub use progress::{Progress, progress_enabled};
pub use safetensors::{SafetensorsFile, StTensor};

/// A weight file mapped into memory. Buffers made by `view` keep it alive.
pub struct MappedFile {
    path: PathBuf,
    map: MmapMut,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedFile({}, {} bytes)", self.path.display(), self.map.len())
    }
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<Arc<MappedFile>> {
        let shown = path.display();
        let file = File::open(path).map_err(|e| Error::Value(format!("cannot open {shown}: {e}")))?;
        let meta = file.metadata().map_err(|e| Error::Value(format!("cannot read {shown}: {e}")))?;
        if !meta.is_file() {
            return Err(Error::Value(format!("{shown} is not a regular file")));
        }
        if meta.len() > isize::MAX as u64 {
            return Err(Error::Value(format!("{shown} is larger than the address space")));
        }
        // SAFETY: the map is private, so our writes never reach the file; the remaining hazard
        // (another process truncating the file) is described in the module comment.
        let map = unsafe { MmapOptions::new().no_reserve_swap().map_copy(&file) }
            .map_err(|e| Error::Value(format!("cannot map {shown} into memory: {e}")))?;
        // Tensors are read front to back when they move to a device; a hint, so errors are moot.
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Arc::new(MappedFile { path: path.to_path_buf(), map }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The file's bytes, for parsing (before any Buffer views them).
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// A contiguous host Buffer over `nbytes` bytes at `offset`. The range must have been
    /// checked against the file; it is checked again here. A range not aligned for `dtype`
    /// (possible in a safetensors file whose earlier tensors have odd sizes) is copied into an
    /// aligned buffer, since the kernels read elements through typed pointers.
    pub fn view(self: &Arc<Self>, offset: usize, nbytes: usize, dtype: DType, shape: &[usize]) -> Result<Buffer> {
        let shown = self.path.display();
        let end = offset.checked_add(nbytes).filter(|e| *e <= self.map.len()).ok_or_else(|| {
            Error::Value(format!("{shown}: bytes {offset}..+{nbytes} lie outside the file ({} bytes)", self.map.len()))
        })?;
        let elems = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
        if elems.and_then(|n| n.checked_mul(dtype.size_in_bytes())) != Some(nbytes) {
            return Err(Error::Value(format!("{shown}: {nbytes} bytes do not hold {dtype} {shape:?}")));
        }
        let addr = self.map.as_ptr() as u64 + offset as u64;
        let item = dtype.size_in_bytes();
        if !addr.is_multiple_of(item as u64) {
            let dims: Vec<i64> = shape.iter().map(|d| *d as i64).collect();
            let copy = Buffer::empty(dtype, &dims, &Device::Cpu)?;
            // SAFETY: the source range lies in the map (checked above); the fresh buffer holds
            // exactly nbytes bytes.
            unsafe { std::ptr::copy_nonoverlapping(self.map[offset..end].as_ptr(), copy.addr() as *mut u8, nbytes) };
            return Ok(copy);
        }
        let mut strides = vec![0isize; shape.len()];
        let mut acc = item as isize;
        for (s, d) in strides.iter_mut().zip(shape).rev() {
            *s = acc;
            acc = acc.saturating_mul((*d).max(1) as isize);
        }
        let keep: crate::External = Box::new(self.clone());
        // SAFETY: addr..addr+nbytes lies inside the map, which `keep` holds alive.
        unsafe { Buffer::from_external(addr, dtype, shape, &strides, Device::Cpu, keep) }
    }
}

/// Elements per block and bytes per block of a GGUF block encoding, by the name
/// `max.graph.quantization.QuantizationEncoding` gives it.
pub fn encoding_block(name: &str) -> Option<(usize, usize)> {
    max_graph::ops::quant::Encoding::parse(name).map(|e| e.block())
}

/// Decodes a host uint8 buffer of `encoding` blocks, `[..., bytes_per_row]`, into float32
/// `[..., elements_per_row]` (the values ops.dequantize produces).
pub fn dequantize(raw: &Buffer, encoding: &str) -> Result<Buffer> {
    let enc = max_graph::ops::quant::Encoding::parse(encoding)
        .ok_or_else(|| Error::Value(format!("dequantize: {encoding:?} is not a block encoding")))?;
    let (elems, bytes) = enc.block();
    if raw.dtype() != DType::UInt8 || !raw.device().is_host() || raw.rank() == 0 {
        return Err(Error::Value(format!(
            "dequantize: expected a host uint8 buffer of rank >= 1, got {} of rank {} on {}",
            raw.dtype(),
            raw.rank(),
            raw.device().label()
        )));
    }
    let row = raw.shape()[raw.rank() - 1];
    if !row.is_multiple_of(bytes) {
        return Err(Error::Value(format!(
            "dequantize: rows of {row} bytes are not a whole number of {encoding} blocks ({bytes} bytes)"
        )));
    }
    let src = if raw.is_contiguous() { raw.clone() } else { raw.contiguous()? };
    let mut shape: Vec<i64> = src.shape().iter().map(|d| *d as i64).collect();
    let last = shape.len() - 1;
    shape[last] = (row / bytes * elems) as i64;
    let out = Buffer::empty(DType::Float32, &shape, &Device::Cpu)?;
    if src.nbytes() > 0 {
        // SAFETY: both buffers are contiguous host memory of the sizes computed from their
        // shapes; the output is fresh and does not overlap the input.
        let (input, output) = unsafe {
            (
                std::slice::from_raw_parts(src.addr() as *const u8, src.nbytes()),
                std::slice::from_raw_parts_mut(out.addr() as *mut f32, out.num_elements()),
            )
        };
        enc.decode_blocks(input, output);
    }
    Ok(out)
}
