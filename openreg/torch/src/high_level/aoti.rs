//! AOTInductor: the one symbol a packaged model looks up in the backend (see
//! `torch_openreg/include/openreg_aoti.h`). The table lives in C++
//! (csrc/high_level/AOTInductor.cpp); a Rust library exports only Rust's `#[no_mangle]`
//! functions, so this one hands out its address.

use std::ffi::c_void;

unsafe extern "C" {
    fn openreg_aoti_shim_table() -> *const c_void;
}

/// The C shim's table of functions, for models compiled by AOTInductor.
#[unsafe(no_mangle)]
pub extern "C" fn openreg_aoti_shim() -> *const c_void {
    // SAFETY: returns the address of a static table.
    unsafe { openreg_aoti_shim_table() }
}
