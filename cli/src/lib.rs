//! `lockyard`: run a command while holding a distributed lock, look at a
//! lock, break one, or run a command only while elected leader.
//!
//! One implementation behind three entry points: this crate's binary
//! (`cargo install`), the wheel's console script and the gem's executable.
//! Each calls [`main`] on its process's main thread, the interpreters'
//! own handlers for the forwarded signals reset first (see `signals`).

mod backend;
mod exit;
mod hold;
mod holds;
mod output;
mod progress;
mod signals;
mod status;
mod supervise;

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lockyard::{etcd, gcs, quorum, redis};

use backend::Backend;
use exit::Failure;
use hold::Plan;
use output::say;
use signals::Signals;

/// The exit statuses, as every `--help` that runs COMMAND lists them.
macro_rules! exit_statuses {
    () => {
        "Exit status:
  COMMAND's own when it ran to its end (128+N if it died of signal N)
  64  usage or configuration error (COMMAND never started)
  69  backend unreachable (COMMAND never started)
  75  not acquired before --timeout (COMMAND never started)
  76  the lock was lost and COMMAND was terminated for it
  127 COMMAND could not be started"
    };
}

const LOCK_HELP: &str = concat!(
    "Example:\n  lockyard lock --ttl 60 --timeout 600 deploy-prod -- ./deploy.sh --env prod\n\n",
    "COMMAND gets LOCKYARD_NAME and LOCKYARD_FENCING_TOKEN in its environment and runs in its\n",
    "own process group; SIGINT, SIGTERM and SIGHUP sent to lockyard are passed on to it, and the\n",
    "lock is released after it exits. While waiting, one line on stderr says who holds NAME.\n\n",
    exit_statuses!()
);

const ELECT_HELP: &str = concat!(
    "Example:\n  lockyard elect --ttl 15 --value \"$(hostname)\" scheduler -- ./run-scheduler\n\n",
    "The campaign runs under a session of --ttl; COMMAND is stopped like a lost lock's when\n",
    "leadership is lost (exit 76).\n\n",
    exit_statuses!()
);

const URL_HELP: &str =
    "Backend: redis://, rediss://, unix:// (Redis), redis+sentinel://SENTINEL,…/MASTER \
     (Redis behind Sentinel); several --url (a quorum of \
     Redis servers); etcd://HOST:2379,… or etcds:// (etcd); \
     gs://BUCKET/PREFIX (Google Cloud Storage, object PREFIX/NAME). \
     Default: $LOCKYARD_URL, then redis://127.0.0.1:6379/0";

#[derive(Parser)]
#[command(
    name = "lockyard",
    version,
    about = "Distributed locks for shell scripts and CI pipelines",
    after_help = exit_statuses!()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run COMMAND while holding the lock NAME
    #[command(after_help = LOCK_HELP)]
    Lock(LockArgs),
    /// Show who holds NAME and who waits (exit 0 if held, 1 if free)
    #[command(after_help = "Example:\n  lockyard status --json deploy-prod\n\n\
        Exit status: 0 held, 1 free, 64 usage error, 69 backend unreachable")]
    Status(StatusArgs),
    /// Remove every holder of NAME (break-glass; needs --force)
    #[command(after_help = "Example:\n  lockyard release --force deploy-prod\n\n\
        The former holders turn unhealthy at their next refresh (a `lockyard lock` \
        then stops its command and exits 76); the next grant still gets a larger \
        fencing token.\n\nExit status: 0 done, 64 usage error, 69 backend unreachable")]
    Release(ReleaseArgs),
    /// Run COMMAND only while elected leader of NAME
    #[command(after_help = ELECT_HELP)]
    Elect(ElectArgs),
}

#[derive(Args)]
struct Urls {
    /// Where the lock lives (repeat for a quorum)
    #[arg(long = "url", value_name = "URL", help = URL_HELP)]
    urls: Vec<String>,
}

impl Urls {
    fn backend(&self) -> Result<Backend, Failure> {
        Backend::from_urls(&self.urls, std::env::var("LOCKYARD_URL").ok())
    }
}

