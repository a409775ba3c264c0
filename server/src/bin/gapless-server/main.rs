//! `gapless-server`: the reference server (`serve`), the churn run that
//! drives it with migrating clients (`churn`, the main job), and the
//! capacity planner (`plan`).

#![deny(unsafe_code)]

mod churn;
mod load;
mod plan;
mod serve_args;

use clap::{Parser, Subcommand};
use serve_args::ServeArgs;
use std::io::IsTerminal as _;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gapless-server",
    version,
    about = "Reference server for gapless: SSE, cursor-in-body upgrade, WebSocket with gap replay or 409"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the protocol of docs/PROTOCOL.md.
    Serve(Box<ServeArgs>),
    /// The main job: the server under churn, driven in-process by clients
    /// that drop, resume and migrate with true, stale and echoed cursors.
    /// Exits non-zero if any client saw a silent gap.
    Churn {
        /// Sessions (one producer and one client each).
        #[arg(long, default_value_t = 24)]
        sessions: usize,
        /// Seconds of churn.
        #[arg(long, default_value_t = 30.0)]
        duration: f64,
        /// Events per second emitted into each session.
        #[arg(long, default_value_t = 200.0)]
        rate: f64,
        /// Events per session ring.
        #[arg(long, default_value_t = 512)]
        ring_events: usize,
        /// Bytes per session ring.
        #[arg(long, default_value_t = 256 << 10)]
        ring_bytes: usize,
        /// Payload size in bytes.
        #[arg(long, default_value_t = 128)]
        payload: usize,
        /// Run two instances sharing sessions through this Redis
        /// (`redis://HOST:PORT`); clients move between them.
        #[arg(long, conflicts_with = "data_dir")]
        redis: Option<String>,
        /// Keep the sessions in a durable log in this directory, as `serve
        /// --data-dir` does.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
    },
    /// The load test: thousands of sessions (healthy, stalled and churning
    /// readers) and clients past the session cap, in-process on loopback.
    /// Exits non-zero on a silent gap, RSS over budget or a starved reader.
    Load(load::LoadArgs),
    /// Size a session ring to cover a client outage, with the replay time
    /// measured on this machine.
    Plan {
        /// Events emitted per second into one session.
        #[arg(long)]
        rate: f64,
        /// The longest client outage to survive without a gap, in seconds.
        #[arg(long)]
        outage: f64,
        /// Typical payload size in bytes.
        #[arg(long)]
        payload: usize,
        /// Concurrent sessions.
        #[arg(long, default_value_t = 1)]
        sessions: u64,
        /// Also measure the Redis memory per session of `serve --redis`
        /// on this Redis (writes a scratch session and deletes it).
        #[arg(long)]
        redis: Option<String>,
    },
}

