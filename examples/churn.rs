//! Engine-level churn: many streams, concurrent emitters, and clients that
//! follow, drop, and resume from their true cursor — counting every event
//! delivered, every gap reported, and every silent hole (there must be
//! none).
//!
//! `cargo run --release --example churn -- [SECONDS] [STREAMS]`
//! (defaults: 10 seconds, 64 streams). Exits non-zero on a silent hole.

use gapless::{Config, EmitError, Follower, ReplayError, Ring, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Totals {
    emitted: AtomicU64,
    lost_before_commit: AtomicU64,
    delivered: AtomicU64,
    resumes: AtomicU64,
    gaps_reported: AtomicU64,
    silent_holes: AtomicU64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let streams: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let store: Arc<Store<usize>> = Arc::new(Store::default());
    let config = Config::default().events(256).bytes(32 << 10);
    let rings: Vec<Arc<Ring>> = (0..streams)
        .map(|k| store.get_or_create(k, config).expect("valid config"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(Totals::default());
    let started = Instant::now();

    let mut threads = Vec::new();
    for emitter in 0..2 {
        let (rings, stop, totals) = (rings.clone(), Arc::clone(&stop), Arc::clone(&totals));
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let ring = &rings[(n as usize * 7 + emitter) % rings.len()];
                let payload = format!("{{\"emitter\":{emitter},\"n\":{n}}}");
                match ring.emit(payload.as_bytes()) {
                    Ok(_) => totals.emitted.fetch_add(1, Ordering::Relaxed),
                    Err(EmitError::Lapped { .. }) => {
                        totals.lost_before_commit.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => panic!("emit: {e}"),
                };
                n += 1;
            }
        }));
    }
    for client in 0..2 {
        let (rings, stop, totals) = (rings.clone(), Arc::clone(&stop), Arc::clone(&totals));
        threads.push(std::thread::spawn(move || {
            let mut cursors = vec![0u64; rings.len()];
            let mut round = client;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let k = round % rings.len();
                // Connect, read a little, drop, and next time resume from
                // the true cursor.
                let mut follower = Follower::new(Arc::clone(&rings[k]), cursors[k]);
                totals.resumes.fetch_add(1, Ordering::Relaxed);
                match follower.try_next() {
                    Ok(events) => {
                        for (expected, event) in (cursors[k] + 1..).zip(&events) {
                            if event.seq != expected {
                                totals.silent_holes.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        totals
                            .delivered
                            .fetch_add(events.len() as u64, Ordering::Relaxed);
                        cursors[k] = follower.cursor();
                    }
                    Err(ReplayError::Gap(gap)) => {
                        totals.gaps_reported.fetch_add(1, Ordering::Relaxed);
                        cursors[k] = gap.first_retained - 1;
                    }
                    Err(e @ ReplayError::Ahead { .. }) => panic!("own cursor refused: {e}"),
                }
            }
        }));
    }
    let deadline = started + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1).min(deadline - Instant::now()));
        println!(
            "{:>4.0}s emitted {:>10} delivered {:>10} gaps reported {:>6} silent holes {}",
            started.elapsed().as_secs_f64(),
            totals.emitted.load(Ordering::Relaxed),
            totals.delivered.load(Ordering::Relaxed),
            totals.gaps_reported.load(Ordering::Relaxed),
            totals.silent_holes.load(Ordering::Relaxed),
        );
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().expect("worker panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let emitted = totals.emitted.load(Ordering::Relaxed);
    let holes = totals.silent_holes.load(Ordering::Relaxed);
    println!("--- churn report ({streams} streams, {elapsed:.1} s)");
    println!(
        "events emitted        {emitted} ({:.0}/s)",
        emitted as f64 / elapsed
    );
    println!(
        "lost before commit    {} (reported to their emitters)",
        totals.lost_before_commit.load(Ordering::Relaxed)
    );
    println!(
        "events delivered      {}",
        totals.delivered.load(Ordering::Relaxed)
    );
    println!(
        "resumes               {}",
        totals.resumes.load(Ordering::Relaxed)
    );
    println!(
        "gaps reported         {}",
        totals.gaps_reported.load(Ordering::Relaxed)
    );
    println!("silent holes          {holes}");
    println!(
        "memory per stream     {} bytes",
        rings[0].geometry().footprint()
    );
    if holes != 0 {
        std::process::exit(1);
    }
}
