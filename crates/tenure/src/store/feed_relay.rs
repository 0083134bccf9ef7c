//! What a store's change-feed listener is built from: a relay that never
//! waits for its reader, the back-off between reconnections, and the
//! wake-up hints of stores that only say "something changed".

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Change, StoreFeedSender};

/// How often a [`FeedRelay`] that fell behind offers its reader the
/// resync it owes.
pub const RESYNC_RETRY: Duration = Duration::from_millis(20);

/// Hands changes from a store's listener to a [`StoreFeed`](super::StoreFeed) without ever
/// waiting for its reader: when the feed is full, the change is dropped
/// and a [`Change::Resync`] is owed, sent as soon as there is room (it
/// covers every change dropped meanwhile). A listener that reads an
/// unbounded source (a socket's notifications) so never piles them up
/// behind a slow reader.
///
/// ```
/// use tenure::{Change, FeedRelay, GroupName, StoreFeed};
/// let (tx, mut feed) = StoreFeed::channel(1);
/// let mut relay = FeedRelay::new(tx);
/// let hint = |g: &str| Change::Hint { group: GroupName::new(g).unwrap() };
/// assert!(relay.send(hint("a")));
/// assert!(relay.send(hint("b"))); // full: dropped, a resync owed
/// assert!(relay.owes_resync());
/// assert_eq!(feed.try_next(), Some(hint("a")));
/// assert!(relay.settle());
/// assert_eq!(feed.try_next(), Some(Change::Resync));
/// ```
#[derive(Debug)]
pub struct FeedRelay {
    tx: StoreFeedSender,
    owes_resync: bool,
}

impl FeedRelay {
    /// A relay into the feed of `tx`, owing nothing.
    pub fn new(tx: StoreFeedSender) -> Self {
        FeedRelay {
            tx,
            owes_resync: false,
        }
    }

    /// Relays one change (or the resync owed, which covers it); `false`
    /// once the reader is gone and the listener should stop.
    pub fn send(&mut self, change: Change) -> bool {
        if !self.settle() {
            return false;
        }
        if self.owes_resync {
            return true;
        }
        match self.tx.try_send(change) {
            Ok(sent) => {
                self.owes_resync = !sent;
                true
            }
            Err(()) => false,
        }
    }

    /// Notes that changes were missed (the listener reconnected), and
    /// offers the resync at once; `false` once the reader is gone.
    pub fn missed(&mut self) -> bool {
        self.owes_resync = true;
        self.settle()
    }

    /// After the connection feeding the relay failed: unless the reader is
    /// gone, opens a new one (`reopen`, not called when the reader is gone)
    /// and, once it is open, owes the reader a resync (changes made
    /// meanwhile were missed) and offers it. The new connection, or `None`
    /// when the feed should end: the reader is gone, or reopening failed
    /// (`failed` is told why; the engine then polls until it subscribes
    /// again).
    pub async fn reconnect<S, E, Fut>(
        &mut self,
        reopen: impl FnOnce() -> Fut,
        failed: impl FnOnce(E),
    ) -> Option<S>
    where
        Fut: Future<Output = Result<S, E>>,
    {
        if self.is_closed() {
            return None;
        }
        match reopen().await {
            Ok(again) => self.missed().then_some(again),
            Err(e) => {
                failed(e);
                None
            }
        }
    }

    /// Offers the resync owed, if any; `false` once the reader is gone.
    /// Call it now and then while one is owed: nothing else may come to
    /// carry it.
    pub fn settle(&mut self) -> bool {
        if !self.owes_resync {
            return !self.tx.is_closed();
        }
        match self.tx.try_send(Change::Resync) {
            Ok(sent) => {
                self.owes_resync = !sent;
                true
            }
            Err(()) => false,
        }
    }

    /// Whether a resync is owed.
    pub fn owes_resync(&self) -> bool {
        self.owes_resync
    }

    /// Waits for `source` (the listener's next event) while doing the
    /// relay's own duties meanwhile: offering the resync owed every
    /// [`RESYNC_RETRY`], since nothing else may come to carry it, and
    /// noticing the reader is gone. `None` once it is: the listener should
    /// stop.
    pub async fn next<T>(&mut self, source: impl Future<Output = T>) -> Option<T> {
        let mut source = std::pin::pin!(source);
        let tx = self.tx.clone();
        loop {
            tokio::select! {
                biased;
                item = &mut source => return Some(item),
                () = tx.closed() => return None,
                () = tokio::time::sleep(RESYNC_RETRY), if self.owes_resync => {
                    if !self.settle() {
                        return None;
                    }
                }
            }
        }
    }

