//! Compiles the C++ glue against the torch of `PYO3_PYTHON` (maturin sets it) and links it.

use std::process::Command;

const PROBE: &str = "import os, torch
from torch.utils.cpp_extension import include_paths
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(os.path.join(os.path.dirname(torch.__file__), 'lib'))
print('\\n'.join(include_paths()))";

fn main() {
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    let python = std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".into());
    // -P: not the current directory on sys.path; no autoload: just torch.
    let out = Command::new(&python)
        .args(["-P", "-c", PROBE])
        .env("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        .output()
        .expect("cannot run python");
    assert!(out.status.success(), "{python} cannot import torch:\n{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let (abi, lib) = (lines.next().unwrap(), lines.next().unwrap());
    let includes: Vec<&str> = lines.collect();

    let sources = [
        "csrc/Allocator.cpp",
        "csrc/Guard.cpp",
        "csrc/Ops.cpp",
        "csrc/Fallback.cpp",
        "csrc/Generator.cpp",
        "csrc/Hooks.cpp",
        "csrc/Register.cpp",
    ];
    // ccache, when installed, makes a rebuild after a one-file edit take seconds instead of
    // recompiling every file against torch's headers (CXX, when set, is left alone).
    println!("cargo:rerun-if-env-changed=CXX");
    if std::env::var_os("CXX").is_none() && Command::new("ccache").arg("--version").output().is_ok() {
        // SAFETY: the build script is single-threaded here; cc reads CXX when it builds.
        unsafe { std::env::set_var("CXX", "ccache c++") };
    }
    cxx_build::bridge("src/ffi.rs")
        .std("c++20")
        .includes(&includes)
        .define("_GLIBCXX_USE_CXX11_ABI", abi)
        .flag_if_supported("-Wno-unused-parameter")
        .include("csrc")
        .files(sources)
        .compile("openreg_glue");
    println!("cargo:rustc-link-search=native={lib}");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../torch/lib");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    for file in sources.iter().chain(&["csrc/OpenReg.h", "csrc/Generator.h"]) {
        println!("cargo:rerun-if-changed={file}");
    }
}
