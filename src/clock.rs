//! The wall clock as postback reads it, and where its randomness comes from: one place,
//! so that a deterministic simulation can drive both (`Simulated`, installed for the
//! thread that runs it) while production reads the host's clock and its thread's random
//! generator, as fast as before.
//!
//! What postback measures in durations (timeouts, leases, backoffs, circuits) it measures
//! on tokio's clock (`tokio::time::Instant`), which a simulation pauses and advances; what
//! it stamps or compares with the store's times (due times, finishes, windows) is the wall
//! clock read here. Random choices (ids, jitter) come from `fastrand`, whose generator is
//! per thread and which a simulation seeds.

use std::cell::{Cell, RefCell};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

thread_local! {
    static SIMULATED: RefCell<Option<Simulated>> = const { RefCell::new(None) };
    /// The ms of the last id this thread made, and its counter.
    static LAST_ID: Cell<(u64, u16)> = const { Cell::new((0, 0)) };
}

/// The wall clock: the host's, or the simulation's on a thread that runs one.
pub fn system_now() -> SystemTime {
    SIMULATED.with(|s| match &*s.borrow() {
        Some(sim) => sim.now(),
        None => SystemTime::now(),
    })
}

/// The wall clock in ms since the epoch.
pub fn now_ms() -> i64 {
    since_epoch(system_now()).as_millis() as i64
}

/// The wall clock in µs since the epoch.
pub fn now_us() -> i64 {
    since_epoch(system_now()).as_micros() as i64
}

