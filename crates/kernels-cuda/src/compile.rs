//! One NVRTC compilation: a family's source to a cubin (what the driver loads) or to PTX (what
//! `ptxas -v` inspects in CI).

use std::ffi::CString;

use cudarc::nvrtc::{result, sys};

use crate::{Error, Result, library::ensure_nvrtc, sources::Family};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Machine code for one real architecture, e.g. `sm_90a`.
    Cubin,
    /// PTX for the matching virtual architecture, e.g. `compute_90a`.
    Ptx,
}

/// Options every compilation uses; part of the cache key.
pub(crate) fn options(arch: &str, target: Target) -> Vec<String> {
    let arch = match target {
        Target::Cubin => arch.to_string(),
        Target::Ptx => arch.replacen("sm_", "compute_", 1),
    };
    vec![format!("--gpu-architecture={arch}"), "-std=c++17".into(), "-lineinfo".into()]
}

struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by create_program and is destroyed once, here.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

fn nvrtc_err(op: &'static str) -> impl FnOnce(result::NvrtcError) -> Error {
    move |e| Error::Nvrtc { op, msg: format!("{e:?}") }
}

fn log_of(prog: &Program) -> String {
    // SAFETY: prog is a live program.
    match unsafe { result::get_program_log(prog.0) } {
        Ok(chars) => {
            let bytes: Vec<u8> = chars.iter().map(|c| *c as u8).take_while(|b| *b != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Err(e) => format!("(no log: {e:?})"),
    }
}

/// Compiles `family` for `arch` (`sm_90a`, `sm_80`, …) without touching the cache.
pub fn compile(family: &Family, arch: &str, target: Target) -> Result<Vec<u8>> {
    ensure_nvrtc()?;
    let src = CString::new(family.full_source())
        .map_err(|_| Error::Unsupported(format!("kernel source {} contains NUL", family.name)))?;
    let name = CString::new(format!("{}.cu", family.name))
        .map_err(|_| Error::Unsupported("kernel name contains NUL".into()))?;
    let prog = Program(result::create_program(&src, Some(&name)).map_err(nvrtc_err("create"))?);
    // SAFETY: prog is live; options are plain ASCII without NUL.
    if unsafe { result::compile_program(prog.0, &options(arch, target)) }.is_err() {
        return Err(Error::Compile { family: family.name.to_string(), arch: arch.to_string(), log: log_of(&prog) });
    }
    match target {
        Target::Ptx => {
            // SAFETY: prog compiled successfully.
            let chars = unsafe { result::get_ptx(prog.0) }.map_err(nvrtc_err("get_ptx"))?;
            Ok(chars.iter().map(|c| *c as u8).take_while(|b| *b != 0).collect())
        }
        Target::Cubin => {
            let mut size = 0usize;
            // SAFETY: prog compiled for a real architecture; the buffer has the reported size.
            unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().map_err(nvrtc_err("get_cubin_size"))?;
            let mut cubin = vec![0u8; size];
            unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }
                .result()
                .map_err(nvrtc_err("get_cubin"))?;
            Ok(cubin)
        }
    }
}
