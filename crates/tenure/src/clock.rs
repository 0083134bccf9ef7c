//! Time as the election sees it: a monotonic instant that keeps counting
//! through system suspend, plus the wall clock for display and for the
//! optional early takeover.
//!
//! The state machine never reads a clock; the [`Elector`](crate::Elector)
//! reads one [`Clock`] and passes [`Now`] in. That is what lets the
//! simulation run many nodes with skewed, drifting clocks deterministically.

use std::future::Future;
use std::ops::{Add, Sub};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A monotonic instant in nanoseconds since an arbitrary origin of one clock.
///
/// Instants from different clocks (different processes, different simulated
/// nodes) are not comparable; the timing rules never compare them.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MonoTime(u64);

impl MonoTime {
    /// The instant `nanos` nanoseconds after the clock's origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        MonoTime(nanos)
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: MonoTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for MonoTime {
    type Output = MonoTime;
    fn add(self, d: Duration) -> MonoTime {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        MonoTime(self.0.saturating_add(nanos))
    }
}

impl Sub<Duration> for MonoTime {
    type Output = MonoTime;
    fn sub(self, d: Duration) -> MonoTime {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        MonoTime(self.0.saturating_sub(nanos))
    }
}

/// Wall-clock time in milliseconds since the Unix epoch, as stored in lease
/// records. Used for display and for the optional early takeover only; the
/// safety argument never depends on it unless a skew bound is configured.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallTime(u64);

impl WallTime {
    /// The wall time `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        WallTime(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The current wall-clock time of this host.
    pub fn now() -> Self {
        WallTime::from(SystemTime::now())
    }

    /// As a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }
}

impl From<SystemTime> for WallTime {
    fn from(t: SystemTime) -> Self {
        let millis = t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        WallTime(millis)
    }
}

/// Rounds the duration *up* to whole milliseconds: a wall-clock expiry
/// (`renewed_at + term`) must never come before the holder's real term, and
/// `expires_at + skew` never before the skew bound has passed.
impl Add<Duration> for WallTime {
    type Output = WallTime;
    fn add(self, d: Duration) -> WallTime {
        let ms = u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
        WallTime(self.0.saturating_add(ms))
    }
}

/// One reading of a clock: the monotonic instant and the wall time together.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic time; all timing rules use this.
    pub mono: MonoTime,
    /// Wall time; written to records for display and early takeover.
    pub wall: WallTime,
}

/// A boxed future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A source of time for an [`Elector`](crate::Elector) or
/// [`Observer`](crate::Observer).
pub trait Clock: Send + Sync + 'static {
    /// Reads the clock.
    fn now(&self) -> Now;
    /// Reads only the monotonic clock: what hot paths such as
    /// [`Elector::is_leader`](crate::Elector::is_leader) need.
    fn mono(&self) -> MonoTime {
        self.now().mono
    }
    /// Completes once [`now`](Clock::now)`.mono >= deadline`.
    fn sleep_until(&self, deadline: MonoTime) -> Sleep;
    /// A random number, for what tenure draws at random besides time: the
    /// jitter of retries and polls, a candidate's incarnation. The default
    /// draws from the operating system's generator; a simulated clock
    /// returns numbers from its own seed, so that a simulation run again
    /// with the same seed takes the same decisions.
    fn random_u64(&self) -> u64 {
        rand::random()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Now {
        (**self).now()
    }
    fn mono(&self) -> MonoTime {
        (**self).mono()
    }
    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        (**self).sleep_until(deadline)
    }
    fn random_u64(&self) -> u64 {
        (**self).random_u64()
    }
}

