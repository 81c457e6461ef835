// ANCHOR: build
//! Compiles the C++ glue against the installed torch and links it.

fn main() {
    let torch = torch_build::Torch::probe();

    // One translation unit per PyTorch interface: an edit recompiles only that file. Each file
    // includes the ATen operators it calls, one header each; the torch headers most files share
    // are precompiled once (csrc/Precompiled.h). The folders follow the book's parts.
    let sources = [
        "csrc/Errors.cpp",
        "csrc/Register.cpp",
        // Runtime: the C++ interfaces PyTorch's registries take.
        "csrc/runtime/DeviceAllocator.cpp",
        "csrc/runtime/HostAllocator.cpp",
        "csrc/runtime/Guard.cpp",
        "csrc/runtime/Generator.cpp",
        "csrc/runtime/Hooks.cpp",
        "csrc/runtime/StreamOps.cpp",
        "csrc/runtime/RandomOps.cpp",
        "csrc/runtime/Serialization.cpp",
        "csrc/runtime/Profiler.cpp",
        "csrc/runtime/ActivityProfiler.cpp",
        "csrc/runtime/Graph.cpp",
        // Operators: registrations, the fallback, and the kernels' C++ side.
        "csrc/operators/Minimal.cpp",
        "csrc/operators/ShallowCopy.cpp",
        "csrc/operators/CustomOps.cpp",
        "csrc/operators/AutogradOps.cpp",
        "csrc/operators/Stubs.cpp",
        "csrc/operators/Pointwise.cpp",
        "csrc/operators/PointwiseTable.cpp",
        "csrc/operators/TriangularOps.cpp",
        "csrc/operators/RangeFactories.cpp",
        "csrc/operators/Gather.cpp",
        "csrc/operators/TensorCompare.cpp",
        "csrc/operators/Activation.cpp",
        "csrc/operators/Linalg.cpp",
        "csrc/operators/Indexing.cpp",
        "csrc/operators/Sorting.cpp",
        "csrc/operators/SummaryOps.cpp",
        "csrc/operators/Reduce.cpp",
        "csrc/operators/Matmul.cpp",
        "csrc/operators/SoftMax.cpp",
        "csrc/operators/LossNLL.cpp",
        "csrc/operators/LossMargin.cpp",
        "csrc/operators/LossCTC.cpp",
        "csrc/operators/Convolution.cpp",
        "csrc/operators/RNN.cpp",
        "csrc/operators/LSTM.cpp",
        "csrc/operators/Normalization.cpp",
        "csrc/operators/Pooling.cpp",
        "csrc/operators/Upsample.cpp",
        "csrc/operators/WeightNorm.cpp",
        "csrc/operators/TorchVision.cpp",
        "csrc/operators/Padding.cpp",
        "csrc/operators/PointwiseOps.cpp",
        "csrc/operators/Loss.cpp",
        "csrc/operators/Optimizers.cpp",
        "csrc/operators/Embedding.cpp",
        "csrc/operators/TensorShape.cpp",
        "csrc/operators/Attention.cpp",
        "csrc/operators/Quantize.cpp",
        "csrc/operators/Codegen.cpp",
        "csrc/operators/Fallback.cpp",
        // High-level modules.
        "csrc/high_level/Autocast.cpp",
        "csrc/high_level/ProcessGroupOCCL.cpp",
        "csrc/high_level/AOTInductor.cpp",
    ];
    // torchgen writes the registrations listed in native_functions.yaml (csrc/operators/Codegen.cpp
    // includes them).
    let generated = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("torchgen");
    torch.gen_backend_stubs(std::path::Path::new("native_functions.yaml"), &generated);

    // Two bridges: OCCL's has its own header, included by ProcessGroupOCCL.cpp alone.
    let mut build = cxx_build::bridges(["src/ffi.rs", "src/high_level/distributed.rs"]);
    torch.configure(&mut build);
    // The Kineto plugin (ActivityProfiler.cpp): the wheel's libkineto headers, and the macro
    // torch was built with, which enables PyTorch's Kineto declarations.
    let kineto = torch.include_dirs.iter().map(|d| d.join("kineto")).find(|d| d.join("libkineto.h").exists());
    build.include(kineto.expect("torch's include directory has no kineto/libkineto.h")).define("USE_KINETO", None);
    // openreg_aoti.h, the interface packaged models compile against, ships in the Python package.
    let aoti_include = "../python/torch_openreg/include";
    build.include("csrc").include(aoti_include).include(&generated);
    torch.precompile_header(&mut build, std::path::Path::new("csrc/Precompiled.h"));
    build.files(sources).compile("openreg_torch_glue");
    torch.link();

    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed={aoti_include}");
    // Handed to the Python crate's build script (DEP_OPENREG_TORCH_*), and to the Rust code.
    println!("cargo:lib_dir={}", torch.lib_dir.display());
    println!("cargo:rustc-env=OPENREG_TORCH_VERSION={}", torch.release());
    // Our own test binaries load libtorch too.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", torch.lib_dir.display());
}
// ANCHOR_END: build
