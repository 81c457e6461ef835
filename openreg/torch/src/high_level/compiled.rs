//! Running Inductor's compiled C++ kernels on the device (torch_openreg/openreg/_inductor.py,
//! and packaged models through csrc/high_level/AOTInductor.cpp):
//! a kernel is a C function over raw pointers and int64 sizes; it must see the runtime's
//! read/write view of device memory, never the protected addresses PyTorch holds, and it must
//! run in order with the rest of the device's work, on the current stream. The C function
//! never throws: it returns the class of a C++ exception its code raised and hands over the
//! message, which the stream reports at the next synchronize.

// ANCHOR: run
use std::ffi::{CStr, c_char, c_void};

use openreg_runtime as rt;

/// One argument of a kernel.
#[derive(Clone, Copy)]
pub enum Arg {
    /// An int64 size, or the pointer of an empty tensor, which the kernel never reads.
    Value(u64),
    /// A tensor's data pointer, with its storage's `(base, bytes)` when the caller has them
    /// (AOTInductor's C++ does). Without them the runtime finds the live allocation holding
    /// the pointer: one lookup in Rust is cheaper than asking Python for the storage.
    Tensor { data: u64, storage: Option<(u64, u64)> },
}

/// Where an argument's memory is: a kernel may run on the device only, or must also wait
/// for host memory it borrows.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Nowhere,
    Host,
    Device(usize),
}

/// The argument as the kernel sees it: device addresses translated to the runtime's view.
fn translate(arg: Arg) -> rt::Result<(u64, Place)> {
    let (data, storage) = match arg {
        Arg::Value(value) | Arg::Tensor { data: value, storage: Some((_, 0)) } => return Ok((value, Place::Nowhere)),
        Arg::Tensor { data, storage } => (data, storage),
    };
    let Some(device) = rt::device_of(data as *const u8) else {
        return Ok((data, Place::Host)); // host memory (a CPU tensor): usable as is
    };
    let view = match storage {
        Some((base, bytes)) => {
            let base_view = rt::host_view_within(base as *const u8, bytes as usize, base as *const u8, bytes as usize)?;
            base_view as u64 + (data - base)
        }
        None => rt::host_view(data as *const u8, 0)? as u64,
    };
    Ok((view, Place::Device(device)))
}

/// What a kernel's C wrapper returns (`_inductor.py` writes it): 0 when the kernel ran,
/// otherwise the class of the C++ exception it caught, whose message it hands over.
const FAILED_INDEX: i32 = 2;

/// The wrapper's signature: the kernel's arguments (pointers and int64 sizes) as an array,
/// and a slot for the message of a failure.
type Wrapper = unsafe extern "C" fn(args: *const u64, message: *mut *mut c_char) -> i32;

unsafe extern "C" {
    fn free(ptr: *mut c_void);
}

/// Calls the kernel's wrapper at `f`; a failure goes to the running task's stream.
fn call(f: usize, args: &[u64]) {
    // SAFETY: `f` is the address of a wrapper `_inductor.py` generated with this signature.
    let wrapper: Wrapper = unsafe { std::mem::transmute(f) };
    let mut message: *mut c_char = std::ptr::null_mut();
    let code = unsafe { wrapper(args.as_ptr(), &mut message) };
    if code == 0 {
        return;
    }
    let text = if message.is_null() {
        "a compiled openreg kernel failed".to_string()
    } else {
        // SAFETY: the wrapper hands over a string from strdup, which is ours to free.
        let text = unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned();
        unsafe { free(message.cast()) };
        text
    };
    let class = if code == FAILED_INDEX { rt::FailureClass::Index } else { rt::FailureClass::Runtime };
    rt::fail_task(class, text);
}

// ANCHOR: launch
/// Why a launch failed: an argument eager code would reject too (a `RuntimeError`), or the
/// runtime's error, which keeps its class (a kernel that raised `IndexError` on an idle
/// stream runs at once and fails here).
pub enum LaunchError {
    Argument(String),
    Runtime(rt::Error),
}

impl From<rt::Error> for LaunchError {
    fn from(error: rt::Error) -> Self {
        LaunchError::Runtime(error)
    }
}

/// Queues the kernel at `function` on the current stream of its tensors' device. With a host
/// tensor among the arguments, it also waits for the kernel: the host memory is only borrowed.
pub fn launch(function: usize, args: &[Arg]) -> Result<(), LaunchError> {
    let mut values = Vec::with_capacity(args.len());
    let (mut device, mut host) = (None, false);
    for &arg in args {
        let (value, place) = translate(arg)?;
        match (place, device) {
            (Place::Device(d), Some(first)) if d != first => {
                return Err(LaunchError::Argument(format!("Expected all tensors to be on the same device, but found at least two devices, openreg:{first} and openreg:{d}!")));
            }
            (Place::Device(d), _) => device = Some(d),
            (Place::Host, _) => host = true,
            (Place::Nowhere, _) => {}
        }
        values.push(value);
    }
    let device = device.unwrap_or_else(rt::current_device) as i64;
    let stream = rt::current_stream(device)?;
    stream.launch(move || call(function, &values))?;
    if host {
        stream.synchronize()?;
    }
    Ok(())
}
// ANCHOR_END: launch
// ANCHOR_END: run

// ANCHOR: launch_from_cpp
/// One argument as the C++ side of AOTInductor passes it (csrc/high_level/AOTInductor.cpp).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchArg {
    is_tensor: u8,
    value: u64,
    base: u64,
    bytes: u64,
}

/// [`launch`] for C++: 0, or 2 for an index error and 1 for any other failure, with the
/// message written (truncated, NUL-terminated) into `message`. A panic is a failure too: it
/// must not unwind into C++.
///
/// # Safety
/// `args` points to `count` arguments and `message` to `message_len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openreg_launch_compiled(
    kernel: u64,
    args: *const LaunchArg,
    count: usize,
    message: *mut c_char,
    message_len: usize,
) -> i32 {
    let args: Vec<Arg> = if count == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller passes `count` arguments.
        unsafe { std::slice::from_raw_parts(args, count) }
            .iter()
            .map(|a| if a.is_tensor != 0 { Arg::Tensor { data: a.value, storage: Some((a.base, a.bytes)) } } else { Arg::Value(a.value) })
            .collect()
    };
    let outcome = std::panic::catch_unwind(|| launch(kernel as usize, &args));
    let (code, text) = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(LaunchError::Argument(text))) => (1, text),
        Ok(Err(LaunchError::Runtime(error))) => {
            let index = crate::error::kind_of(&error) == crate::error::ErrorKind::Index;
            (if index { 2 } else { 1 }, error.to_string())
        }
        Err(_) => (1, "a compiled openreg kernel launch panicked".to_string()),
    };
    if message_len > 0 {
        let n = text.len().min(message_len - 1);
        // SAFETY: `message` has `message_len` bytes; we write `n + 1 <= message_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), message.cast::<u8>(), n);
            *message.add(n) = 0;
        }
    }
    code
}
// ANCHOR_END: launch_from_cpp