/// The production clock: `CLOCK_BOOTTIME` on Linux (monotonic, and it keeps
/// counting while the machine is suspended), and on macOS its
/// `CLOCK_MONOTONIC`, which Apple documents to "continue to increment while
/// the system is asleep" (it is `mach_continuous_time`; `CLOCK_UPTIME_RAW`,
/// `mach_absolute_time`, is the one that stops). Other platforms are
/// refused at compile time: a clock that stops in suspend would let a
/// resumed leader believe in a term that ended in real time.
///
/// Timers in tokio run on `CLOCK_MONOTONIC`, which stops during suspend, so a
/// plain tokio sleep could wake a leader *after* its term has lapsed in real
/// time. [`SystemClock::sleep_until`] therefore sleeps in slices of at most
/// [`SystemClock::SLICE`] and re-reads the boot-time clock after each, so a
/// resumed process notices a lapsed deadline within one slice.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// The longest single timer sleep; bounds how late a resumed process
    /// notices that time passed while it was suspended.
    pub const SLICE: Duration = Duration::from_millis(100);

    #[inline]
    #[allow(
        unsafe_code,
        reason = "CLOCK_BOOTTIME has no safe binding in std (Instant reads CLOCK_MONOTONIC, which stops in suspend)"
    )]
    pub(crate) fn mono_now() -> MonoTime {
        #[cfg(target_os = "linux")]
        const CLOCK: libc::clockid_t = libc::CLOCK_BOOTTIME;
        // Counts sleep on macOS (see the type's docs).
        #[cfg(target_os = "macos")]
        const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec and CLOCK is a clock id
        // every supported kernel provides; clock_gettime only writes to `ts`.
        let rc = unsafe { libc::clock_gettime(CLOCK, &raw mut ts) };
        if rc != 0 {
            // Not reachable on supported platforms; fall back to the std
            // monotonic clock rather than panicking.
            return fallback_mono();
        }
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        MonoTime(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }
}

fn fallback_mono() -> MonoTime {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    MonoTime(u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

impl Clock for SystemClock {
    fn now(&self) -> Now {
        Now {
            mono: Self::mono_now(),
            wall: WallTime::now(),
        }
    }

    fn mono(&self) -> MonoTime {
        Self::mono_now()
    }

    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        Box::pin(async move {
            loop {
                let now = Self::mono_now();
                if now >= deadline {
                    return;
                }
                let left = deadline.saturating_since(now).min(Self::SLICE);
                tokio::time::sleep(left).await;
            }
        })
    }
}

/// The process's one [`SystemClock`] handle. Electors built without a
/// clock of their own use it, so that electors on clones of one store share
/// one engine (an engine runs on one clock handle).
pub(crate) fn system_clock() -> Arc<dyn Clock> {
    static CLOCK: std::sync::OnceLock<Arc<dyn Clock>> = std::sync::OnceLock::new();
    CLOCK.get_or_init(|| Arc::new(SystemClock)).clone()
}

/// Whether `clock` is the process's [`system_clock`] handle.
pub(crate) fn is_system_clock(clock: &Arc<dyn Clock>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(clock), Arc::as_ptr(&system_clock()))
}

/// A clock driven by tokio's timer, for tests with
/// `#[tokio::test(start_paused = true)]`: both the monotonic and the wall
/// time advance only as tokio's (possibly paused) clock advances.
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    wall_origin: WallTime,
}

impl TokioClock {
    /// A clock whose origin is tokio's current instant, with the wall clock
    /// starting at the host's current wall time.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
            wall_origin: WallTime::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Now {
        let elapsed = self.origin.elapsed();
        Now {
            mono: MonoTime::default() + elapsed,
            wall: self.wall_origin + elapsed,
        }
    }

    fn sleep_until(&self, deadline: MonoTime) -> Sleep {
        let at = self.origin + Duration::from_nanos(deadline.as_nanos());
        Box::pin(tokio::time::sleep_until(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mono_arithmetic_saturates() {
        let t = MonoTime::from_nanos(5);
        assert_eq!(t - Duration::from_nanos(10), MonoTime::from_nanos(0));
        assert_eq!(
            (t + Duration::MAX).as_nanos(),
            u64::MAX,
            "adding a huge duration saturates instead of wrapping"
        );
        assert_eq!(MonoTime::from_nanos(3).saturating_since(t), Duration::ZERO);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let a = SystemClock.now();
        let b = SystemClock.now();
        assert!(b.mono >= a.mono);
        assert!(
            a.wall.as_millis() > 1_600_000_000_000,
            "wall clock is epoch-based"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = TokioClock::new();
        let start = clock.now();
        clock.sleep_until(start.mono + Duration::from_secs(3)).await;
        let end = clock.now();
        assert_eq!(
            end.mono.saturating_since(start.mono),
            Duration::from_secs(3)
        );
        assert_eq!(end.wall.as_millis() - start.wall.as_millis(), 3000);
    }
}
