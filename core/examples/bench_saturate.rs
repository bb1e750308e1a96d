//! One redis-server driven to saturation, for `bench/run saturate`: many
//! tasks cycle (acquire + release, uncontended) over `names` names, each
//! task on names of its own, as fast as the server answers. Two
//! generators take turns, in rounds of `seconds`: `lockyard` (a
//! `lockyard::redis::Lock` per name, `acquire_async` + `release_async`)
//! and `redis-py` (the commands redis-py's `Lock` sends: SET NX PX, then
//! its compare-and-delete script by EVALSHA), each task on a connection
//! of its own. Prints cycles per second, redis-server's main-thread CPU
//! (to show the server, not this client, is what runs out) and the
//! server's µs per cycle, then lockyard's capacity as a ratio to
//! redis-py's.
//!
//! ```text
//! cargo run --release --example bench_saturate -- redis://127.0.0.1:6379/0 1000 32 5 3
//! ```

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockyard::redis::Lock;

/// redis-py's `Lock.LUA_RELEASE_SCRIPT`.
const REDIS_PY_RELEASE: &str = "local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
return 1";

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Failure> {
    let usage = "usage: bench_saturate <redis url> <names> <tasks> <seconds per round> <rounds>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, names, tasks, seconds, rounds] = &args[..] else {
        return Err(usage.into());
    };
    let (names, tasks): (usize, usize) = (names.parse()?, tasks.parse()?);
    let round = Duration::from_secs_f64(seconds.parse()?);
    let rounds: usize = rounds.parse()?;
    if tasks == 0 || names < tasks {
        return Err("at least one task, and at least as many names as tasks".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut lockyard = Vec::new();
        let mut redis_py = Vec::new();
        println!(
            "{names} names, {tasks} tasks, rounds of {:.0} s:",
            round.as_secs_f64()
        );
        for _ in 0..rounds {
            for generator in ["redis-py", "lockyard"] {
                let measured = measure(url, generator, names, tasks, round).await?;
                println!(
                    "  {generator:<9} {:>8.0} cycles/s, redis-server main thread {:>3.0}% busy, \
                     {:>5.1} µs of its CPU per cycle",
                    measured.per_second,
                    measured.server_busy * 100.0,
                    measured.server_us_per_cycle,
                );
                match generator {
                    "lockyard" => lockyard.push(measured.per_second),
                    _ => redis_py.push(measured.per_second),
                }
            }
        }
        let (ours, theirs) = (median(&mut lockyard), median(&mut redis_py));
        println!(
            "saturated capacity, median of {rounds}: lockyard {ours:.0} cycles/s, \
             redis-py Lock's commands {theirs:.0} cycles/s: {:.2}x",
            ours / theirs
        );
        Ok(())
    })
}

struct Measured {
    per_second: f64,
    server_busy: f64,
    server_us_per_cycle: f64,
}

async fn measure(
    url: &str,
    generator: &str,
    names: usize,
    tasks: usize,
    round: Duration,
) -> Result<Measured, Failure> {
    let client = redis::Client::open(url)?;
    let mut stats = client.get_multiplexed_async_connection().await?;
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = tokio::task::JoinSet::new();
    for task in 0..tasks {
        // Task `task` cycles over names task, task + tasks, …: no two
        // tasks contend, so every cycle is the uncontended one.
        let mine: Vec<String> = (task..names)
            .step_by(tasks)
            .map(|i| format!("saturate-{i}"))
            .collect();
        let (cycles, stop) = (cycles.clone(), stop.clone());
        match generator {
            "lockyard" => {
                let locks = mine
                    .iter()
                    .map(|name| Lock::builder(url, name).build())
                    .collect::<Result<Vec<_>, _>>()?;
                running.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        for lock in &locks {
                            lock.acquire_async(None).await?.release_async().await?;
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok::<_, Failure>(())
                });
            }
            _ => {
                let mut conn = client.get_multiplexed_async_connection().await?;
                let release = redis::Script::new(REDIS_PY_RELEASE);
                running.spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        for name in &mine {
                            let set: Option<String> = redis::cmd("SET")
                                .arg(name)
                                .arg("token")
                                .arg("NX")
                                .arg("PX")
                                .arg(30_000)
                                .query_async(&mut conn)
                                .await?;
                            assert!(set.is_some(), "{name} was taken");
                            let released: i64 = release
                                .key(name)
                                .arg("token")
                                .invoke_async(&mut conn)
                                .await?;
                            assert_eq!(released, 1);
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok::<_, Failure>(())
                });
            }
        }
    }
    // Warm up (connections, scripts loaded), then measure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (before, cpu_before) = (
        cycles.load(Ordering::Relaxed),
        server_cpu(&mut stats).await?,
    );
    let started = Instant::now();
    tokio::time::sleep(round).await;
    let (after, cpu_after) = (
        cycles.load(Ordering::Relaxed),
        server_cpu(&mut stats).await?,
    );
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = running.join_next().await {
        done??;
    }
    let done = (after - before) as f64;
    Ok(Measured {
        per_second: done / elapsed,
        server_busy: (cpu_after - cpu_before) / elapsed,
        server_us_per_cycle: (cpu_after - cpu_before) * 1e6 / done,
    })
}

/// redis-server's main thread's CPU seconds so far (user + system).
async fn server_cpu(conn: &mut redis::aio::MultiplexedConnection) -> Result<f64, Failure> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let field = |name: &str| -> Result<f64, Failure> {
        let value = info
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| format!("no {name} in INFO cpu (Redis 7 or later reports it)"))?;
        Ok(value.trim().parse()?)
    };
    Ok(field("used_cpu_user_main_thread")? + field("used_cpu_sys_main_thread")?)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
