//! Signal handling without dependencies: a handler that only records which signal came, for
//! the node's `pause` and `workload` programs.

use std::sync::atomic::{AtomicI32, Ordering};

/// SIGINT, SIGTERM and SIGCHLD on Linux.
pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;
pub const SIGCHLD: i32 = 17;

static LAST: AtomicI32 = AtomicI32::new(0);

unsafe extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn pause() -> i32;
}

extern "C" fn record(signum: i32) {
    LAST.store(signum, Ordering::SeqCst);
}

/// Record `signum` when it arrives instead of taking its default action (which, for PID 1 in
/// a container, is to ignore SIGTERM).
pub fn catch(signum: i32) {
    // SAFETY: `record` only stores to an atomic, which is async-signal-safe.
    unsafe {
        signal(signum, record);
    }
}

/// The last signal caught, clearing it (0: none).
pub fn take() -> i32 {
    LAST.swap(0, Ordering::SeqCst)
}

/// Sleep until a signal arrives.
pub fn wait_for_signal() {
    // SAFETY: pause(2) takes no arguments and only returns on a signal.
    unsafe {
        pause();
    }
}

/// Reap every exited child without blocking.
pub fn reap_children() {
    let mut status = 0i32;
    // SAFETY: waitpid with WNOHANG (1) and a valid status pointer.
    while unsafe { waitpid(-1, &mut status, 1) } > 0 {}
}
