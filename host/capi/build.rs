//! Generates `ringcast.h` from the crate's `extern "C"` items with cbindgen, into `OUT_DIR` and
//! next to the built libraries (`target/<profile>/include/ringcast.h`), so C programs and the
//! PMPI interposer compile against exactly what this build exports.
use std::path::PathBuf;

fn main() {
    let crate_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed=src/lib.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let header = match cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate() {
        Ok(h) => h,
        Err(e) => panic!("cbindgen: {e}"),
    };
    header.write_to_file(out.join("ringcast.h"));
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out: the profile directory is three up.
    if let Some(profile) = out.ancestors().nth(3) {
        let include = profile.join("include");
        let _ = std::fs::create_dir_all(&include);
        header.write_to_file(include.join("ringcast.h"));
    }
}
