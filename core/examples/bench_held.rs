//! Many locks held by one process, for `bench/run held`: acquires
//! `locks` Redis locks one after another (against as many raw `SET NX PX`
//! round trips on one plain connection, the floor, measured before and
//! after), holds them for `seconds` while counting the refresh exchanges
//! (pipelines, and refreshes sent alone) per refresh interval, the
//! refresh scripts redis-server ran and the process's RSS, then checks
//! that every lock is still held and healthy and releases them all.
//!
//! ```text
//! cargo run --release --example bench_held -- redis://127.0.0.1:6379/0 10000 300
//! ```

use std::time::{Duration, Instant};

use lockyard::redis::{refresh_exchanges, Lock};

const TTL: Duration = Duration::from_secs(30);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: bench_held <redis url> <locks> <seconds>";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, count, seconds] = &args[..] else {
        return Err(usage.into());
    };
    let count: usize = count.parse()?;
    let hold_for = Duration::from_secs_f64(seconds.parse()?);
    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;

    let floor_before = set_nx_round_trips(&mut conn, count)?;
    let rss_before = rss_kib()?;
    let locks = (0..count)
        .map(|i| Lock::builder(url, format!("held-{i}")).ttl(TTL).build())
        .collect::<Result<Vec<_>, _>>()?;
    let rss_built = rss_kib()?;
    let started = Instant::now();
    let guards = locks
        .iter()
        .map(|lock| lock.acquire(Some(Duration::from_secs(10))))
        .collect::<Result<Vec<_>, _>>()?;
    let acquiring = started.elapsed();
    let floor_after = set_nx_round_trips(&mut conn, count)?;
    let floor = (floor_before + floor_after) / 2;
    println!(
        "acquire {count} locks: {:.3} s; {count} SET NX PX round trips: {:.3} s (before {:.3}, after {:.3}); ratio {:.2}",
        acquiring.as_secs_f64(),
        floor.as_secs_f64(),
        floor_before.as_secs_f64(),
        floor_after.as_secs_f64(),
        acquiring.as_secs_f64() / floor.as_secs_f64()
    );

    // The lease's refresh period (ttl / 9 by default).
    let interval = TTL / 9;
    let (exchanges, scripts) = (refresh_exchanges(), evalsha_calls(&mut conn)?);
    let held_since = Instant::now();
    let rss_acquired = rss_kib()?;
    let mut peak_rss = rss_acquired;
    let mut next_report = held_since + Duration::from_secs(30).min(hold_for);
    while held_since.elapsed() < hold_for {
        std::thread::sleep(Duration::from_secs(1).min(hold_for));
        peak_rss = peak_rss.max(rss_kib()?);
        if Instant::now() >= next_report {
            let intervals = held_since.elapsed().as_secs_f64() / interval.as_secs_f64();
            println!(
                "  {:>4.0} s: {} refresh exchanges, {} refresh scripts run, {intervals:.1} intervals",
                held_since.elapsed().as_secs_f64(),
                refresh_exchanges() - exchanges,
                evalsha_calls(&mut conn)? - scripts,
            );
            next_report += Duration::from_secs(30);
        }
    }
    let intervals = held_since.elapsed().as_secs_f64() / interval.as_secs_f64();
    let sent = (refresh_exchanges() - exchanges) as f64;
    let refreshed = (evalsha_calls(&mut conn)? - scripts) as f64;
    let unhealthy = guards
        .iter()
        .filter(|guard| guard.check_health().is_err())
        .count();
    let mut not_held = 0;
    for lock in &locks {
        if !lock.locked()? {
            not_held += 1;
        }
    }
    println!(
        "held {count} locks for {:.0} s ({intervals:.1} refresh intervals of {:.2} s): \
         {sent:.0} refresh exchanges, {:.2} per interval per 500 locks; \
         {refreshed:.0} refresh scripts run, {:.2} per lock per interval",
        held_since.elapsed().as_secs_f64(),
        interval.as_secs_f64(),
        sent / intervals / (count as f64 / 500.0),
        refreshed / intervals / count as f64,
    );
    println!(
        "RSS: {rss_before} KiB before, {rss_built} KiB with the Lock objects built, \
         {rss_acquired} KiB once acquired, {peak_rss} KiB at most while held: \
         {:.2} KiB per held lock ({:.2} the Lock object, {:.2} its hold)",
        (peak_rss - rss_before) as f64 / count as f64,
        (rss_built - rss_before) as f64 / count as f64,
        (peak_rss - rss_built) as f64 / count as f64,
    );
    println!("lost: {unhealthy} unhealthy guards, {not_held} locks no longer held");
    let releasing = Instant::now();
    drop(guards);
    println!(
        "release {count} locks: {:.3} s",
        releasing.elapsed().as_secs_f64()
    );
    if unhealthy + not_held > 0 {
        return Err(format!("{} locks lost", unhealthy.max(not_held)).into());
    }
    Ok(())
}

/// `count` sequential SET NX PX round trips on fresh keys, then their
/// deletion (not timed).
fn set_nx_round_trips(
    conn: &mut redis::Connection,
    count: usize,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let started = Instant::now();
    for i in 0..count {
        let _: Option<String> = redis::cmd("SET")
            .arg(format!("floor-{i}"))
            .arg("token")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(conn)?;
    }
    let took = started.elapsed();
    let mut pipe = redis::pipe();
    for i in 0..count {
        pipe.cmd("DEL").arg(format!("floor-{i}")).ignore();
    }
    pipe.query::<()>(conn)?;
    Ok(took)
}

/// Scripts redis-server ran by EVALSHA so far.
fn evalsha_calls(conn: &mut redis::Connection) -> Result<u64, Box<dyn std::error::Error>> {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(conn)?;
    Ok(stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(Ok(0), str::parse)?)
}

fn rss_kib() -> Result<u64, Box<dyn std::error::Error>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("VmRSS without a figure")?
        .parse()?)
}
