//! Uncontended acquire + release cycles of one `lockyard::redis::Lock`,
//! for `bench/run`: prints the mean microseconds per cycle.
//!
//! ```text
//! cargo run --release --example bench_cycle -- redis://127.0.0.1:6379/0 bench-lock 2000
//! ```

use std::time::{Duration, Instant};

use lockyard::redis::Lock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: bench_cycle <redis url> <lock name> <cycles>";
    let url = args.next().ok_or(usage)?;
    let name = args.next().ok_or(usage)?;
    let cycles: u32 = args.next().ok_or(usage)?.parse()?;

    let lock = Lock::builder(url, name)
        .ttl(Duration::from_secs(30))
        .build()?;
    // Warm up: the first acquire connects and loads the scripts.
    for _ in 0..cycles.min(100) {
        lock.acquire(None)?.release()?;
    }
    let started = Instant::now();
    for _ in 0..cycles {
        lock.acquire(None)?.release()?;
    }
    let per_cycle = started.elapsed() / cycles;
    println!("{:.1}", per_cycle.as_secs_f64() * 1e6);
    Ok(())
}