fn main() -> ExitCode {
    keep_large_allocations_lazy();
    let cli = Cli::parse();
    // `serve` logs its lifecycle at INFO (and each request with
    // `--access-log`); the in-process runs only warnings. RUST_LOG wins.
    // Colour only on a terminal: escapes in a log file are noise. The disk
    // store (`--data-dir`) logs each of its trees' recovery at INFO: only
    // its warnings.
    let default_filter = match cli.command {
        Command::Serve(_) => "info,lsm_tree=warn,fjall=warn",
        // Every expected 503 past the session cap is an ERROR to tower-http.
        Command::Load(_) => "warn,tower_http=off",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(args.run()),
        Command::Churn {
            sessions,
            duration,
            rate,
            ring_events,
            ring_bytes,
            payload,
            redis,
            data_dir,
        } => {
            if !(duration.is_finite() && duration >= 0.0 && rate.is_finite() && rate > 0.0) {
                eprintln!("error: --duration must be >= 0 and --rate > 0");
                return ExitCode::from(2);
            }
            let config = churn::ChurnConfig {
                sessions,
                duration: std::time::Duration::from_secs_f64(duration),
                rate,
                ring_events,
                ring_bytes,
                payload,
                redis,
                data_dir,
            };
            match runtime.block_on(churn::run(config)) {
                Ok(report) => {
                    println!("{report}");
                    if report.passed() {
                        ExitCode::SUCCESS
                    } else {
                        for failed in report.failures() {
                            eprintln!("FAILED: {failed}");
                        }
                        ExitCode::FAILURE
                    }
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Load(args) => runtime.block_on(args.run()),
        Command::Plan {
            rate,
            outage,
            payload,
            sessions,
            redis,
        } => plan(
            &runtime,
            plan::Workload {
                rate,
                outage,
                payload,
                sessions,
            },
            redis.as_deref(),
        ),
    }
}

fn plan(
    runtime: &tokio::runtime::Runtime,
    workload: plan::Workload,
    redis: Option<&str>,
) -> ExitCode {
    use plan::{human_bytes, probe, probe_redis, size};
    let sizing = match size(&workload) {
        Ok(sizing) => sizing,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let per_session = sizing.geometry.footprint() as f64;
    let measured = probe(workload.payload, sizing.ring_events);
    let gap_bytes = sizing.gap_events as f64 * workload.payload as f64;
    let replay_seconds = sizing.gap_events as f64 / measured.replay_events_per_s;
    println!(
        "workload        {} events/s per session, {} s outage, {} B payloads, {} sessions",
        workload.rate, workload.outage, workload.payload, workload.sessions
    );
    println!(
        "gap to cover    {} events ({})",
        sizing.gap_events,
        human_bytes(gap_bytes)
    );
    println!(
        "ring            --ring-events {} --ring-bytes {}",
        sizing.ring_events, sizing.ring_bytes
    );
    println!(
        "memory          {} per session, {} for {} sessions (preallocated)",
        human_bytes(per_session),
        human_bytes(per_session * workload.sessions as f64),
        workload.sessions
    );
    println!(
        "probe           {:.2} s on this machine: emit {:.2}M events/s (one thread), replay {:.2}M events/s ({}/s)",
        measured.elapsed.as_secs_f64(),
        measured.emit_events_per_s / 1e6,
        measured.replay_events_per_s / 1e6,
        human_bytes(measured.replay_bytes_per_s)
    );
    println!(
        "replay of gap   {:.3} ms to copy out of the ring (network time not included)",
        replay_seconds * 1e3
    );
    match redis {
        Some(url) => {
            match runtime.block_on(probe_redis(
                url,
                workload.payload,
                sizing.ring_events,
                sizing.ring_bytes,
            )) {
                Ok(redis) => {
                    let per_session = redis.per_session() as f64;
                    println!(
                        "redis           {} per session ({} events retained of --ring-events {}: {}; meta and sizes {}), {} for {} sessions; measured on Redis {}.{}.{}",
                        human_bytes(per_session),
                        redis.retained,
                        sizing.ring_events,
                        human_bytes(redis.stream_bytes as f64),
                        human_bytes(redis.meta_bytes as f64),
                        human_bytes(per_session * workload.sessions as f64),
                        workload.sessions,
                        redis.version[0],
                        redis.version[1],
                        redis.version[2],
                    );
                }
                Err(error) => {
                    eprintln!("error: --redis {url}: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None => println!(
            "redis           with serve --redis: add --redis URL to measure the memory per session on your Redis"
        ),
    }
    if workload.rate > measured.emit_events_per_s {
        println!("warning         the rate exceeds what one emitter thread sustains here");
    }
    ExitCode::SUCCESS
}

/// Keeps session rings resident in proportion to use across session churn.
///
/// A ring's arrays come from zeroed allocation, which is free for a block
/// the allocator maps fresh from the OS (pages become resident only when
/// written). glibc maps blocks above its mmap threshold fresh, but raises
/// that threshold each time such a block is freed, and then serves later
/// rings from its heap, zeroing them by writing every page: after a few
/// sessions end, each new idle session costs much of its ring. A fixed
/// threshold turns that adjustment off. (An application embedding the
/// server can do the same, or set `MALLOC_MMAP_THRESHOLD_=131072`.)
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn keep_large_allocations_lazy() {
    /// glibc's default threshold, made fixed.
    const THRESHOLD: libc::c_int = 128 * 1024;
    // SAFETY: `mallopt` only sets an allocator tunable; it is called first
    // thing in `main`, before any other thread exists, with a valid option
    // and value, and it reports failure by its return value (0), which
    // leaves the allocator as it was.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
    if set == 0 {
        eprintln!(
            "warning: could not fix the allocator's mmap threshold; idle sessions may cost more memory"
        );
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_large_allocations_lazy() {}