fn since_epoch(at: SystemTime) -> Duration {
    at.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// A UUID v7 of the wall clock's time: 48 bits of ms, 12 bits counting the ids this
/// thread made within that ms (from a random start, so that ids of one thread sort by
/// when they were made), and 62 random bits. Ids name notifications, events and
/// subscriptions; they are not secrets.
pub fn uuid_v7() -> Uuid {
    let now = now_ms().max(0) as u64;
    let (ms, counter) = LAST_ID.with(|last| {
        let (ms, counter) = match last.get() {
            (ms, counter) if ms >= now && counter < 0xfff => (ms, counter + 1),
            (ms, _) if ms >= now => (ms + 1, fastrand::u16(..0x800)),
            _ => (now, fastrand::u16(..0x800)),
        };
        last.set((ms, counter));
        (ms, counter)
    });
    let random = fastrand::u64(..) >> 2;
    let high = (u128::from(ms) << 80) | (0x7 << 76) | (u128::from(counter) << 64);
    Uuid::from_u128(high | (0b10 << 62) | u128::from(random))
}

/// A wall clock that follows tokio's (paused, in a simulation) from `epoch`, and can be
/// made to jump or stall as a host's clock does.
#[derive(Debug, Clone)]
pub struct Simulated {
    /// Tokio's instant that `epoch` stands for.
    start: tokio::time::Instant,
    epoch: SystemTime,
    /// How far the wall clock is off tokio's, in µs (a jump forward is positive).
    skew_us: i64,
    /// Until when (tokio's time) the wall clock stands still, and what it reads meanwhile.
    stalled: Option<(tokio::time::Instant, SystemTime)>,
}

impl Simulated {
    fn now(&self) -> SystemTime {
        if let Some((until, reads)) = self.stalled {
            if tokio::time::Instant::now() < until {
                return reads;
            }
        }
        self.following(tokio::time::Instant::now())
    }

    /// What the wall clock reads at tokio's `instant`, stalls aside.
    fn following(&self, instant: tokio::time::Instant) -> SystemTime {
        let at = self.epoch + instant.saturating_duration_since(self.start);
        match self.skew_us >= 0 {
            true => at + Duration::from_micros(self.skew_us as u64),
            false => at - Duration::from_micros(self.skew_us.unsigned_abs()),
        }
    }

    /// Installs a simulated wall clock on this thread, reading `epoch` now, and seeds the
    /// thread's random generator with `seed`, until the guard is dropped. Call it inside
    /// the simulation's (paused) tokio runtime.
    pub fn install(epoch: SystemTime, seed: u64) -> SimulationGuard {
        fastrand::seed(seed);
        LAST_ID.with(|last| last.set((0, 0)));
        let sim = Self {
            start: tokio::time::Instant::now(),
            epoch,
            skew_us: 0,
            stalled: None,
        };
        SIMULATED.with(|s| *s.borrow_mut() = Some(sim));
        SimulationGuard(())
    }

    /// Moves this thread's simulated wall clock by `ms` (negative: back, as a host clock
    /// corrected by NTP may), leaving tokio's as it is. A stall ends there: the clock
    /// goes on from what it read, moved.
    pub fn jump(ms: i64) {
        SIMULATED.with(|s| {
            if let Some(sim) = s.borrow_mut().as_mut() {
                let reads = sim.now();
                sim.stalled = None;
                let follows = sim.following(tokio::time::Instant::now());
                let behind_us = match reads.duration_since(follows) {
                    Ok(ahead) => ahead.as_micros() as i64,
                    Err(e) => -(e.duration().as_micros() as i64),
                };
                sim.skew_us += behind_us + ms * 1_000;
            }
        });
    }

    /// Stops this thread's simulated wall clock for `pause` of tokio's time (as a
    /// suspended VM's may): it reads the same until then, and goes on from that reading.
    pub fn stall(pause: Duration) {
        SIMULATED.with(|s| {
            if let Some(sim) = s.borrow_mut().as_mut() {
                let reads = sim.now();
                let until = match sim.stalled {
                    Some((until, _)) => until.max(tokio::time::Instant::now() + pause),
                    None => tokio::time::Instant::now() + pause,
                };
                let resumes = sim.following(until);
                let behind = resumes.duration_since(reads).unwrap_or_default();
                sim.skew_us -= behind.as_micros() as i64;
                sim.stalled = Some((until, reads));
            }
        });
    }
}

/// Uninstalls the simulated wall clock when dropped.
#[derive(Debug)]
pub struct SimulationGuard(());

impl Drop for SimulationGuard {
    fn drop(&mut self) {
        SIMULATED.with(|s| *s.borrow_mut() = None);
    }
}

/// Whether this thread runs a simulation: then work the store would hand to other
/// threads runs on this one, so that what happens is one sequence.
pub fn simulated() -> bool {
    SIMULATED.with(|s| s.borrow().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_simulated_clock_follows_tokios_and_jumps_apart() {
        let epoch = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let _guard = Simulated::install(epoch, 7);
        assert!(simulated());
        assert_eq!(now_ms(), 1_800_000_000_000);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(now_ms(), 1_800_000_090_000);
        Simulated::jump(-5_000);
        assert_eq!(now_ms(), 1_800_000_085_000);
        Simulated::stall(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(now_ms(), 1_800_000_085_000, "stalled");
        Simulated::stall(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            now_ms(),
            1_800_000_085_000,
            "still, until the later stall ends"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(now_ms(), 1_800_000_086_000, "on from where it stood");
        Simulated::stall(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(2)).await;
        Simulated::jump(60_000);
        assert_eq!(now_ms(), 1_800_000_146_000, "a jump ends a stall");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(now_ms(), 1_800_000_147_000);
        let first = fastrand::u64(..);
        fastrand::seed(7);
        assert_eq!(fastrand::u64(..), first, "seeded");
    }

    #[test]
    fn ids_are_uuid_v7_of_the_clock_and_sort_as_made() {
        let ids: Vec<Uuid> = (0..5000).map(|_| uuid_v7()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
        let first = ids[0];
        assert_eq!(first.get_version_num(), 7);
        assert_eq!(first.get_variant(), uuid::Variant::RFC4122);
        let (secs, _) = first.get_timestamp().unwrap().to_unix();
        assert!((secs as i64 - now_ms() / 1000).abs() <= 1);
    }

    #[test]
    fn without_a_simulation_it_is_the_hosts_clock() {
        assert!(!simulated());
        let host = since_epoch(SystemTime::now()).as_millis() as i64;
        assert!((now_ms() - host).abs() < 1_000);
    }
}
