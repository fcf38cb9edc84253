//! What the process holds on its heap, counted by the allocator (this test binary's global
//! allocator wraps the system's and adds up what is live), and a way to read it for one piece
//! of work alone: the work runs as an ignored test of this binary in a child process of its
//! own, so that no other test's allocations count, whatever runs the tests (cargo-nextest gives
//! each test a process, `cargo test` runs them side by side).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the octets live.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to `System` unchanged; the counter only watches.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

/// Octets live on the heap now.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Set in the child process that [`measure_alone`] starts.
const CHILD: &str = "DWELLMQ_HEAP_MEASUREMENT";

/// Whether this process is a measurement's own (the ignored test that measures runs only there).
pub fn in_measurement_process() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// What the measurement reports, one line each: `MEASURED <name> <value>`.
pub fn report(name: &str, value: f64) {
    println!("MEASURED {name} {value}");
}

/// Runs the ignored test `test` (its full path in this binary) alone in a child process and
/// returns what it reported, by name. The child is bounded by the test's own waits.
pub fn measure_alone(test: &str) -> Vec<(String, f64)> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the measurement process runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the measurement {test} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reported: Vec<(String, f64)> = stdout
        .lines()
        // libtest may have started the line (`test ... `) before the report.
        .filter_map(|line| line.split_once("MEASURED ").map(|(_, rest)| rest))
        .filter_map(|rest| {
            let (name, value) = rest.split_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect();
    assert!(!reported.is_empty(), "{test} reported nothing:\n{stdout}");
    reported
}

/// The value reported under `name`.
pub fn reported(all: &[(String, f64)], name: &str) -> f64 {
    all.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{name} not reported: {all:?}"))
}
