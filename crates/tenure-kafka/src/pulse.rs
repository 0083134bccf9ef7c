//! goneli's `Pulse(timeout)`: pulse, and wait a while for leadership.

use std::future::Future;
use std::time::Duration;

use tenure::{Elector, ElectorError, Role};

/// How often [`PulseExt::pulse_timeout`] pulses while it waits. A pulse is
/// two atomic operations; network I/O still happens at most once per
/// minimum poll interval.
const PULSE_EVERY: Duration = Duration::from_millis(10);

/// goneli's `Pulse(timeout)` on tenure's [`Elector`]: the elector's own
/// [`pulse`](Elector::pulse) is goneli's cheap, non-blocking liveness
/// signal; this one also waits up to `timeout` for leadership.
///
/// With a [`liveness_timeout`](tenure::ElectorBuilder::liveness_timeout),
/// a Kafka candidate polls only when the application has pulsed since the
/// previous poll (at most once per minimum poll interval), so an
/// application that stops pulsing first loses its term (no heartbeat comes
/// back) and then its assignment, when `max.poll.interval.ms` passes
/// without a poll.
///
/// ```
/// use std::time::Duration;
/// use tenure::{Elector, MemoryStore};
/// use tenure_kafka::PulseExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let elector = Elector::builder(MemoryStore::new(), "jobs").start()?;
/// // goneli: for { if leader, _ := neli.Pulse(10 * time.Millisecond); leader { work() } }
/// let leader = elector.pulse_timeout(Duration::from_secs(1)).await?;
/// assert!(leader);
/// elector.shutdown().await;
/// assert!(elector.pulse_timeout(Duration::from_millis(10)).await.is_err());
/// # Ok(()) }
/// ```
pub trait PulseExt {
    /// Pulses, and keeps pulsing until this candidate leads (`Ok(true)`) or
    /// `timeout` passes (`Ok(false)`). Fails with
    /// [`ElectorError::Stopped`] once the elector has stopped (goneli's
    /// `ErrNonLivePulse`).
    fn pulse_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, ElectorError>> + Send;
}

impl PulseExt for Elector {
    fn pulse_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<bool, ElectorError>> + Send {
        let elector = self.clone();
        async move {
            let deadline = tokio::time::Instant::now() + timeout;
            let mut role = elector.watch_role();
            loop {
                elector.pulse();
                if matches!(*role.borrow_and_update(), Role::Stopped) {
                    return Err(ElectorError::Stopped);
                }
                if elector.is_leader() {
                    return Ok(true);
                }
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                let nap = (deadline - now).min(PULSE_EVERY);
                tokio::select! {
                    changed = role.changed() => {
                        if changed.is_err() {
                            return Err(ElectorError::Stopped);
                        }
                    }
                    _ = tokio::time::sleep(nap) => {}
                }
            }
        }
    }
}