#[derive(Args)]
struct LockArgs {
    #[command(flatten)]
    urls: Urls,
    /// Take one of N slots (a WaitGroup) instead of an exclusive lock (Redis, etcd)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Take a shared read lock (quorum only)
    #[arg(long)]
    read: bool,
    /// Seconds the lock outlives this process if it dies
    #[arg(long, value_name = "S", default_value = "30", value_parser = positive_seconds)]
    ttl: Duration,
    /// Seconds to wait for the lock (0: try once; default: forever)
    #[arg(long, value_name = "S", value_parser = seconds)]
    timeout: Option<Duration>,
    /// Seconds between SIGTERM and SIGKILL when the lock is lost
    #[arg(long, value_name = "S", default_value = "10", value_parser = seconds)]
    grace: Duration,
    /// No line on stderr while waiting
    #[arg(long)]
    quiet: bool,
    /// The lock's name
    #[arg(value_name = "NAME", value_parser = name)]
    name: String,
    /// The command to run while holding it, after `--`
    #[arg(value_name = "COMMAND", last = true, required = true)]
    command: Vec<OsString>,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    urls: Urls,
    /// One JSON object on stdout
    #[arg(long)]
    json: bool,
    #[arg(value_name = "NAME", value_parser = name)]
    name: String,
}

#[derive(Args)]
struct ReleaseArgs {
    #[command(flatten)]
    urls: Urls,
    /// Yes, remove every holder, whoever holds it
    #[arg(long)]
    force: bool,
    #[arg(value_name = "NAME", value_parser = name)]
    name: String,
}

#[derive(Args)]
struct ElectArgs {
    /// Where the election lives (one Redis server or Cluster, or an etcd cluster)
    #[arg(long, value_name = "URL", help = URL_HELP)]
    url: Option<String>,
    /// Seconds leadership outlives this process if it dies
    #[arg(long, value_name = "S", default_value = "15", value_parser = positive_seconds)]
    ttl: Duration,
    /// Seconds the name stays barred after a leader was lost without
    /// resigning (its process died or was cut off), so that a paused
    /// leader's command is surely stopped before the next one starts
    #[arg(long, value_name = "S", default_value = "0", value_parser = seconds)]
    lock_delay: Duration,
    /// Who campaigns: shown as the leader's value
    #[arg(long, value_name = "ID")]
    value: String,
    /// Seconds between SIGTERM and SIGKILL when leadership is lost
    #[arg(long, value_name = "S", default_value = "10", value_parser = seconds)]
    grace: Duration,
    /// No line on stderr while waiting
    #[arg(long)]
    quiet: bool,
    #[arg(value_name = "NAME", value_parser = name)]
    name: String,
    /// The command to run while leader, after `--`
    #[arg(value_name = "COMMAND", last = true, required = true)]
    command: Vec<OsString>,
}

fn seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} must be 0 or more seconds"))
}

fn positive_seconds(text: &str) -> Result<Duration, String> {
    match seconds(text)? {
        d if d.is_zero() => Err("must be more than 0 seconds".to_owned()),
        d => Ok(d),
    }
}

fn name(text: &str) -> Result<String, String> {
    match text {
        "" => Err("the name must not be empty".to_owned()),
        name => Ok(name.to_owned()),
    }
}

/// Runs the command line `args` (without the program's name) to its end
/// and returns the exit status, having printed what the user must read.
/// Call it on the process's main thread: COMMAND's death signal follows
/// the thread that started it.
pub fn main<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let program = std::iter::once(OsString::from("lockyard"));
    let cli = match Cli::try_parse_from(program.chain(args.into_iter().map(Into::into))) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's own status for usage errors is 2; ours is EX_USAGE.
            return if e.use_stderr() { exit::USAGE as u8 } else { 0 };
        }
    };
    let status = match run(cli.command) {
        Ok(status) => status,
        Err(failure) => {
            say!("lockyard: {failure}");
            failure.status
        }
    };
    status.clamp(0, 255) as u8
}

fn run(command: Command) -> Result<i32, Failure> {
    match command {
        Command::Lock(args) => lock(args),
        Command::Status(args) => status::status(&args.urls.backend()?, &args.name, args.json),
        Command::Release(args) => status::release(&args.urls.backend()?, &args.name, args.force),
        Command::Elect(args) => elect(args),
    }
}

