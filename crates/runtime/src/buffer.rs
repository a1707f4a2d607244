//! Buffer: a typed, shaped, possibly strided view of device memory, bound to a stream.

use std::sync::Arc;

use max_graph::DType;

use crate::index::{self, IndexItem, View};
use crate::storage::{External, Storage};
use crate::{Device, Error, Result, Scalar, Stream, cpu, transfer};

#[derive(Clone, Debug)]
pub struct Buffer {
    storage: Arc<Storage>,
    dtype: DType,
    shape: Vec<usize>,
    /// In elements; negative after a reversing slice, 0 for broadcast (new) axes.
    strides: Vec<isize>,
    /// Bytes from the start of `storage` to element [0, 0, ...].
    offset: usize,
    stream: Stream,
}

fn fmt_dims<T: std::fmt::Display>(dims: &[T]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("({}{})", parts.join(", "), if parts.len() == 1 { "," } else { "" })
}

/// Validates a requested shape; returns the extents and the byte size.
pub(crate) fn checked_shape(op: &str, dims: &[i64], dtype: DType) -> Result<(Vec<usize>, usize)> {
    let mut bytes = dtype.size_in_bytes() as u128;
    for &d in dims {
        if d < 0 {
            return Err(Error::Value(format!("{op}: shape {} has a negative dimension {d}", fmt_dims(dims))));
        }
        bytes = bytes.saturating_mul(d as u128);
    }
    if bytes > isize::MAX as u128 {
        return Err(Error::Value(format!(
            "{op}: shape {} of {dtype} needs {bytes} bytes, more than any address space holds",
            fmt_dims(dims)
        )));
    }
    Ok((dims.iter().map(|d| *d as usize).collect(), bytes as usize))
}

fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (s, d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= (*d).max(1) as isize;
    }
    strides
}

impl Buffer {
    fn whole(storage: Storage, dtype: DType, shape: Vec<usize>, stream: Stream) -> Buffer {
        let strides = contiguous_strides(&shape);
        Buffer { storage: Arc::new(storage), dtype, shape, strides, offset: 0, stream }
    }

    /// A new buffer on the device of `stream`: zero-filled on the host, uninitialised on a GPU.
    pub fn empty_on(dtype: DType, shape: &[i64], stream: &Stream) -> Result<Buffer> {
        let (shape, nbytes) = checked_shape("Buffer", shape, dtype)?;
        let storage = match stream {
            Stream::Host => Storage::host(nbytes)?,
            Stream::Cuda { device, stream: s } => Storage::cuda(nbytes, device, s)?,
        };
        Ok(Buffer::whole(storage, dtype, shape, stream.clone()))
    }

    /// A result buffer for the engine: like `empty`, but host memory may be recycled from an
    /// earlier result and hold its values (every kernel writes all of its outputs).
    pub fn for_result(dtype: DType, shape: &[i64], device: &Device) -> Result<Buffer> {
        if !device.is_host() {
            return Buffer::empty(dtype, shape, device);
        }
        let (shape, nbytes) = checked_shape("Buffer", shape, dtype)?;
        Ok(Buffer::whole(Storage::host_recycled(nbytes)?, dtype, shape, Stream::Host))
    }

    pub fn empty(dtype: DType, shape: &[i64], device: &Device) -> Result<Buffer> {
        Buffer::empty_on(dtype, shape, &Stream::default_for(device))
    }

    /// Page-locked host memory (needs a CUDA driver); copies from it to a GPU run asynchronously.
    pub fn pinned(dtype: DType, shape: &[i64], gpu: &Device) -> Result<Buffer> {
        let Some(dev) = gpu.cuda() else {
            return Err(Error::Value("Buffer(pinned=True) needs an accelerator to register the memory with".into()));
        };
        let (shape, nbytes) = checked_shape("Buffer", shape, dtype)?;
        Ok(Buffer::whole(Storage::pinned(nbytes, dev)?, dtype, shape, Stream::Host))
    }

    pub fn zeros(dtype: DType, shape: &[i64], device: &Device) -> Result<Buffer> {
        let b = Buffer::empty(dtype, shape, device)?;
        if !device.is_host() {
            b.fill_bits(0)?;
        }
        Ok(b)
    }

    /// A buffer over memory someone else owns. `byte_strides` may be negative; the range the
    /// view reaches is computed from them, so `addr` is element [0, ...].
    ///
    /// # Safety
    /// Every element the view reaches must be valid memory on `device` while `keep` lives.
    pub unsafe fn from_external(
        addr: u64,
        dtype: DType,
        shape: &[usize],
        byte_strides: &[isize],
        device: Device,
        keep: External,
    ) -> Result<Buffer> {
        let item = dtype.size_in_bytes() as isize;
        if shape.len() != byte_strides.len() {
            return Err(Error::Value("external array: shape and strides differ in length".into()));
        }
        if byte_strides.iter().any(|s| s % item != 0) {
            return Err(Error::Value(format!(
                "external array strides {byte_strides:?} are not multiples of the {dtype} element size {item}"
            )));
        }
        let (mut lo, mut hi) = (0isize, 0isize);
        let empty = shape.contains(&0);
        if !empty {
            for (&d, &s) in shape.iter().zip(byte_strides) {
                let reach = (d as isize - 1) * s;
                if reach < 0 { lo += reach } else { hi += reach }
            }
        }
        let nbytes = if empty { 0 } else { (hi - lo + item) as usize };
        let base = (addr as i128 + lo as i128) as u64;
        let stream = Stream::default_for(&device);
        // SAFETY: forwarded to the caller.
        let storage = unsafe { Storage::external(base, nbytes, device, keep) };
        Ok(Buffer {
            storage: Arc::new(storage),
            dtype,
            shape: shape.to_vec(),
            strides: byte_strides.iter().map(|s| s / item).collect(),
            offset: (-lo) as usize,
            stream,
        })
    }

