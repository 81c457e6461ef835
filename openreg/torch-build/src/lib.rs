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
