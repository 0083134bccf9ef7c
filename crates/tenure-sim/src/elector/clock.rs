//! Each candidate's clock in the elector tier: its own drifting, offset
//! [`NodeClock`], read on tokio's paused timeline, which is the real
//! (simulated) time of the run.
//!
//! The clock also watches for busy waits: an elector that sleeps until an
//! instant already past, again and again at one simulated instant, would
//! spin at 100 % CPU (and on a paused clock, time would never move on). Past
//! a limit the episode is reported and the sleeps are backed off, so the
//! run goes on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use tenure::clock::Sleep;
use tenure::{Clock, MonoTime, Now};
use tokio::time::Instant;

use crate::clock::{NodeClock, SimTime};
use crate::report::ViolationKind;
use crate::spin::{Spin, Wake};

use crate::paused::Findings;

/// Tokio's timers fire on whole milliseconds, up to this long after the
/// instant they were set for.
pub(crate) const TIMER_RESOLUTION: Duration = Duration::from_millis(1);

/// Immediate sleeps of one candidate at one simulated instant before it
/// counts as busy-waiting. The driver, the publisher and the work each
/// sleep once or twice at an instant where a timer fires; a real busy loop
/// sleeps millions of times.
const SPIN_LIMIT: u32 = 1000;

/// Immediate sleeps of one candidate.
struct Spinning {
    /// The instant of the latest immediate sleep.
    at: SimTime,
    /// Immediate sleeps at that instant.
    count: u32,
    /// The episode: over once an instant passes with no more than
    /// [`SPIN_LIMIT`] immediate sleeps.
    episode: Spin,
}

/// One candidate's clock.
pub(crate) struct SimClock {
    /// Real instant zero of the run.
    origin: Instant,
    clock: NodeClock,
    node: usize,
    spin: Mutex<Spinning>,
    findings: Arc<Mutex<Findings>>,
    /// What the library draws at random on this node (retry jitter,
    /// incarnations, listing jitter): from the run's seed, so that a seed
    /// replays the same decisions (see [`Clock::random_u64`]).
    rng: Mutex<StdRng>,
}

impl SimClock {
    pub(crate) fn new(
        origin: Instant,
        clock: NodeClock,
        node: usize,
        findings: Arc<Mutex<Findings>>,
    ) -> Self {
        SimClock {
            origin,
            clock,
            node,
            spin: Mutex::new(Spinning {
                at: SimTime(0),
                count: 0,
                episode: Spin::new(0),
            }),
            findings,
            rng: Mutex::new(StdRng::seed_from_u64(node_seed(0, node))),
        }
    }

    /// The same clock drawing its random numbers from `seed`, the run's
    /// (each node its own stream).
    pub(crate) fn seeded(mut self, seed: u64) -> Self {
        self.rng = Mutex::new(StdRng::seed_from_u64(node_seed(seed, self.node)));
        self
    }

    /// The real (simulated) instant now.
    pub(crate) fn real_now(&self) -> SimTime {
        SimTime::from_duration(Instant::now().saturating_duration_since(self.origin))
    }

    /// The node's clock model.
    pub(crate) fn model(&self) -> &NodeClock {
        &self.clock
    }

    /// Counts an immediate sleep at `t`; returns a back-off if the candidate
    /// is busy-waiting.
    fn immediate(&self, t: SimTime, deadline: MonoTime) -> Option<Duration> {
        let mut spin = self.spin.lock().unwrap_or_else(|p| p.into_inner());
        if spin.at != t {
            if spin.count <= SPIN_LIMIT {
                spin.episode.reset();
            }
            spin.at = t;
            spin.count = 0;
        }
        spin.count += 1;
        if spin.count <= SPIN_LIMIT {
            return None;
        }
        match spin.episode.again() {
            Wake::Now => None,
            Wake::BackOff { by, first } => {
                if first {
                    let detail = format!(
                        "node {} slept {} times at one instant until {}, already past (its clock reads {}): a busy loop",
                        self.node,
                        spin.count,
                        deadline.as_nanos(),
                        self.clock.mono(t).as_nanos()
                    );
                    drop(spin);
                    super::lock(&self.findings).violations.add(
                        ViolationKind::BusyWait,
                        t,
                        vec![self.node],
                        vec![],
                        detail,
                    );
                }
                Some(by)
            }
        }
    }
}

/// Node `node`'s stream of random numbers in the run of `seed`.
fn node_seed(seed: u64, node: usize) -> u64 {
    let node = u64::try_from(node).unwrap_or(u64::MAX);
    seed ^ node.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Clock for SimClock {
    fn now(&self) -> Now {
        self.clock.now(self.real_now())
    }

    fn random_u64(&self) -> u64 {
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .next_u64()
    }

    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        let t = self.real_now();
        let at = self.clock.real_at(deadline);
        if at <= t {
            if let Some(by) = self.immediate(t, deadline) {
                return Box::pin(tokio::time::sleep(by));
            }
        }
        Box::pin(tokio::time::sleep_until(self.origin + at.as_duration()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sleeps_follow_the_node_clock_and_a_busy_loop_is_reported() {
        let findings = Arc::new(Mutex::new(Findings::new(5, false)));
        let origin = Instant::now();
        // 25 % fast: 1 s on its clock is 0.8 s of real time.
        let clock = SimClock::new(origin, NodeClock::with_rate(0.25), 3, findings.clone());
        let start = clock.now().mono;
        clock.sleep_until(start + Duration::from_secs(1)).await;
        assert_eq!(origin.elapsed(), Duration::from_millis(800));
        // A loop sleeping until an instant already past: reported once, then
        // backed off so time moves on.
        let past = clock.now().mono;
        for _ in 0..SPIN_LIMIT + 10 {
            clock.sleep_until(past).await;
        }
        let f = super::super::lock(&findings);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(f.violations[0].kind, ViolationKind::BusyWait);
        assert_eq!(f.violations[0].nodes, vec![3]);
        drop(f);
        assert!(origin.elapsed() > Duration::from_millis(800));
    }
}
