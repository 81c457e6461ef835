//! Where libtorch_openreg.so finds libc10 and libtorch_cpu at run time: the torch the glue was
//! compiled against (a dependency's link arguments do not reach this library).

fn main() {
    let torch_lib = std::env::var("DEP_OPENREG_TORCH_LIB_DIR").expect("set by openreg-torch");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{torch_lib}");
}
