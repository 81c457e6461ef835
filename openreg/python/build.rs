// ANCHOR: rpath
//! Where `_C.so` finds libc10 and libtorch_cpu at run time. A dependency's link arguments do
//! not reach this cdylib, so the RUNPATH is set here, from the lib dir the glue crate linked
//! against (passed along through its `links` metadata).

fn main() {
    bind_distributed();
    let torch_lib = std::env::var("DEP_OPENREG_TORCH_LIB_DIR").expect("set by openreg-torch");
    // Installed wheel: site-packages/torch_openreg/_C.so next to site-packages/torch/lib.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../torch/lib");
    // Development builds: the torch the glue was compiled against.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{torch_lib}");
}
// ANCHOR_END: rpath

// ANCHOR: pybind
/// Compiles the pybind11 binding of the C++ c10d backend (csrc/ProcessGroupOCCLBinding.cpp):
/// torch's flags and headers (pybind11 among them), plus Python's, and the glue's own headers
/// (ProcessGroupOCCL.h and the cxx bridge it includes), found through `links` metadata.
fn bind_distributed() {
    let torch = torch_build::Torch::probe();
    let glue = std::path::Path::new("../torch/csrc");
    let cxxbridge = std::env::var("DEP_OPENREG_TORCH_CXXBRIDGE_DIR0").expect("set by cxx-build in openreg-torch");
    let mut build = cc::Build::new();
    torch.configure(&mut build);
    build
        .include(&torch.python_include)
        .include(glue)
        .include(cxxbridge)
        .file("csrc/ProcessGroupOCCLBinding.cpp")
        .compile("openreg_pybind");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=../torch/csrc/high_level/ProcessGroupOCCL.h");
}
// ANCHOR_END: pybind
