//! Uncontended acquire + release cycles, for `bench/run`: prints the mean
//! microseconds per cycle of one `lockyard::redis::Lock` (`lockyard`), or of
//! the raw floor it is measured against (`floor`: SET NX PX, then a
//! compare-and-delete script by EVALSHA, on one plain connection). The
//! `-async` twins do the same from a task on a current-thread tokio
//! runtime: `acquire_async` + `release_async`, against the floor on one
//! multiplexed async connection of redis-rs on that runtime.
//!
//! ```text
//! cargo run --release --example bench_cycle -- lockyard redis://127.0.0.1:6379/0 bench 2000
//! ```

use std::time::{Duration, Instant};

use lockyard::redis::Lock;

const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

type Cycle<'a> = Box<dyn FnMut() -> Result<(), Box<dyn std::error::Error>> + 'a>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage =
        "usage: bench_cycle lockyard|floor|lockyard-async|floor-async <redis url> <key> <cycles>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [what, url, key, cycles] = &args[..] else {
        return Err(usage.into());
    };
    let cycles: u32 = cycles.parse()?;

    if let Some(what) = what.strip_suffix("-async") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let micros = runtime.block_on(async_cycles(what, url, key, cycles))?;
        println!("{micros:.1}");
        return Ok(());
    }
    let mut cycle: Cycle = match what.as_str() {
        "lockyard" => {
            let lock = Lock::builder(url, key)
                .ttl(Duration::from_secs(30))
                .build()?;
            Box::new(move || {
                lock.acquire(None)?.release()?;
                Ok(())
            })
        }
        "floor" => {
            let mut conn = redis::Client::open(url.as_str())?.get_connection()?;
            let script = redis::Script::new(COMPARE_AND_DELETE);
            let key = key.clone();
            Box::new(move || {
                let set: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg("token")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query(&mut conn)?;
                assert!(set.is_some(), "the key was taken");
                let deleted: i64 = script.key(&key).arg("token").invoke(&mut conn)?;
                assert_eq!(deleted, 1);
                Ok(())
            })
        }
        _ => return Err(usage.into()),
    };
    // Warm up: connect, load the scripts.
    for _ in 0..cycles.min(100) {
        cycle()?;
    }
    let started = Instant::now();
    for _ in 0..cycles {
        cycle()?;
    }
    println!(
        "{:.1}",
        started.elapsed().as_secs_f64() * 1e6 / f64::from(cycles)
    );
    Ok(())
}

/// Times `cycles` runs of `$cycle` (an expression awaited in a loop) after
/// a warm-up, in mean microseconds.
macro_rules! time_cycles {
    ($cycles:expr, $cycle:expr) => {{
        for _ in 0..$cycles.min(100) {
            $cycle;
        }
        let started = Instant::now();
        for _ in 0..$cycles {
            $cycle;
        }
        started.elapsed().as_secs_f64() * 1e6 / f64::from($cycles)
    }};
}

async fn async_cycles(
    what: &str,
    url: &str,
    key: &str,
    cycles: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    Ok(match what {
        "lockyard" => {
            let lock = Lock::builder(url, key)
                .ttl(Duration::from_secs(30))
                .build()?;
            time_cycles!(
                cycles,
                lock.acquire_async(None).await?.release_async().await?
            )
        }
        "floor" => {
            let client = redis::Client::open(url)?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let script = redis::Script::new(COMPARE_AND_DELETE);
            time_cycles!(cycles, {
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg("token")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await?;
                assert!(set.is_some(), "the key was taken");
                let deleted: i64 = script.key(key).arg("token").invoke_async(&mut conn).await?;
                assert_eq!(deleted, 1);
            })
        }
        _ => return Err("usage: lockyard-async or floor-async".into()),
    })
}
