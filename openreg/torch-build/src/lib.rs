//! Finds torch through the Python interpreter the extension is built for, and configures a
//! C++ build against it. Used from build scripts only.
//!
//! The interpreter is `PYO3_PYTHON` (the one pyo3 builds for), else `python3` on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

// ANCHOR: torch
/// What a C++ build needs to know about the installed torch.
#[derive(Debug, Clone)]
pub struct Torch {
    /// `torch.__version__`, e.g. `2.15.0+cu132`.
    pub version: String,
    /// `torch._C._GLIBCXX_USE_CXX11_ABI`: must match ours or symbols differ at import.
    pub cxx11_abi: bool,
    /// `torch.utils.cpp_extension.include_paths()`.
    pub include_dirs: Vec<PathBuf>,
    /// The directory holding `libc10.so`, `libtorch_cpu.so`, ...
    pub lib_dir: PathBuf,
    /// The Python interpreter that has this torch (it also runs torchgen).
    pub python: String,
    /// Where `Python.h` is: only the pybind11 binding of the C++ c10d backend needs it.
    pub python_include: PathBuf,
}

const PROBE: &str = r#"
import os, sysconfig, torch
from torch.utils.cpp_extension import include_paths
print("version", torch.__version__)
print("abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("lib", os.path.join(os.path.dirname(torch.__file__), "lib"))
for p in include_paths():
    print("include", p)
print("python_include", sysconfig.get_paths()["include"])
"#;
// ANCHOR_END: torch

impl Torch {
    /// Asks the Python interpreter about its torch. Panics with a readable message if there is
    /// none: this runs in a build script, where a panic is how errors are reported.
    pub fn probe() -> Torch {
        println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
        let python = std::env::var("PYO3_PYTHON").unwrap_or_else(|_| "python3".into());
        // -P keeps the current directory off sys.path; backends need not load to ask torch.
        let out = Command::new(&python)
            .args(["-P", "-c", PROBE])
            .env("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        if !out.status.success() {
            panic!(
                "{python} cannot import torch (set PYO3_PYTHON to the venv's python, \
                 or run `make build`):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut torch = Torch {
            version: String::new(),
            cxx11_abi: true,
            include_dirs: Vec::new(),
            lib_dir: PathBuf::new(),
            python: python.clone(),
            python_include: PathBuf::new(),
        };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("version", v)) => torch.version = v.to_string(),
                Some(("abi", v)) => torch.cxx11_abi = v == "1",
                Some(("lib", v)) => torch.lib_dir = v.into(),
                Some(("include", v)) => torch.include_dirs.push(v.into()),
                Some(("python_include", v)) => torch.python_include = v.into(),
                _ => {}
            }
        }
        torch
    }

    // ANCHOR: configure
    /// Flags every C++ file that includes torch headers needs.
    pub fn configure(&self, build: &mut cc::Build) {
        build
            .cpp(true)
            .std("c++20")
            .includes(&self.include_dirs)
            .define("_GLIBCXX_USE_CXX11_ABI", if self.cxx11_abi { "1" } else { "0" })
            // Torch's headers are noisy under -Wall; our own code is small enough to review.
            .flag_if_supported("-Wno-unused-parameter")
            .flag_if_supported("-Wno-missing-field-initializers")
            .flag_if_supported("-Wno-deprecated-declarations")
            // ATen's CachingHostAllocator.h aligns to hardware_destructive_interference_size.
            .flag_if_supported("-Wno-interference-size")
            // The glue mostly forwards; -O2 compiles each torch-heavy file ~9% faster than
            // -O3 (-O1: ~20%, but it added ~0.1 µs to every small operator).
            .opt_level(2);
    }

    /// Links the two torch libraries the glue uses.
    pub fn link(&self) {
        println!("cargo:rustc-link-search=native={}", self.lib_dir.display());
        println!("cargo:rustc-link-lib=dylib=c10");
        println!("cargo:rustc-link-lib=dylib=torch_cpu");
    }
    // ANCHOR_END: configure

    /// The `major.minor.patch` part of the version, which the Python package checks at import.
    pub fn release(&self) -> &str {
        self.version.split('+').next().unwrap_or(&self.version)
    }

    // ANCHOR: precompile_header
    /// Compiles `header` once, with `build`'s own flags, and has every file of `build` include
    /// it first (`-include`): the torch headers that most files include are parsed once per
    /// build instead of once per file. GCC only (another compiler gets the files as they are).
    /// Call it after the flags are set: GCC ignores a precompiled header built with other flags
    /// (`-Winvalid-pch` says so in the build's warnings).
    pub fn precompile_header(&self, build: &mut cc::Build, header: &Path) {
        println!("cargo:rerun-if-changed={}", header.display());
        let compiler = build.get_compiler();
        if !compiler.is_like_gnu() {
            return;
        }
        // GCC takes `<name>.gch` from beside the header `-include` names, so both go in OUT_DIR.
        let dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR: call this from a build script"))
            .join("precompiled");
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let name = header.file_name().expect("the header is a file");
        let copy = dir.join(name);
        std::fs::copy(header, &copy).unwrap_or_else(|e| panic!("cannot copy {}: {e}", header.display()));
        let mut gch = copy.clone().into_os_string();
        gch.push(".gch");
        // ccache caches a precompiled header, and files compiled with one, only when told that
        // the header's macros and timestamps may be trusted (it is rewritten by every build).
        // It hashes every file's includes, this one too (hundreds of MB): its inode cache
        // hashes it once per build instead of once per file.
        let mut sloppiness: Vec<String> = std::env::var("CCACHE_SLOPPINESS").unwrap_or_default()
            .split(',').filter(|s| !s.is_empty()).map(String::from).collect();
        for item in ["pch_defines", "time_macros", "include_file_mtime", "include_file_ctime"] {
            if !sloppiness.iter().any(|s| s == item) {
                sloppiness.push(item.into());
            }
        }
        let sloppiness = sloppiness.join(",");
        build.env("CCACHE_SLOPPINESS", &sloppiness).env("CCACHE_INODECACHE", "true");
        let out = compiler
            .to_command()
            .env("CCACHE_SLOPPINESS", &sloppiness)
            .args(["-x", "c++-header"])
            .arg(&copy)
            .arg("-o")
            .arg(&gch)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", compiler.path().display()));
        if !out.status.success() {
            panic!("precompiling {} failed:\n{}", header.display(), String::from_utf8_lossy(&out.stderr));
        }
        build.flag("-include").flag(copy.to_str().expect("OUT_DIR is UTF-8")).flag("-Winvalid-pch");
        // A template instantiated from a precompiled header loses the header's own
        // `#pragma GCC diagnostic ignored`: torch's TypeSafeSignMath.h would warn in every file.
        build.flag("-Wno-sign-compare");
    }
    // ANCHOR_END: precompile_header

    // ANCHOR: gen_backend_stubs
    /// Runs torchgen's backend code generator (what out-of-tree backends such as torch_xla
    /// use) on `yaml` into `out_dir`: `RegisterPrivateUse1.cpp`, the wrappers and their
    /// registration, and `PrivateUse1NativeFunctions.h`, the kernels the backend must define.
    pub fn gen_backend_stubs(&self, yaml: &Path, out_dir: &Path) {
        println!("cargo:rerun-if-changed={}", yaml.display());
        let out = Command::new(&self.python)
            .args(["-P", "-m", "torchgen.gen_backend_stubs", "--source-yaml"])
            .arg(yaml)
            .arg("--output-dir")
            .arg(out_dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.python));
        if !out.status.success() {
            panic!("torchgen.gen_backend_stubs failed on {}:\n{}", yaml.display(), String::from_utf8_lossy(&out.stderr));
        }
    }
    // ANCHOR_END: gen_backend_stubs
}
