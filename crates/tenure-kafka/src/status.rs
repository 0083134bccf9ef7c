//! goneli's `State()`/`Await()` and a little more: the life cycle of a
//! Kafka candidate's clients, its fatal error, and how often it polled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::error::KafkaBackendError;

/// The life cycle of a Kafka candidate's clients (goneli's `State`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Operational, with a live consumer subscription.
    Live,
    /// Closing the Kafka clients.
    Closing,
    /// Completely disposed of.
    Closed,
}

/// A view of a [`KafkaCoordinator`](crate::KafkaCoordinator) that stays
/// with the caller after the coordinator moved into its elector.
///
/// ```
/// use tenure_kafka::{KafkaConfig, KafkaCoordinator, State};
///
/// let coordinator = KafkaCoordinator::new(KafkaConfig::new("10.0.0.5:9092"))?;
/// let status = coordinator.status();
/// assert_eq!(status.state(), State::Live);
/// assert!(status.fatal_error().is_none());
/// # Ok::<(), tenure_kafka::KafkaBackendError>(())
/// ```
#[derive(Clone, Debug)]
pub struct KafkaStatus {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: watch::Sender<State>,
    fatal: Mutex<Option<KafkaBackendError>>,
    polls: AtomicU64,
}

impl KafkaStatus {
    pub(crate) fn new() -> Self {
        KafkaStatus {
            inner: Arc::new(Inner {
                state: watch::Sender::new(State::Live),
                fatal: Mutex::new(None),
                polls: AtomicU64::new(0),
            }),
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        *self.inner.state.borrow()
    }

    /// Waits until the clients are closed (goneli's `Await`).
    pub async fn closed(&self) {
        let mut rx = self.inner.state.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|s| *s == State::Closed).await;
    }

    /// The fatal error that stopped the elector, if one did.
    pub fn fatal_error(&self) -> Option<KafkaBackendError> {
        self.inner
            .fatal
            .lock()
            .map_or_else(|poisoned| poisoned.into_inner().clone(), |f| f.clone())
    }

    /// How many times the consumer was polled: network I/O happens at most
    /// once per minimum poll interval, however often the application
    /// pulses.
    pub fn polls(&self) -> u64 {
        self.inner.polls.load(Ordering::Acquire)
    }

    pub(crate) fn set_state(&self, state: State) {
        self.inner.state.send_replace(state);
    }

    pub(crate) fn set_fatal(&self, error: KafkaBackendError) {
        match self.inner.fatal.lock() {
            Ok(mut f) => *f = Some(error),
            Err(poisoned) => *poisoned.into_inner() = Some(error),
        }
    }

    pub(crate) fn polled(&self) {
        self.inner.polls.fetch_add(1, Ordering::AcqRel);
    }
}
