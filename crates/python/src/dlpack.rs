//! DLPack, both directions: `Buffer.__dlpack__` exports a capsule (legacy `dltensor` or
//! versioned `dltensor_versioned`, DLPack 1.1) that shares memory, and `Buffer.from_dlpack`
//! imports any producer's capsule without copying. The C structs are written out here by hand:
//! they are a small, frozen ABI (dlpack.h) and no maintained crate matches this PyO3 version.

use std::ffi::{CStr, c_void};

use max_graph::DType;
use max_runtime::{Buffer, Device};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{IntoPyObjectExt, ffi};

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;
pub const KDL_CUDA_HOST: i32 = 3;
const FLAG_READ_ONLY: u64 = 1;
const LEGACY: &CStr = c"dltensor";
const LEGACY_USED: &CStr = c"used_dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
const VERSIONED_USED: &CStr = c"used_dltensor_versioned";

/// DLPack's (code, bits) for a dtype; float4/float6 are stored one per byte here, which DLPack
/// (packed sub-byte types) cannot describe.
pub fn dl_dtype(dtype: DType) -> Option<DLDataType> {
    let bits = (dtype.size_in_bytes() * 8) as u8;
    let code = match dtype {
        DType::Bool => 6,
        d if d.is_signed_integral() => 0,
        d if d.is_unsigned_integral() => 1,
        DType::Float16 | DType::Float32 | DType::Float64 => 2,
        DType::BFloat16 => 4,
        DType::Float8E4m3fn => 10,
        DType::Float8E4m3fnuz => 11,
        DType::Float8E5m2 => 12,
        DType::Float8E5m2fnuz => 13,
        DType::Float8E8m0fnu => 14,
        _ => return None,
    };
    Some(DLDataType { code, bits, lanes: 1 })
}

fn dtype_from_dl(t: DLDataType) -> PyResult<DType> {
    let d = match (t.code, t.bits, t.lanes) {
        (0, 8, 1) => DType::Int8,
        (0, 16, 1) => DType::Int16,
        (0, 32, 1) => DType::Int32,
        (0, 64, 1) => DType::Int64,
        (1, 8, 1) => DType::UInt8,
        (1, 16, 1) => DType::UInt16,
        (1, 32, 1) => DType::UInt32,
        (1, 64, 1) => DType::UInt64,
        (2, 16, 1) => DType::Float16,
        (2, 32, 1) => DType::Float32,
        (2, 64, 1) => DType::Float64,
        (4, 16, 1) => DType::BFloat16,
        (6, 8, 1) => DType::Bool,
        (10, 8, 1) => DType::Float8E4m3fn,
        (11, 8, 1) => DType::Float8E4m3fnuz,
        (12, 8, 1) => DType::Float8E5m2,
        (13, 8, 1) => DType::Float8E5m2fnuz,
        (14, 8, 1) => DType::Float8E8m0fnu,
        (code, bits, lanes) => {
            let kind = match code {
                5 => "complex",
                3 => "opaque handle",
                _ => "unknown",
            };
            return Err(PyTypeError::new_err(format!(
                "from_dlpack: unsupported DLPack dtype (code {code} = {kind}, {bits} bits, {lanes} lanes)"
            )));
        }
    };
    Ok(d)
}

/// What an exported capsule keeps alive: the buffer and the shape/strides arrays it points at.
struct ExportCtx {
    _buffer: Buffer,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: both boxes were leaked by `export` and are reclaimed exactly once, here.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx as *mut ExportCtx));
    }
}

unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as in delete_legacy.
    unsafe {
        let t = Box::from_raw(t);
        drop(Box::from_raw(t.manager_ctx as *mut ExportCtx));
    }
}

/// Runs when Python frees the capsule: if no consumer took the tensor, free it here.
unsafe extern "C" fn capsule_destructor(cap: *mut ffi::PyObject) {
    // SAFETY: called by Python with a live capsule; names are checked before any cast.
    unsafe {
        if ffi::PyCapsule_IsValid(cap, LEGACY.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, LEGACY.as_ptr()) as *mut DLManagedTensor;
            if let Some(del) = p.as_ref().and_then(|t| t.deleter) {
                del(p);
            }
        } else if ffi::PyCapsule_IsValid(cap, VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(cap, VERSIONED.as_ptr()) as *mut DLManagedTensorVersioned;
            if let Some(del) = p.as_ref().and_then(|t| t.deleter) {
                del(p);
            }
        }
    }
}