    /// A contiguous tensor at `offset` bytes inside `storage` (an execution arena).
    pub(crate) fn in_storage(
        storage: &Arc<Storage>,
        offset: usize,
        dtype: DType,
        shape: Vec<usize>,
        stream: Stream,
    ) -> Buffer {
        let strides = contiguous_strides(&shape);
        Buffer { storage: storage.clone(), dtype, shape, strides, offset, stream }
    }

    /// The same memory with another shape (the buffer must be contiguous).
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Buffer> {
        if !self.is_contiguous() || shape.iter().product::<usize>() != self.num_elements() {
            return Err(Error::Value(format!("cannot view {} as shape {}", fmt_dims(&self.shape), fmt_dims(&shape))));
        }
        let strides = contiguous_strides(&shape);
        Ok(Buffer { shape, strides, ..self.clone() })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes the elements occupy when packed.
    pub fn nbytes(&self) -> usize {
        self.num_elements() * self.dtype.size_in_bytes()
    }
    pub fn device(&self) -> &Device {
        self.storage.device()
    }
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
    /// A form derived from this buffer's bytes, made once by `make` and kept with its memory,
    /// when the memory is frozen (a loaded model's constants and weights); None otherwise.
    pub fn derived<T: std::any::Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<Arc<T>> {
        self.storage.derived(self.offset, self.nbytes(), make)
    }

    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }
    pub fn is_pinned(&self) -> bool {
        self.storage.is_pinned()
    }
    /// Address of element [0, ...] (host pointer or device pointer).
    pub fn addr(&self) -> u64 {
        self.storage.addr() + self.offset as u64
    }

