//! Compiles the shield's XDP program (src/shield/xdp/shield.bpf.c) with
//! clang when it is there (Debian: clang, libbpf-dev, linux-libc-dev), and
//! sets `cfg(switchyard_xdp)`; without it Switchyard builds without XDP
//! and says so at run time when `[shield.xdp]` asks for it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(switchyard_xdp)");
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
