//! Empty: the build script exists so that its build-dependency (syn, with the features PyO3's
//! macros enable) joins the host build, making `cargo test --release` resolve syn, and so
//! zerocopy and half, as the extension's build does (see the workspace Cargo.toml).

fn main() {}