    /// Whether the reader is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A store's per-group change feeds, turned off for a while after the
/// server refused one (an ACL without the permission it needs), so that
/// electors poll meanwhile instead of asking again for a feed that cannot
/// work. Clones share the state.
#[derive(Clone, Debug, Default)]
pub struct FeedsOff(std::sync::Arc<std::sync::Mutex<Option<tokio::time::Instant>>>);

impl FeedsOff {
    /// Whether feeds are off now.
    pub fn now(&self) -> bool {
        let mut off = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match *off {
            Some(until) if tokio::time::Instant::now() < until => true,
            Some(_) => {
                *off = None;
                false
            }
            None => false,
        }
    }

    /// Turns feeds off for `retry_after` from now.
    pub fn for_a_while(&self, retry_after: std::time::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(tokio::time::Instant::now() + retry_after);
    }
}

/// How long a store's listener pauses before it watches again after
/// `failures` failed attempts in a row: 50 ms, doubling, at most 2 s (a
/// feed that stays down leaves the electors polling meanwhile).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tenure::store::feed_backoff(1), Duration::from_millis(50));
/// assert_eq!(tenure::store::feed_backoff(3), Duration::from_millis(200));
/// assert_eq!(tenure::store::feed_backoff(u32::MAX), Duration::from_secs(2));
/// ```
pub fn feed_backoff(failures: u32) -> std::time::Duration {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(50);
    const MOST: std::time::Duration = std::time::Duration::from_secs(2);
    let exp = failures.saturating_sub(1).min(16);
    (FIRST * 2u32.pow(exp)).min(MOST)
}

/// Hints the reader of a [`ChangeFeed`](super::ChangeFeed) without waiting; `false` once the
/// reader is gone. A full channel already holds a hint: the reader re-reads
/// once and sees this change too.
///
/// ```
/// let (tx, mut feed) = tenure::store::ChangeFeed::channel();
/// assert!(tenure::store::send_hint(&tx));
/// assert!(tenure::store::send_hint(&tx), "a full channel is no error");
/// drop(feed);
/// assert!(!tenure::store::send_hint(&tx));
/// ```
pub fn send_hint(tx: &mpsc::Sender<()>) -> bool {
    !matches!(tx.try_send(()), Err(mpsc::error::TrySendError::Closed(_)))
}

/// What [`keep_hinting`] hands each attempt of a per-group hint feed (one
/// watch or subscription): the attempt calls
/// [`connected`](HintAttempt::connected) once it is up, so that the
/// back-off after a later failure starts again from the shortest.
#[derive(Clone, Debug, Default)]
pub struct HintAttempt {
    connected: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl HintAttempt {
    /// The watch or subscription is up: the failures before it no longer
    /// count.
    pub fn connected(&self) {
        self.connected
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Keeps a per-group hint feed alive for as long as its reader (`tx`'s
/// receiver) is there. `attempt` is one watch or subscription: it hints
/// until the reader is gone (`Ok(())`) or the connection breaks (`Err`).
/// After a transient failure (reported to `lost`) it runs again, once
/// [`feed_backoff`] of the failures in a row has passed (a failure after
/// the attempt [connected](HintAttempt::connected) is the first in a row).
/// `Ok(())` once the reader is gone; `Err` with the first failure an
/// operator must fix (a permission, say), after which the store's electors
/// poll.
pub async fn keep_hinting<E, F, A>(
    tx: &mpsc::Sender<()>,
    mut attempt: F,
    mut lost: impl FnMut(&E),
) -> Result<(), E>
where
    E: crate::error::BackendError,
    F: FnMut(HintAttempt) -> A,
    A: Future<Output = Result<(), E>>,
{
    let mut failures = 0u32;
    loop {
        let this = HintAttempt::default();
        let outcome = tokio::select! {
            biased;
            _ = tx.closed() => return Ok(()),
            r = attempt(this.clone()) => r,
        };
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                if this.connected.load(std::sync::atomic::Ordering::Relaxed) {
                    failures = 0;
                }
                failures = failures.saturating_add(1);
                lost(&e);
            }
        }
        tokio::select! {
            biased;
            _ = tx.closed() => return Ok(()),
            _ = tokio::time::sleep(feed_backoff(failures)) => {}
        }
    }
}
