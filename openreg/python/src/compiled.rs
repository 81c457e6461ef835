//! Running Inductor's compiled C++ kernels on the device (torch_openreg/openreg/_inductor.py):
//! a kernel is a C function over raw pointers and int64 sizes; it must see the runtime's
//! read/write view of device memory, never the protected addresses PyTorch holds, and it must
//! run in order with the rest of the device's work, on the current stream.

use openreg_runtime as rt;

/// One argument as Python passes it: a tensor's data pointer with its storage's base and
/// length (`is_tensor`), or an integer.
pub type Arg = (bool, u64, u64, u64);

/// The argument as the kernel sees it: device addresses translated to the runtime's view.
fn translate(arg: Arg) -> rt::Result<(u64, Option<usize>)> {
    let (is_tensor, value, base, len) = arg;
    if !is_tensor || len == 0 {
        return Ok((value, None));
    }
    match rt::device_of(value as *const u8) {
        None => Ok((value, None)), // host memory (a CPU tensor): usable as is
        Some(device) => {
            let view = rt::host_view_within(base as *const u8, len as usize, base as *const u8, len as usize)?;
            Ok((view as u64 + (value - base), Some(device)))
        }
    }
}

macro_rules! call_with {
    ($f:expr, $a:expr, $($i:literal),*) => {{
        let f: unsafe extern "C" fn($(call_with!(@ty $i)),*) = unsafe { std::mem::transmute($f) };
        unsafe { f($($a[$i]),*) }
    }};
    (@ty $i:literal) => { u64 };
}

/// The most arguments a kernel may take (Inductor's kernels take one per buffer and size).
pub const MAX_ARGS: usize = 16;

/// Calls the C function at `f` with `a` as its integer-class arguments (pointers, int64).
fn call(f: usize, a: &[u64]) {
    match a.len() {
        0 => call_with!(f, a,),
        1 => call_with!(f, a, 0),
        2 => call_with!(f, a, 0, 1),
        3 => call_with!(f, a, 0, 1, 2),
        4 => call_with!(f, a, 0, 1, 2, 3),
        5 => call_with!(f, a, 0, 1, 2, 3, 4),
        6 => call_with!(f, a, 0, 1, 2, 3, 4, 5),
        7 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6),
        8 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7),
        9 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8),
        10 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
        11 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        12 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
        13 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12),
        14 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13),
        15 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14),
        16 => call_with!(f, a, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        n => unreachable!("{n} arguments: checked by launch"),
    }
}

// ANCHOR: launch
/// Queues the kernel at `function` on the current stream of its tensors' device. With a host
/// tensor among the arguments, it also waits for the kernel: the host memory is only borrowed.
pub fn launch(function: usize, args: &[Arg]) -> Result<(), String> {
    if args.len() > MAX_ARGS {
        return Err(format!("a compiled openreg kernel takes at most {MAX_ARGS} arguments, got {}", args.len()));
    }
    let mut values = Vec::with_capacity(args.len());
    let (mut device, mut host) = (None, false);
    for &arg in args {
        let (value, on) = translate(arg).map_err(|e| e.to_string())?;
        match (on, device) {
            (Some(d), Some(first)) if d != first => {
                return Err(format!("Expected all tensors to be on the same device, but found at least two devices, openreg:{first} and openreg:{d}!"));
            }
            (Some(d), _) => device = Some(d),
            (None, _) => host |= arg.0 && arg.3 > 0,
        }
        values.push(value);
    }
    let device = device.unwrap_or_else(rt::current_device) as i64;
    let stream = rt::current_stream(device).map_err(|e| e.to_string())?;
    stream.launch(move || call(function, &values)).map_err(|e| e.to_string())?;
    if host {
        stream.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(())
}
// ANCHOR_END: launch
