//! libnccl, opened at run time: no build-time dependency, and a machine without it only loses
//! the GPU collectives. The library is `nccl.library` when set, else `libnccl.so.2` by name
//! (the system's), else the first found in the directories registered with `add_search_dir`
//! (the Python package registers the `nvidia-nccl-cu13` wheel's folder) and CUDA_HOME's.
//!
//! The bindings are written here rather than taken from cudarc's `nccl` module: that one panics
//! when the library is missing and cannot be pointed at a wheel's folder, and the dozen entry
//! points used are NCCL's stable C API (nccl.h).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::{Error, Result};

pub type Comm = *mut c_void;
pub type Stream = *mut c_void;
/// ncclResult_t: 0 is ncclSuccess, 7 ncclInProgress.
pub type Status = c_int;
pub const SUCCESS: Status = 0;
pub const IN_PROGRESS: Status = 7;
/// ncclRedOp_t's ncclSum.
pub const SUM: c_int = 0;

/// The entry points the collectives use.
pub struct Api {
    _lib: libloading::Library,
    pub version: i32,
    pub comm_init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> Status,
    pub comm_abort: unsafe extern "C" fn(Comm) -> Status,
    pub comm_get_async_error: unsafe extern "C" fn(Comm, *mut Status) -> Status,
    pub get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    pub group_start: unsafe extern "C" fn() -> Status,
    pub group_end: unsafe extern "C" fn() -> Status,
    pub all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Status,
    pub all_gather: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, Stream) -> Status,
    pub reduce_scatter: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Status,
    pub broadcast: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, Stream) -> Status,
}

// SAFETY: the table holds plain C function pointers and the library handle, which NCCL allows
// to be used from any thread.
unsafe impl Send for Api {}
unsafe impl Sync for Api {}

impl Api {
    /// `status` as a Result naming the call and NCCL's description of the error.
    pub fn check(&self, call: &str, status: Status) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        Err(Error::Device(format!("NCCL error in {call}: {}", self.describe(status))))
    }

    /// "2.27.3" from NCCL's version code.
    pub fn version_text(&self) -> String {
        let v = self.version;
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    }

    pub fn describe(&self, status: Status) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let text = unsafe { (self.get_error_string)(status) };
        if text.is_null() {
            return format!("error {status}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        let s = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        format!("{s} (error {status})")
    }
}

static SEARCH_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Adds a directory to search for libnccl (after the loader's own path).
pub fn add_search_dir(dir: impl Into<PathBuf>) {
    let dir = dir.into();
    let mut dirs = SEARCH_DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = max_tuning::current().text(max_tuning::Knob::NcclLibrary).filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
        return out;
    }
    out.push(PathBuf::from("libnccl.so.2"));
    let mut dirs = SEARCH_DIRS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(Path::new(&root).join("lib64"));
            dirs.push(Path::new(&root).join("lib"));
        }
    }
    out.extend(dirs.into_iter().map(|d| d.join("libnccl.so.2")).filter(|p| p.is_file()));
    out
}

/// The loaded library, or why it could not be loaded (kept: every later call says the same).
pub fn api() -> Result<&'static Api> {
    static API: OnceLock<std::result::Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(|why| Error::Device(why.clone()))
}

fn load() -> std::result::Result<Api, String> {
    let tried = candidates();
    let mut errors = Vec::new();
    for path in &tried {
        // SAFETY: opening NVIDIA's library runs only its initialisers.
        match unsafe { libloading::Library::new(path) } {
            Ok(lib) => return bind(lib).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    Err(format!(
        "NCCL is not available, so collectives cannot run on GPUs: libnccl.so.2 was not found ({}); \
         install the nvidia-nccl-cu13 wheel (requirements-cuda.txt) or set the nccl.library setting",
        errors.join("; ")
    ))
}

fn bind(lib: libloading::Library) -> std::result::Result<Api, String> {
    let get_version: unsafe extern "C" fn(*mut c_int) -> Status = sym(&lib, "ncclGetVersion")?;
    let mut version: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { get_version(&mut version) };
    Ok(Api {
        version,
        comm_init_all: sym(&lib, "ncclCommInitAll")?,
        comm_abort: sym(&lib, "ncclCommAbort")?,
        comm_get_async_error: sym(&lib, "ncclCommGetAsyncError")?,
        get_error_string: sym(&lib, "ncclGetErrorString")?,
        group_start: sym(&lib, "ncclGroupStart")?,
        group_end: sym(&lib, "ncclGroupEnd")?,
        all_reduce: sym(&lib, "ncclAllReduce")?,
        all_gather: sym(&lib, "ncclAllGather")?,
        reduce_scatter: sym(&lib, "ncclReduceScatter")?,
        broadcast: sym(&lib, "ncclBroadcast")?,
        _lib: lib,
    })
}

/// The function `name` of `lib`, as the C function type `T` (which the caller names from nccl.h).
fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> std::result::Result<T, String> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: `T` is the symbol's C signature as nccl.h declares it (see the fields of Api).
    unsafe { lib.get::<T>(bytes.as_slice()) }.map(|s| *s).map_err(|e| format!("{name}: {e}"))
}

/// NCCL's ncclDataType_t for `dtype`, where it has one.
pub fn data_type(dtype: max_graph::DType) -> Option<c_int> {
    use max_graph::DType::*;
    Some(match dtype {
        Int8 => 0,
        UInt8 | Bool => 1,
        Int32 => 2,
        UInt32 => 3,
        Int64 => 4,
        UInt64 => 5,
        Float16 => 6,
        Float32 => 7,
        Float64 => 8,
        BFloat16 => 9,
        _ => return None,
    })
}

/// ncclUint8: byte copies (gathers and broadcasts of any dtype).
pub const BYTES: c_int = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_where_to_get_it() {
        let _scope = max_tuning::scoped("nccl.library=/nonexistent/libnccl.so.2").unwrap();
        let why = load().err().expect("a library that does not exist cannot load");
        assert!(why.contains("/nonexistent/libnccl.so.2") && why.contains("nvidia-nccl-cu13"), "{why}");
    }

    #[test]
    fn the_process_wide_library_loads_or_says_why() {
        match api() {
            Ok(api) => assert!(api.version >= 20000, "NCCL version code {}", api.version),
            Err(e) => assert!(e.to_string().contains("NCCL is not available"), "{e}"),
        }
    }

    #[test]
    fn data_types_follow_nccl_h() {
        use max_graph::DType;
        assert_eq!(data_type(DType::BFloat16), Some(9));
        assert_eq!(data_type(DType::Float32), Some(7));
        assert_eq!(data_type(DType::Int16), None);
    }
}
