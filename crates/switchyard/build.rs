//! Two optional native parts, each built when its tools are there and
//! announced by a cfg; without them Switchyard builds all the same:
//!
//! - the shield's XDP program (src/shield/xdp/shield.bpf.c), compiled with
//!   clang (Debian: clang, libbpf-dev, linux-libc-dev): `cfg(switchyard_xdp)`;
//!   without it Switchyard says so at run time when `[shield.xdp]` asks for
//!   it;
//! - ISA-L's igzip for gzip level 1 (src/compress/isal_shim.c, Debian:
//!   libisal-dev): `cfg(switchyard_isal)`; without it level 1 runs on
//!   libdeflate, slower at an equal ratio.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(switchyard_xdp)");
    println!("cargo:rustc-check-cfg=cfg(switchyard_isal)");
    // Installing libisal-dev or clang after a first build must reach the
    // next one, but dpkg keeps a header's old mtime, which
    // rerun-if-changed on the header does not see: watch dpkg's record of
    // installed packages as well (Debian and its kind only).
    let dpkg = "/var/lib/dpkg/status";
    if std::path::Path::new(dpkg).exists() {
        println!("cargo:rerun-if-changed={dpkg}");
    }
    isal();
    xdp();
}

/// ISA-L's header decides: the shim is compiled and libisal linked when it
/// is there.
fn isal() {
    let shim = "src/compress/isal_shim.c";
    // Also `compress::isal::HEADER`, which the tests check against.
    let header = "/usr/include/isa-l/igzip_lib.h";
    println!("cargo:rerun-if-changed={shim}");
    println!("cargo:rerun-if-changed={header}");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    if !std::path::Path::new(header).exists() {
        println!(
            "cargo:warning=no {header} (Debian: libisal-dev): gzip level 1 runs on libdeflate"
        );
        return;
    }
    match cc::Build::new()
        .file(shim)
        .opt_level(2)
        .try_compile("sy_isal")
    {
        Ok(()) => {
            println!("cargo:rustc-link-lib=isal");
            println!("cargo:rustc-cfg=switchyard_isal");
        }
        Err(e) => {
            println!("cargo:warning=could not compile {shim}: {e}; gzip level 1 runs on libdeflate")
        }
    }
}

fn xdp() {
    let src = "src/shield/xdp/shield.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-changed=src/shield/xdp/ddos.bpf.h");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        println!("cargo:warning=no OUT_DIR: building without XDP");
        return;
    };
    // An empty CLANG (exported blank by some shells' profiles) means unset.
    let clang = std::env::var("CLANG")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "clang".into());
    // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under the
    // target's multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let obj = out.join("shield.bpf.o");
    let r = Command::new(&clang)
        .args(["-O2", "-g0", "-Wall", "-Werror", "-target", "bpf"])
        .arg(format!("-I{multiarch}"))
        .args(["-c", src, "-o"])
        .arg(&obj)
        .output();
    match r {
        Ok(o) if o.status.success() => println!("cargo:rustc-cfg=switchyard_xdp"),
        Ok(o) => println!(
            "cargo:warning=clang could not compile {src}; building without XDP: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        Err(e) => println!("cargo:warning=no clang ({e}); building without XDP"),
    }
}
