// ANCHOR: rpath
//! Where `_C.so` finds libc10 and libtorch_cpu at run time. A dependency's link arguments do
//! not reach this cdylib, so the RUNPATH is set here, from the lib dir the glue crate linked
//! against (passed along through its `links` metadata).

fn main() {
    let torch_lib = std::env::var("DEP_OPENREG_TORCH_LIB_DIR").expect("set by openreg-torch");
    // Installed wheel: site-packages/torch_openreg/_C.so next to site-packages/torch/lib.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../torch/lib");
    // Development builds: the torch the glue was compiled against.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{torch_lib}");
}
// ANCHOR_END: rpath
