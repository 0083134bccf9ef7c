//! The settings of a [`SqliteStore`](crate::SqliteStore).

use std::time::Duration;

/// Settings of a [`SqliteStore`](crate::SqliteStore).
///
/// ```
/// use std::time::Duration;
/// let options = tenure_sqlite::SqliteOptions::default()
///     .with_busy_timeout(Duration::from_secs(2))
///     .with_change_poll_interval(Duration::from_millis(20));
/// assert_eq!(options.busy_timeout(), Duration::from_secs(2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    pub(crate) busy_timeout: Duration,
    pub(crate) change_poll_interval: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            // Below the elector's default operation timeout (term / 4 =
            // 2.5 s), so a stuck lock shows as "locked", not a timeout.
            busy_timeout: Duration::from_secs(1),
            change_poll_interval: Duration::from_millis(50),
        }
    }
}

impl SqliteOptions {
    /// How long an operation waits for another connection's lock before it
    /// fails with [`StoreError::Unavailable`](tenure::StoreError::Unavailable) (default 1 s). Writers hold
    /// the lock for a millisecond or so; only a stuck process or an
    /// operator's open `sqlite3` transaction makes anyone wait this long.
    ///
    /// The elector's operation timeout (a quarter of the term by default)
    /// may end a wait earlier, as a timeout; the abandoned call still
    /// finishes on its blocking thread, and this handle's next operation
    /// queues behind it. A busy timeout below the operation timeout turns
    /// such waits into the clearer "locked" error.
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How often the change feed polls (default 50 ms); a hand-over between
    /// processes is noticed within about this long.
    pub fn with_change_poll_interval(mut self, every: Duration) -> Self {
        // A zero period would make tokio's interval panic.
        self.change_poll_interval = every.max(Duration::from_millis(1));
        self
    }

    /// The busy timeout.
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The change feed's poll interval.
    pub fn change_poll_interval(&self) -> Duration {
        self.change_poll_interval
    }
}