fn lock(args: LockArgs) -> Result<i32, Failure> {
    let backend = args.urls.backend()?;
    if args.read && !matches!(backend, Backend::Quorum(_)) {
        return Err(Failure::usage(
            "--read needs several --url (a quorum of Redis servers)",
        ));
    }
    if args.limit.is_some() && !matches!(backend, Backend::Redis(_) | Backend::Etcd(_)) {
        return Err(Failure::usage(
            "--limit needs a single Redis URL or an etcd URL",
        ));
    }
    let signals = Signals::install()?;
    let name = args.name.clone();
    let mut describe: Box<dyn Fn() -> Option<String> + Send> = Box::new(|| None);
    let mut hold: Box<dyn hold::Hold> = match backend {
        Backend::Redis(url) => {
            let describe_url = url.clone();
            let describe_name = name.clone();
            describe = Box::new(move || holds::describe_redis(&describe_url, &describe_name));
            match args.limit {
                Some(limit) => Box::new(holds::Slot {
                    group: Box::new(
                        redis::WaitGroup::builder(url, &name, limit)
                            .ttl(args.ttl)
                            .build()?,
                    ),
                    token: None,
                }),
                None => Box::new(
                    redis::Lock::builder(url, &name)
                        .ttl(args.ttl)
                        .identity_prefix(hostname())
                        .build()?,
                ),
            }
        }
        Backend::Etcd(url) => {
            let describe_url = url.clone();
            let describe_name = name.clone();
            describe = Box::new(move || holds::describe_etcd(&describe_url, &describe_name));
            match args.limit {
                Some(limit) => Box::new(holds::Slot {
                    group: Box::new(
                        etcd::WaitGroup::builder(url, &name, limit)
                            .ttl(args.ttl)
                            .build()?,
                    ),
                    token: None,
                }),
                None => Box::new(
                    etcd::Lock::builder(url, &name)
                        .ttl(args.ttl)
                        .identity_prefix(hostname())
                        .build()?,
                ),
            }
        }
        Backend::Quorum(urls) => Box::new(holds::QuorumLock {
            lock: quorum::RwLock::builder(urls, &name).ttl(args.ttl).build()?,
            read: args.read,
        }),
        Backend::Gcs { bucket, prefix } => Box::new(
            gcs::Lock::builder(bucket, Backend::object(&prefix, &name))
                .ttl(args.ttl)
                // A given prefix is the whole identity (the gem's meaning):
                // two commands must never be one holder, not even two with
                // one hostname and pid (pid 1 in two containers).
                .instance_identity_prefix(format!(
                    "{}-{}-{:016x}",
                    hostname(),
                    std::process::id(),
                    std::hash::BuildHasher::hash_one(
                        &std::collections::hash_map::RandomState::new(),
                        std::time::SystemTime::now()
                    )
                ))
                .build()?,
        ),
    };
    hold::run(
        hold.as_mut(),
        Plan {
            name: &name,
            timeout: args.timeout,
            grace: args.grace,
            quiet: args.quiet,
            command: &args.command,
            signals: &signals,
            describe,
        },
    )
}

fn elect(args: ElectArgs) -> Result<i32, Failure> {
    let urls: Vec<String> = args.url.iter().cloned().collect();
    let backend = Backend::from_urls(&urls, std::env::var("LOCKYARD_URL").ok())?;
    if args.value.is_empty() {
        return Err(Failure::usage("--value must not be empty"));
    }
    // The elections, sessions and locks of both backends share their names.
    macro_rules! elect_on {
        ($backend:ident, $url:expr, $describe:path) => {{
            let url = $url;
            // Creating the session writes to the server: check the name (the
            // lock's rules, which the election shares) first.
            $backend::Lock::builder(url.as_str(), &args.name).build()?;
            let signals = Signals::install()?;
            let session = $backend::Session::builder(url.as_str())
                .ttl(args.ttl)
                .lock_delay(args.lock_delay)
                .build()?;
            let mut leadership = holds::Leadership {
                election: $backend::Election::new(&url, &args.name, &session)?,
                session,
                value: args.value.clone(),
            };
            let describe = move |name: &str| $describe(&url, name);
            run_elected(&mut leadership, &args, &signals, describe)
        }};
    }
    match backend {
        Backend::Redis(url) => elect_on!(redis, url, holds::describe_redis),
        Backend::Etcd(url) => elect_on!(etcd, url, holds::describe_etcd),
        _ => Err(Failure::usage("elect needs a Redis or etcd URL")),
    }
}

/// Runs COMMAND while `leadership` of the election lasts.
fn run_elected(
    leadership: &mut dyn hold::Hold,
    args: &ElectArgs,
    signals: &Signals,
    describe: impl Fn(&str) -> Option<String> + Send + 'static,
) -> Result<i32, Failure> {
    let name = args.name.clone();
    hold::run(
        leadership,
        Plan {
            name: &args.name,
            timeout: None,
            grace: args.grace,
            quiet: args.quiet,
            command: &args.command,
            signals,
            describe: Box::new(move || describe(&name)),
        },
    )
}

/// This machine's name, so that `status` and the waiting line say where a
/// holder runs (holders are `<host>-<pid>/<thread>#<random>`).
fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let ok = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    match std::str::from_utf8(&buffer[..end]) {
        Ok(host) if ok && !host.is_empty() => host.to_owned(),
        _ => "lockyard".to_owned(),
    }
}
