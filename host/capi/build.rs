//! Generates `ringcast.h` from the crate's `extern "C"` items (every module of `src/`) with cbindgen, into `OUT_DIR` and
//! next to the built libraries (`target/<profile>/include/ringcast.h`), so C programs and the
//! PMPI interposer compile against exactly what this build exports.
//!
//! On Linux it also gives `libringcast.so` its SONAME, `libringcast.so.<major>` (`make install`
//! installs `libringcast.so.<version>` with the `.so.<major>` and `.so` links), and puts the
//! `.so.<major>` link next to the built library, so programs linked in the build tree (`make
//! test-c`, `make test-mpi`) find it through their rpath there.
use std::path::PathBuf;

fn main() {
    let crate_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let soname = format!("libringcast.so.{}", env!("CARGO_PKG_VERSION_MAJOR"));
    if linux {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
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
        if linux {
            soname_link(profile, &soname);
        }
    }
}

/// `<profile>/libringcast.so.<major>` -> `libringcast.so` (dangling until the library is linked).
#[cfg(unix)]
fn soname_link(profile: &std::path::Path, soname: &str) {
    let link = profile.join(soname);
    let target = std::path::Path::new("libringcast.so");
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink(target, &link) {
        println!("cargo:warning=cannot link {} to libringcast.so: {e}", link.display());
    }
}

#[cfg(not(unix))]
fn soname_link(_profile: &std::path::Path, _soname: &str) {}
