// ANCHOR: build
//! Compiles the C++ glue against the installed torch and links it.

fn main() {
    let torch = torch_build::Torch::probe();

    // One translation unit per PyTorch interface: an edit recompiles only that file, and the
    // heavy headers (torch/library.h, ATen ops) are parsed only where they are needed.
    let sources = [
        "csrc/Errors.cpp",
        "csrc/DeviceAllocator.cpp",
        "csrc/HostAllocator.cpp",
        "csrc/Guard.cpp",
        "csrc/Generator.cpp",
        "csrc/Hooks.cpp",
        "csrc/Minimal.cpp",
        "csrc/StreamOps.cpp",
        "csrc/RandomOps.cpp",
        "csrc/CustomOps.cpp",
        "csrc/AutogradOps.cpp",
        "csrc/Stubs.cpp",
        "csrc/Pointwise.cpp",
        "csrc/Reduce.cpp",
        "csrc/Matmul.cpp",
        "csrc/SoftMax.cpp",
        "csrc/LossNLL.cpp",
        "csrc/Autocast.cpp",
        "csrc/Attention.cpp",
        "csrc/Quantize.cpp",
        "csrc/Codegen.cpp",
        "csrc/Fallback.cpp",
        "csrc/Serialization.cpp",
        "csrc/Register.cpp",
    ];
    // torchgen writes the registrations listed in native_functions.yaml (csrc/Codegen.cpp
    // includes them).
    let generated = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("torchgen");
    torch.gen_backend_stubs(std::path::Path::new("native_functions.yaml"), &generated);

    let mut build = cxx_build::bridge("src/ffi.rs");
    torch.configure(&mut build);
    build.files(sources).include("csrc").include(&generated).compile("openreg_torch_glue");
    torch.link();

    for file in sources.iter().chain(&["csrc/OpenReg.h", "csrc/Generator.h", "csrc/Register.h", "csrc/Structured.h"]) {
        println!("cargo:rerun-if-changed={file}");
    }
    // Handed to the Python crate's build script (DEP_OPENREG_TORCH_*), and to the Rust code.
    println!("cargo:lib_dir={}", torch.lib_dir.display());
    println!("cargo:rustc-env=OPENREG_TORCH_VERSION={}", torch.release());
    // Our own test binaries load libtorch too.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", torch.lib_dir.display());
}
// ANCHOR_END: build
