//! `libtorch_openreg.so`: the openreg backend for a C++ program that links libtorch and no
//! Python (include/torch_openreg.h). It holds what `torch_openreg._C` holds minus the Python
//! bindings: the runtime, the C++ glue, and the symbols a packaged AOTInductor model looks up
//! (`openreg_aoti_shim`, exported by the glue crate).

use std::ffi::c_char;

// ANCHOR: init
/// Registers the backend with PyTorch: device name "openreg", allocators, guard, hooks,
/// operators, AOTInductor's model runner. Idempotent. Returns 0, or -1 with the reason
/// written (truncated, NUL-terminated) into `message`.
///
/// # Safety
/// `message` points to `message_len` writable bytes (or `message_len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn torch_openreg_init(message: *mut c_char, message_len: usize) -> i32 {
    let outcome = std::panic::catch_unwind(openreg_torch::register)
        .unwrap_or_else(|_| Err("torch_openreg_init panicked".to_string()));
    let Err(text) = outcome else { return 0 };
    if message_len > 0 {
        let n = text.len().min(message_len - 1);
        // SAFETY: the caller gives `message_len` bytes; we write `n + 1 <= message_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), message.cast::<u8>(), n);
            *message.add(n) = 0;
        }
    }
    -1
}
// ANCHOR_END: init
