//! Host code that dereferences a device pointer is the simulation of an illegal memory access.
//! It still ends the process with SIGSEGV, but first says which device allocation was touched
//! and what to do instead. The handler uses only async-signal-safe calls: no allocation, no
//! blocking lock, `write(2)` to stderr. It knows nothing of device memory: the memory module
//! installs it with a function that describes an address.

use std::mem::MaybeUninit;
use std::sync::{Once, OnceLock};

/// What the handler may learn of a faulting address, without blocking: `None` for an address
/// that is not device memory, else its device and the live allocation `(base, len)` it is in.
pub(crate) type Describe = fn(addr: usize) -> Option<(usize, Option<(usize, usize)>)>;
static DESCRIBE: OnceLock<Describe> = OnceLock::new();

static INSTALL: Once = Once::new();
static mut PREVIOUS: [MaybeUninit<libc::sigaction>; 2] = [MaybeUninit::zeroed(), MaybeUninit::zeroed()];
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

pub(crate) fn install(describe: Describe) {
    DESCRIBE.get_or_init(|| describe);
    INSTALL.call_once(|| unsafe {
        // SAFETY: runs once; PREVIOUS is written here before the handler can run.
        for (i, &sig) in SIGNALS.iter().enumerate() {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fault as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let previous = &raw mut PREVIOUS[i];
            libc::sigaction(sig, &action, (*previous).as_mut_ptr());
        }
    });
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // Set before the handler: a read of an initialised OnceLock is one atomic load.
    if let Some((device, allocation)) = DESCRIBE.get().and_then(|describe| describe(addr)) {
        let mut msg = Message::new();
        msg.push("\nopenreg: illegal memory access: host code touched device memory at ");
        msg.push_hex(addr);
        msg.push(" on openreg:");
        msg.push_dec(device);
        match allocation {
            Some((base, len)) => {
                msg.push(", inside the allocation at ");
                msg.push_hex(base);
                msg.push(" (");
                msg.push_dec(len);
                msg.push(" bytes)");
            }
            None => msg.push(", outside any live allocation (freed memory?)"),
        }
        msg.push(".\nDevice memory is not host-accessible: copy the tensor to the host first \
                  (tensor.cpu()), or go through the runtime (memcpy, a kernel launched on a \
                  stream) which reaches it through host_view().\n");
        msg.write_stderr();
    }
    // Put the previous handler back and return: the access faults again and the previous
    // handler (Python's faulthandler, or the default action) ends the process.
    let i = if sig == libc::SIGSEGV { 0 } else { 1 };
    // SAFETY: PREVIOUS[i] was filled by install() before this handler was installed.
    unsafe {
        let previous = &raw const PREVIOUS[i];
        libc::sigaction(sig, (*previous).as_ptr(), std::ptr::null_mut());
    }
}

/// A fixed buffer for formatting inside a signal handler.
struct Message {
    buf: [u8; 768],
    len: usize,
}

impl Message {
    fn new() -> Self {
        Message { buf: [0; 768], len: 0 }
    }
    fn push_bytes(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }
    fn push(&mut self, s: &str) {
        self.push_bytes(s.as_bytes());
    }
    fn push_dec(&mut self, mut v: usize) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.push_bytes(&digits[i..]);
    }
    fn push_hex(&mut self, v: usize) {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for (k, d) in digits[2..].iter_mut().enumerate() {
            let nibble = (v >> (60 - 4 * k)) & 0xf;
            *d = b"0123456789abcdef"[nibble];
        }
        self.push_bytes(&digits);
    }
    fn write_stderr(&self) {
        // SAFETY: write(2) is async-signal-safe; the buffer is valid for `len` bytes.
        unsafe { libc::write(2, self.buf.as_ptr().cast(), self.len) };
    }
}
