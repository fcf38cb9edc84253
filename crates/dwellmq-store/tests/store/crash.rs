//! A store killed with SIGKILL at random moments: every confirmed message is there after the
//! restart, and no message whose forget was confirmed comes back.
//!
//! The test runs itself as the child process (selected by an environment variable); the
//! child publishes and acks as fast as it can and reports each completion on stdout. A kill
//! leaves the page cache intact, so this checks that nothing is confirmed before its commit
//! and that recovery reads a consistent file; a power cut is redb's fsync ordering.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::{payload, Scratch};
use dwellmq_store::{Op, Store, StoreOptions};

const CHILD: &str = "DWELLMQ_STORE_CRASH_CHILD";
const ROUNDS: u64 = 20;

#[test]
fn confirmed_messages_survive_sigkill_and_confirmed_forgets_stay_forgotten() {
    if let Ok(dir) = std::env::var(CHILD) {
        child(&dir);
        return;
    }
    let dir = Scratch::new("crash");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    println!("crash test seed {seed}");
    let mut rng = seed;
    for round in 0..ROUNDS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let kill_after = 20 + rng % 400;
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            // A filter, not `--exact`: in the store's test binary the test's name carries its
            // module path, and this name selects it alone.
            .args([
                "confirmed_messages_survive_sigkill_and_confirmed_forgets_stay_forgotten",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, dir.path())
            .env("ROUND", round.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let (mut confirmed, mut forgotten) = (BTreeSet::new(), BTreeSet::new());
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut parts = line.split_whitespace();
            let (Some(what), Some(seq)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(seq) = seq.parse::<u64>() else {
                continue;
            };
            match what {
                "confirmed" => {
                    confirmed.insert(seq);
                }
                "forgotten" => {
                    forgotten.insert(seq);
                }
                _ => continue,
            }
            if confirmed.len() as u64 >= kill_after {
                break;
            }
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        assert!(
            confirmed.len() as u64 >= kill_after,
            "round {round}: the child stopped early"
        );

        let store = Store::open(dir.path()).expect("reopen after the kill");
        let stored: BTreeSet<u64> = store
            .snapshot()
            .unwrap()
            .queue_messages(round, 0, usize::MAX)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        // Odd messages are never acked: each confirmed one must be there. An even one whose
        // forget was submitted but not yet reported may be either.
        for seq in confirmed.iter().filter(|s| *s % 2 == 1) {
            assert!(
                stored.contains(seq),
                "seed {seed} round {round}: confirmed message {seq} lost"
            );
        }
        for seq in &forgotten {
            assert!(
                !stored.contains(seq),
                "seed {seed} round {round}: forgotten message {seq} came back"
            );
        }
    }
}

/// Publishes persistent messages with a window of 64; acks every other one once confirmed;
/// prints each confirmed persist and each confirmed forget. Runs until killed (or 60 s).
fn child(dir: &str) {
    let queue: u64 = std::env::var("ROUND")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    // Odd rounds commit without quick-repair: their restart goes through redb's full repair
    // (and the open's read-only check finds the file needs it).
    let options = StoreOptions {
        quick_repair: queue.is_multiple_of(2),
        ..StoreOptions::default()
    };
    let store = Store::open_with(dir, options).expect("child open");
    let (tx, rx) = mpsc::channel::<(bool, u64)>();
    let started = Instant::now();
    let mut in_flight = 0;
    let mut seq = 0u64;
    let mut out = std::io::stdout().lock();
    while started.elapsed() < Duration::from_secs(60) {
        while in_flight < 64 {
            let tx = tx.clone();
            let op = Op::Persist {
                queue,
                seq,
                expires_at_ms: 0,
                delivered: false,
                message: payload("k", &[b'x'; 200]),
            };
            store.submit(vec![op], move |r| {
                if r.is_ok() {
                    let _ = tx.send((true, seq));
                }
            });
            seq += 1;
            in_flight += 1;
        }
        let Ok((persisted, s)) = rx.recv() else { break };
        if persisted {
            in_flight -= 1;
            let _ = writeln!(out, "confirmed {s}");
            if s.is_multiple_of(2) {
                let tx = tx.clone();
                store.submit(vec![Op::Forget { queue, seq: s }], move |r| {
                    if r.is_ok() {
                        let _ = tx.send((false, s));
                    }
                });
            }
        } else {
            let _ = writeln!(out, "forgotten {s}");
        }
        let _ = out.flush();
    }
}
