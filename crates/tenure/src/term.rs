//! A term of leadership as the leader's work sees it: a fencing token, a
//! deadline, and the signals that end it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, MonoTime};
use crate::record::{GroupName, Metadata};

/// One term of leadership, handed to the leader's work.
///
/// Pass [`token`](Term::token) to every resource the work writes; a resource
/// that remembers the highest token it has seen can refuse a write from an
/// older term (fencing). Stop when [`cancelled`](Term::cancelled) fires: that
/// happens before the [`deadline`](Term::deadline), and no other candidate can
/// start its term before this one's deadline has passed, unless this term
/// ended gracefully (resign, transfer, shutdown): then the lease is released
/// once its work has drained (every [`TermGuard`] dropped, see
/// [`hold`](Term::hold)), and the next candidate may start at once. Work that
/// must not overlap the next term even then holds a guard while it runs (as
/// [`Elector::run_while_leader`](crate::Elector::run_while_leader) does).
///
/// Clones share state; cheap to clone.
#[derive(Clone)]
pub struct Term {
    inner: Arc<Inner>,
}

struct Inner {
    group: GroupName,
    candidate: String,
    token: u64,
    predecessor: Metadata,
    clock: Arc<dyn Clock>,
    deadline: AtomicU64,
    cancel: CancellationToken,
    ended: CancellationToken,
    guards: watch::Sender<usize>,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("group", &self.inner.group)
            .field("candidate", &self.inner.candidate)
            .field("token", &self.inner.token)
            .field("remaining", &self.remaining())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Terms are equal when they are the same term of the same group.
impl PartialEq for Term {
    fn eq(&self, other: &Self) -> bool {
        self.inner.token == other.inner.token && self.inner.group == other.inner.group
    }
}

impl Term {
    pub(crate) fn new(
        group: GroupName,
        candidate: String,
        token: u64,
        deadline: MonoTime,
        clock: Arc<dyn Clock>,
        predecessor: Metadata,
    ) -> Self {
        Term {
            inner: Arc::new(Inner {
                group,
                candidate,
                token,
                predecessor,
                clock,
                deadline: AtomicU64::new(deadline.as_nanos()),
                cancel: CancellationToken::new(),
                ended: CancellationToken::new(),
                guards: watch::Sender::new(0),
            }),
        }
    }

    /// The fencing token: strictly greater than every earlier term's token
    /// in this group, unchanged by renewals.
    ///
    /// Send it with every write the work makes, and have the resource
    /// refuse a token below the highest it has admitted ([`fence::check`],
    /// atomically with the write): then a leader that was paused past its
    /// deadline cannot overwrite its successor's work when it wakes. The
    /// recipes for PostgreSQL, Redis, etcd, S3-style object stores and local
    /// files are in `docs/fencing.md` in the repository (see the crate
    /// docs' "Fencing" section).
    ///
    /// [`fence::check`]: crate::fence::check
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// What the record this term replaced published: the previous
    /// leader's metadata (its address, say), or what a graceful release
    /// carried forward (a periodic duty's last run). Empty when the term
    /// began on a new group or through a coordinator.
    pub fn predecessor_metadata(&self) -> &Metadata {
        &self.inner.predecessor
    }

    /// The group this term leads.
    pub fn group(&self) -> &GroupName {
        &self.inner.group
    }

    /// This candidate's id.
    pub fn candidate(&self) -> &str {
        &self.inner.candidate
    }

    /// The term's deadline on the elector's monotonic clock. Renewals move it
    /// later.
    pub fn deadline_mono(&self) -> MonoTime {
        MonoTime::from_nanos(self.inner.deadline.load(Ordering::Acquire))
    }

    /// Time left until the deadline; zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline_mono()
            .saturating_since(self.inner.clock.now().mono)
    }

    /// The deadline as an [`Instant`] of this process (derived from the time
    /// remaining now, so it moves when the term is renewed).
    pub fn deadline(&self) -> Instant {
        Instant::now() + self.remaining()
    }

    /// The deadline as wall-clock time, for handing to other processes.
    pub fn wall_deadline(&self) -> SystemTime {
        SystemTime::now() + self.remaining()
    }

    /// Whether the term is still in force: not cancelled and before its
    /// deadline.
    pub fn is_valid(&self) -> bool {
        !self.is_cancelled() && !self.remaining().is_zero()
    }

    /// Whether the term has been told to end.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// Completes when the term ends, for whatever reason, always before the
    /// deadline. The work should wrap up and return.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// A token that is cancelled when the term ends, for APIs that take a
    /// [`CancellationToken`].
    pub fn cancellation_token(&self) -> CancellationToken {
        self.inner.cancel.child_token()
    }

    /// Completes when the work must be gone: once all [`TermGuard`]s are
    /// dropped after the term was cancelled, or at the deadline at the
    /// latest. [`Elector::run_while_leader`](crate::Elector::run_while_leader)
    /// drops the work's future here.
    pub async fn ended(&self) {
        self.inner.ended.cancelled().await
    }

    /// Completes once the deadline has passed, following renewals: the last
    /// instant the work may act, whatever the backend is doing. Unlike
    /// [`ended`](Term::ended), this needs no backend task to run, so it
    /// bounds the work even while the elector's driver is stalled.
    pub async fn expired(&self) {
        loop {
            let deadline = self.deadline_mono();
            self.inner.clock.sleep_until(deadline).await;
            if self.deadline_mono() <= deadline {
                return;
            }
        }
    }

    /// Runs `work` until it finishes (its output), or until `stop`
    /// completes or the deadline passes (`None`, and the work is dropped).
    /// The deadline bounds the work even if the driver that would end the
    /// term is not running (a paused or starved process).
    pub(crate) async fn bound<T>(
        &self,
        stop: impl Future<Output = ()>,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        tokio::select! {
            biased;
            _ = stop => None,
            _ = self.expired() => None,
            output = work => Some(output),
        }
    }

    /// Holds the term open for work in progress: a graceful hand-over
    /// (resign, shutdown) waits until every guard is dropped, bounded by the
    /// deadline, before releasing the lease. This is goneli's barrier.
    pub fn hold(&self) -> TermGuard {
        self.inner.guards.send_modify(|n| *n += 1);
        TermGuard { term: self.clone() }
    }

    pub(crate) fn set_deadline(&self, deadline: MonoTime) {
        self.inner
            .deadline
            .fetch_max(deadline.as_nanos(), Ordering::AcqRel);
    }

    pub(crate) fn cancel(&self) {
        self.inner.cancel.cancel();
    }

    pub(crate) fn end(&self) {
        self.inner.cancel.cancel();
        self.inner.ended.cancel();
    }

    /// Completes once no guard is held.
    pub(crate) async fn drained(&self) {
        let mut rx = self.inner.guards.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

/// Keeps a [`Term`] from being released while work is in progress; see
/// [`Term::hold`].
#[derive(Debug)]
pub struct TermGuard {
    term: Term,
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        self.term
            .inner
            .guards
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}
