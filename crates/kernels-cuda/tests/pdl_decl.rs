//! The PDL declarations (launch/pdl.rs `DECLARED`) against the kernels' code: a kernel may
//! launch under programmatic stream serialization only if it executes griddepcontrol.wait, so
//! every family is compiled to PTX for sm_90a and each entry point's body is searched. The
//! declared entries must be exactly those with the wait, and every declaration must name
//! entries that exist. Without libnvrtc the PTX check passes with a note unless
//! MAX_REQUIRE_NVRTC=1; the source check below needs nothing.

use max_kernels_cuda::launch::pdl::{DECLARED, declared};
use max_kernels_cuda::sources;

mod common;

/// (entry name, whether its body executes griddepcontrol.wait) for each `.entry` of the PTX.
fn entries(ptx: &str) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = vec![];
    for line in ptx.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix(".visible .entry ").or_else(|| t.strip_prefix(".entry ")) {
            let name = rest.split(|c: char| c == '(' || c.is_whitespace()).next().unwrap_or("").to_string();
            out.push((name, false));
        } else if t.starts_with("griddepcontrol.wait")
            && let Some(last) = out.last_mut()
        {
            last.1 = true;
        }
    }
    out
}

#[test]
fn declared_kernels_are_exactly_those_that_wait() {
    if let Err(e) = max_kernels_cuda::ensure_nvrtc() {
        assert!(std::env::var("MAX_REQUIRE_NVRTC").as_deref() != Ok("1"), "MAX_REQUIRE_NVRTC=1 but {e}");
        eprintln!("skipping the PDL declaration check: {e}");
        return;
    }
    let mut wrong = vec![];
    for (family, prefixes) in DECLARED {
        let fam = sources::ALL.iter().find(|f| f.name == *family).unwrap_or_else(|| panic!("no family {family}"));
        let ptx = common::ptx(fam, "sm_90a").unwrap_or_else(|e| panic!("{family}: {e}"));
        let all = entries(&String::from_utf8_lossy(&ptx));
        for p in *prefixes {
            assert!(all.iter().any(|(n, _)| n.starts_with(p)), "{family}: no entry starts with {p}");
        }
        for (name, waits) in &all {
            if declared(family, name) != *waits {
                wrong.push(format!("{family}::{name}: declared {}, waits {waits}", declared(family, name)));
            }
        }
    }
    assert!(wrong.is_empty(), "PDL declarations disagree with the code:\n{}", wrong.join("\n"));
}

/// Families with no declaration must not wait anywhere (a wait there means a declaration is
/// missing, or a kernel waits that nothing launches under PDL); declared families must.
#[test]
fn only_declared_families_wait() {
    for fam in sources::ALL {
        let has = DECLARED.iter().any(|(f, _)| *f == fam.name);
        // the asm string or prelude.cuh's helper called (comments may name either)
        let waits = fam.source.contains("\"griddepcontrol.wait") || fam.source.contains("pdl_wait();");
        assert_eq!(has, waits, "{}: declared {has}, source waits {waits}", fam.name);
    }
}