    /// C-contiguous with non-negative strides (extent-1 and empty dimensions are ignored).
    pub fn is_contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        let mut expected = 1isize;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d as isize;
        }
        true
    }

    /// The same memory, with work ordered on `stream` (which must be on the same device).
    pub fn with_stream(&self, stream: &Stream) -> Result<Buffer> {
        if stream.device() != *self.device() {
            return Err(Error::Value(format!(
                "a buffer on {} cannot be bound to a stream of {}",
                self.device().label(),
                stream.device().label()
            )));
        }
        Ok(Buffer { stream: stream.clone(), ..self.clone() })
    }

    /// numpy basic indexing; the result shares memory.
    pub fn index(&self, items: &[IndexItem]) -> Result<Buffer> {
        let view = View { shape: self.shape.clone(), strides: self.strides.clone(), offset: self.offset as isize };
        let v = index::apply(&view, items, self.dtype.size_in_bytes())?;
        Ok(Buffer { shape: v.shape, strides: v.strides, offset: v.offset as usize, ..self.clone() })
    }

    /// Reinterprets the bytes of a contiguous buffer as another dtype and shape. Without a
    /// shape, the last dimension absorbs the change of element size.
    pub fn view(&self, dtype: DType, shape: Option<&[i64]>) -> Result<Buffer> {
        if !self.is_contiguous() {
            return Err(Error::Value("Buffer.view needs a contiguous buffer; call .contiguous() first".into()));
        }
        let (new_shape, _) = match shape {
            Some(dims) => {
                let (s, bytes) = checked_shape("Buffer.view", dims, dtype)?;
                if bytes != self.nbytes() {
                    return Err(Error::Value(format!(
                        "Buffer.view: {dtype} {} has {bytes} bytes but the buffer ({} {}) has {}",
                        fmt_dims(dims),
                        self.dtype,
                        fmt_dims(&self.shape),
                        self.nbytes()
                    )));
                }
                (s, bytes)
            }
            None => {
                let (old, new) = (self.dtype.size_in_bytes(), dtype.size_in_bytes());
                let mut s = self.shape.clone();
                let fits = match s.last_mut() {
                    Some(last) if (*last * old) % new == 0 => {
                        *last = *last * old / new;
                        true
                    }
                    _ => old == new,
                };
                if !fits {
                    return Err(Error::Value(format!(
                        "Buffer.view: cannot view {} {} as {dtype} without a shape: the last \
                         dimension's bytes are not a multiple of {new}",
                        self.dtype,
                        fmt_dims(&self.shape)
                    )));
                }
                let bytes = s.iter().product::<usize>() * new;
                (s, bytes)
            }
        };
        let strides = contiguous_strides(&new_shape);
        Ok(Buffer { dtype, shape: new_shape, strides, ..self.clone() })
    }

    /// Writes one bit pattern into every element of this view.
    pub fn fill_bits(&self, bits: u64) -> Result<()> {
        let width = self.dtype.size_in_bytes();
        match &self.stream {
            Stream::Host => {
                let pattern = &bits.to_le_bytes()[..width];
                // SAFETY: the view lies inside host storage this buffer keeps alive.
                unsafe { cpu::copy::fill_strided(self.addr() as *mut u8, pattern, &self.shape, &self.strides) };
                Ok(())
            }
            Stream::Cuda { device, stream } => {
                if !self.is_contiguous() {
                    return Err(Error::Value(
                        "assigning to a non-contiguous region of a GPU buffer is not supported; \
                         assign on the host or to a contiguous region"
                            .into(),
                    ));
                }
                device.bind()?;
                max_kernels_cuda::launch::fill(stream, self.addr(), self.num_elements() as u64, width, bits)?;
                Ok(())
            }
        }
    }

    /// Writes `value` (converted with the cast rules) into every element of this view.
    pub fn fill(&self, value: Scalar) -> Result<()> {
        self.fill_bits(value.to_bits(self.dtype)?)
    }

    /// The single element of a one-element buffer.
    pub fn item(&self) -> Result<Scalar> {
        if self.num_elements() != 1 {
            return Err(Error::Value(format!(
                "item() needs a buffer with exactly one element, but shape {} has {}",
                fmt_dims(&self.shape),
                self.num_elements()
            )));
        }
        let host = self.to(&Device::Cpu)?;
        let mut bytes = [0u8; 8];
        // SAFETY: the host buffer holds one element of size_in_bytes <= 8 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(host.addr() as *const u8, bytes.as_mut_ptr(), self.dtype.size_in_bytes())
        };
        Ok(Scalar::from_bits(self.dtype, u64::from_le_bytes(bytes)))
    }

    /// A contiguous deep copy on the same device and stream.
    pub fn contiguous(&self) -> Result<Buffer> {
        self.copy_to_stream(&self.stream)
    }

    /// A contiguous deep copy on `device` (its default stream).
    pub fn copy_to(&self, device: &Device) -> Result<Buffer> {
        self.copy_to_stream(&Stream::default_for(device))
    }

    /// A contiguous deep copy on the device of `stream`, ordered on it.
    pub fn copy_to_stream(&self, stream: &Stream) -> Result<Buffer> {
        let shape: Vec<i64> = self.shape.iter().map(|d| *d as i64).collect();
        let out = Buffer::empty_on(self.dtype, &shape, stream)?;
        transfer::copy_into(self, &out)?;
        Ok(out)
    }

    /// This buffer if it already lives on `device`, else a copy there.
    pub fn to(&self, device: &Device) -> Result<Buffer> {
        if self.device() == device { Ok(self.clone()) } else { self.copy_to(device) }
    }

    /// Copies `src` into this buffer: both contiguous, same dtype and element count.
    pub fn inplace_copy_from(&self, src: &Buffer) -> Result<()> {
        if src.dtype != self.dtype || src.num_elements() != self.num_elements() {
            return Err(Error::Value(format!(
                "inplace_copy_from: cannot copy {} {} into {} {}: buffers must have the same \
                 dtype and number of elements",
                src.dtype,
                fmt_dims(&src.shape),
                self.dtype,
                fmt_dims(&self.shape)
            )));
        }
        if !self.is_contiguous() || !src.is_contiguous() {
            return Err(Error::Value("inplace_copy_from: both buffers must be contiguous".into()));
        }
        if Arc::ptr_eq(&self.storage, &src.storage) {
            let tmp = src.contiguous()?;
            return transfer::copy_into(&tmp, self);
        }
        transfer::copy_into(src, self)
    }

    /// A new contiguous buffer with every element converted to `dtype`, on the same device.
    pub fn cast(&self, dtype: DType) -> Result<Buffer> {
        let src = if self.is_contiguous() { self.clone() } else { self.contiguous()? };
        let shape: Vec<i64> = self.shape.iter().map(|d| *d as i64).collect();
        let out = Buffer::empty_on(dtype, &shape, &self.stream)?;
        match &self.stream {
            Stream::Host => {
                // SAFETY: both buffers are contiguous host memory of the sizes given.
                let (s, d) = unsafe {
                    (
                        std::slice::from_raw_parts(src.addr() as *const u8, src.nbytes()),
                        std::slice::from_raw_parts_mut(out.addr() as *mut u8, out.nbytes()),
                    )
                };
                cpu::cast::cast_slice(s, self.dtype, d, dtype)?;
            }
            Stream::Cuda { device, stream } => {
                device.bind()?;
                max_kernels_cuda::launch::cast(
                    stream,
                    src.addr(),
                    self.dtype,
                    out.addr(),
                    dtype,
                    self.num_elements() as u64,
                )?;
            }
        }
        Ok(out)
    }

    /// Blocks until work queued on this buffer's stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }

    /// Notes that a DLPack consumer may use this memory on a stream we do not control.
    pub fn mark_exported(&self) {
        self.storage.mark_exported();
    }
}
