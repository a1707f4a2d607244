// Temporary (not committed): dumps the PTX of the reduction families to /tmp.
use max_kernels_cuda::{Target, compile, sources};
#[test]
fn dump() {
    for f in [sources::REDUCTION, sources::NORM, sources::SCAN, sources::SORT] {
        let t = std::time::Instant::now();
        let ptx = compile(&f, "sm_90a", Target::Ptx).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{}: {:?}", f.name, t.elapsed());
        std::fs::write(format!("/tmp/gr_{}.ptx", f.name), ptx).unwrap();
    }
}