pub fn dl_device(device: &Device) -> DLDevice {
    match device {
        Device::Cpu => DLDevice { device_type: KDL_CPU, device_id: 0 },
        Device::Cuda(d) => DLDevice { device_type: KDL_CUDA, device_id: d.ordinal as i32 },
    }
}

/// A capsule sharing `buf`'s memory.
pub fn export(py: Python<'_>, buf: &Buffer, versioned: bool) -> PyResult<Py<PyAny>> {
    let dtype = dl_dtype(buf.dtype()).ok_or_else(|| {
        PyBufferError::new_err(format!(
            "DLPack cannot describe {} stored one element per byte; export .view(DType.uint8)",
            buf.dtype()
        ))
    })?;
    let mut ctx = Box::new(ExportCtx {
        _buffer: buf.clone(),
        shape: buf.shape().iter().map(|d| *d as i64).collect(),
        strides: buf.strides().iter().map(|s| *s as i64).collect(),
    });
    let tensor = DLTensor {
        data: buf.addr() as *mut c_void,
        device: dl_device(buf.device()),
        ndim: buf.rank() as i32,
        dtype,
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let manager_ctx = Box::into_raw(ctx) as *mut c_void;
    // SAFETY: the capsule owns the leaked tensor; its destructor or a consumer frees it once.
    unsafe {
        let (ptr, name, free): (*mut c_void, &CStr, Box<dyn FnOnce()>) = if versioned {
            let t = Box::into_raw(Box::new(DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 1 },
                manager_ctx,
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor: tensor,
            }));
            (t as *mut c_void, VERSIONED, Box::new(move || delete_versioned(t)))
        } else {
            let t = Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx,
                deleter: Some(delete_legacy),
            }));
            (t as *mut c_void, LEGACY, Box::new(move || delete_legacy(t)))
        };
        let cap = ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor));
        if cap.is_null() {
            free();
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}

/// Keeps an imported tensor alive; calls the producer's deleter when the storage drops.
struct Imported {
    legacy: *mut DLManagedTensor,
    versioned: *mut DLManagedTensorVersioned,
}

// SAFETY: DLPack requires deleters to be callable from any thread (numpy and torch take the
// GIL themselves where they need it).
unsafe impl Send for Imported {}
unsafe impl Sync for Imported {}

impl Drop for Imported {
    fn drop(&mut self) {
        // SAFETY: the pointers came from a consumed capsule; each deleter runs once.
        unsafe {
            if let Some(del) = self.legacy.as_ref().and_then(|t| t.deleter) {
                del(self.legacy);
            }
            if let Some(del) = self.versioned.as_ref().and_then(|t| t.deleter) {
                del(self.versioned);
            }
        }
    }
}

