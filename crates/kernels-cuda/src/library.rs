//! Finding libnvrtc without help. cudarc opens libraries by bare name (`libnvrtc.so.13`), which
//! works when the system CUDA is on the loader's path. When it is not, this module looks in
//! `MAX_NVRTC_LIBRARY` (a file), `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` and directories
//! registered with `add_search_dir` (the Python package registers the `nvidia-cuda-nvrtc` wheel's
//! folder), and opens the library by full path. Once open, the loader matches later bare-name
//! opens by soname, so cudarc finds the same copy. libnvrtc opens its companion
//! `libnvrtc-builtins` by bare name too, so that one is opened first from the same folder.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Error, Result};

struct State {
    extra_dirs: Vec<PathBuf>,
    // Libraries opened by path stay open for the life of the process.
    opened: Vec<libloading::Library>,
    ready: bool,
}

static STATE: Mutex<State> = Mutex::new(State { extra_dirs: Vec::new(), opened: Vec::new(), ready: false });

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Adds a directory to search for libnvrtc (checked after the system locations).
pub fn add_search_dir(dir: impl Into<PathBuf>) {
    let dir = dir.into();
    let mut st = state();
    if !st.extra_dirs.contains(&dir) {
        st.extra_dirs.push(dir);
    }
}

fn loadable_by_name() -> bool {
    // SAFETY: only opens and closes shared libraries; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// `libnvrtc.so.13` (and not the `.alt` variant or the builtins) in `dir`, newest major first.
fn find_in(dir: &Path, stem: &str) -> Option<PathBuf> {
    let prefix = format!("{stem}.so.");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(OsStr::to_str).is_some_and(|n| n.starts_with(&prefix) && !n.contains("alt")))
        .collect();
    found.sort();
    found.pop()
}

fn candidate_dirs(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> =
        ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"].iter().filter_map(|v| std::env::var_os(v).map(PathBuf::from)).collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut dirs = Vec::new();
    for root in roots {
        dirs.push(root.join("lib64"));
        dirs.push(root.join("lib"));
        dirs.push(root.join("targets/x86_64-linux/lib"));
    }
    dirs.extend(extra.iter().cloned());
    dirs
}

fn open(st: &mut State, path: &Path) -> Result<()> {
    // SAFETY: opening NVIDIA's own library runs only its initialisers.
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| Error::NvrtcMissing(format!("{}: {e}", path.display())))?;
    st.opened.push(lib);
    Ok(())
}

/// Makes libnvrtc loadable for cudarc, or says where it looked.
pub fn ensure_nvrtc() -> Result<()> {
    let mut st = state();
    if st.ready {
        return Ok(());
    }
    let explicit =
        max_tuning::current().text(max_tuning::Knob::NvrtcLibrary).filter(|p| !p.is_empty()).map(PathBuf::from);
    if let Some(explicit) = explicit {
        let path = explicit;
        if let Some(builtins) = path.parent().and_then(|d| find_in(d, "libnvrtc-builtins")) {
            open(&mut st, &builtins)?;
        }
        open(&mut st, &path)?;
    } else if !loadable_by_name() {
        let dirs = candidate_dirs(&st.extra_dirs);
        let hit = dirs.iter().find_map(|d| find_in(d, "libnvrtc").map(|lib| (d.clone(), lib)));
        let Some((dir, lib)) = hit else {
            let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            return Err(Error::NvrtcMissing(format!(
                "libnvrtc is not on the loader path and was not found in [{}]; install the \
                 `nvidia-cuda-nvrtc` wheel (13.0) or set CUDA_HOME or MAX_NVRTC_LIBRARY",
                searched.join(", ")
            )));
        };
        if let Some(builtins) = find_in(&dir, "libnvrtc-builtins") {
            open(&mut st, &builtins)?;
        }
        open(&mut st, &lib)?;
    }
    if !loadable_by_name() {
        return Err(Error::NvrtcMissing(
            "a libnvrtc was opened but its soname does not match a name cudarc looks for".into(),
        ));
    }
    st.ready = true;
    Ok(())
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: libnvrtc is loaded (checked above); the pointers are valid for the call.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    status.result().map_err(|e| Error::Nvrtc { op: "nvrtcVersion", msg: format!("{e:?}") })?;
    Ok((major, minor))
}
