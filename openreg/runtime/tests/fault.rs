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

#[test]
fn a_child_forked_after_initialisation_is_refused() {
    let p = openreg_runtime::malloc(0, 64).unwrap();
    // SAFETY: the child only calls async-signal-safe-enough runtime checks and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let refused = openreg_runtime::malloc(0, 64).err().map(|e| e.to_string())
            == Some(openreg_runtime::Error::BadFork.to_string());
        let free_refused = openreg_runtime::free(p).is_err();
        unsafe { libc::_exit(if refused && free_refused && openreg_runtime::is_in_bad_fork() { 0 } else { 1 }) };
    }
    let mut status = 0;
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
    assert!(!openreg_runtime::is_in_bad_fork());
    openreg_runtime::free(p).unwrap();
}