/// Checks one DLTensor and wraps its memory as a Buffer (no copy).
///
/// # Safety
/// `t` must point at the DLTensor inside the managed tensor `keep` owns.
unsafe fn wrap(t: &DLTensor, keep: Imported, read_only: bool) -> PyResult<(Buffer, bool)> {
    let dtype = dtype_from_dl(t.dtype)?;
    if !(0..=64).contains(&t.ndim) || (t.ndim > 0 && t.shape.is_null()) {
        return Err(PyValueError::new_err(format!("from_dlpack: invalid tensor rank {}", t.ndim)));
    }
    let rank = t.ndim as usize;
    // SAFETY: the producer promises `ndim` entries behind shape (and strides, when present).
    let shape: &[i64] = if rank == 0 { &[] } else { unsafe { std::slice::from_raw_parts(t.shape, rank) } };
    if shape.iter().any(|d| *d < 0) {
        return Err(PyValueError::new_err(format!("from_dlpack: negative extent in shape {shape:?}")));
    }
    let shape: Vec<usize> = shape.iter().map(|d| *d as usize).collect();
    let item = dtype.size_in_bytes() as isize;
    let strides: Vec<isize> = if t.strides.is_null() || rank == 0 {
        let mut acc = item;
        let mut s = vec![0isize; rank];
        for (st, d) in s.iter_mut().zip(&shape).rev() {
            *st = acc;
            acc *= (*d).max(1) as isize;
        }
        s
    } else {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(t.strides, rank) }.iter().map(|s| *s as isize * item).collect()
    };
    let device = match t.device.device_type {
        KDL_CPU | KDL_CUDA_HOST => Device::Cpu,
        KDL_CUDA => Device::accelerator(t.device.device_id as i64).map_err(crate::errors::to_py)?,
        other => {
            return Err(PyBufferError::new_err(format!(
                "from_dlpack: tensors on DLPack device type {other} are not supported (CPU and CUDA are)"
            )));
        }
    };
    let addr = (t.data as u64).wrapping_add(t.byte_offset);
    // SAFETY: the producer keeps this memory valid until its deleter runs (when `keep` drops).
    let buf = unsafe { Buffer::from_external(addr, dtype, &shape, &strides, device, Box::new(keep)) }
        .map_err(crate::errors::to_py)?;
    Ok((buf, read_only))
}

/// Imports any DLPack producer as a Buffer sharing its memory. `copy=True` always copies;
/// read-only producers are copied unless `copy=False`, which then fails.
pub fn import(obj: &Bound<'_, PyAny>, copy: Option<bool>) -> PyResult<Buffer> {
    let py = obj.py();
    if !obj.hasattr("__dlpack__")? {
        return Err(PyTypeError::new_err(format!(
            "from_dlpack: {} does not implement the DLPack protocol (__dlpack__)",
            obj.get_type().name()?
        )));
    }
    let (dev_type, dev_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    if ![KDL_CPU, KDL_CUDA, KDL_CUDA_HOST].contains(&dev_type) {
        return Err(PyBufferError::new_err(format!(
            "from_dlpack: tensors on DLPack device type {dev_type} are not supported (CPU and CUDA are)"
        )));
    }
    // CUDA producers must make the data ready on the stream we will use: our default stream.
    let stream = if dev_type == KDL_CUDA {
        let dev = Device::accelerator(dev_id as i64).map_err(crate::errors::to_py)?;
        max_runtime::Stream::default_for(&dev).cu_stream().into_py_any(py)?
    } else {
        py.None()
    };
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("stream", &stream)?;
    kwargs.set_item("max_version", (1, 1))?;
    let cap = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("stream", &stream)?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    let capsule = cap.as_ptr();
    // SAFETY: capsule names are checked before the pointer is used; renaming marks it consumed
    // so the producer's capsule destructor will not free what we now own.
    let (buf, read_only) = unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr()) as *mut DLManagedTensorVersioned;
            if p.is_null() {
                return Err(PyErr::fetch(py));
            }
            if (*p).version.major != 1 {
                return Err(PyBufferError::new_err(format!(
                    "from_dlpack: DLPack major version {} is not supported",
                    (*p).version.major
                )));
            }
            ffi::PyCapsule_SetName(capsule, VERSIONED_USED.as_ptr());
            let read_only = (*p).flags & FLAG_READ_ONLY != 0;
            wrap(&(*p).dl_tensor, Imported { legacy: std::ptr::null_mut(), versioned: p }, read_only)?
        } else if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()) as *mut DLManagedTensor;
            if p.is_null() {
                return Err(PyErr::fetch(py));
            }
            ffi::PyCapsule_SetName(capsule, LEGACY_USED.as_ptr());
            wrap(&(*p).dl_tensor, Imported { legacy: p, versioned: std::ptr::null_mut() }, false)?
        } else {
            return Err(PyBufferError::new_err("from_dlpack: __dlpack__ did not return an unused DLPack capsule"));
        }
    };
    match (copy, read_only) {
        (Some(true), _) | (None, true) => py.detach(|| buf.contiguous()).map_err(crate::errors::to_py),
        (Some(false), true) => {
            Err(PyBufferError::new_err("from_dlpack: the producer's memory is read-only and copy=False forbids a copy"))
        }
        _ => Ok(buf),
    }
}
