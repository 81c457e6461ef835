//! Touching device memory from host code ends the process, but only after saying which
//! allocation was touched and what to do instead.

use std::process::Command;

#[test]
fn host_access_to_device_memory_is_reported() {
    if std::env::var_os("OPENREG_FAULT_CHILD").is_some() {
        let p = openreg_runtime::malloc(1, 4096).unwrap();
        // SAFETY: deliberately not: this is the illegal access under test.
        let v = unsafe { std::ptr::read_volatile(p.add(8)) };
        println!("read {v} without faulting");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["--exact", "host_access_to_device_memory_is_reported", "--nocapture"])
        .env("OPENREG_FAULT_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc_sigsegv()), "stderr: {stderr}");
    assert!(stderr.contains("illegal memory access") && stderr.contains("openreg:1"), "{stderr}");
    assert!(stderr.contains("(4096 bytes)") && stderr.contains("tensor.cpu()"), "{stderr}");
}

fn libc_sigsegv() -> i32 {
    11
}
