//! Health and bounded waits on the elector handle: what a liveness probe
//! and a "lead within N seconds or give up" caller need.

use std::time::Duration;

use crate::elector::Elector;
use crate::error::ElectorError;
use crate::role::Role;
use crate::term::Term;

/// An elector's health, for a liveness probe (client-go's
/// `HealthzAdaptor`): see [`Elector::health`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Campaigning, following, leading on a term in force, or stopped on
    /// request.
    Healthy,
    /// Something a supervisor should act on (restart the process).
    Unhealthy {
        /// What is wrong, for the probe's response.
        reason: String,
    },
}

impl Health {
    /// Whether this is [`Health::Healthy`].
    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }
}

/// Where the application's pulse stands (goneli's `Deadline()`): see
/// [`Elector::liveness`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// How long ago the application last called
    /// [`pulse`](Elector::pulse) (or the elector started).
    pub since_last_pulse: Duration,
    /// How long until liveness is lost unless it pulses again: the leader
    /// then resigns and the candidate stops standing. Zero once lost.
    pub lost_in: Duration,
}

impl Liveness {
    /// Whether liveness is lost now.
    pub fn is_lost(&self) -> bool {
        self.lost_in.is_zero()
    }
}

impl Elector {
    /// Where the application's pulse stands, with a
    /// [`liveness_timeout`](crate::ElectorBuilder::liveness_timeout)
    /// (`None` without one): goneli's `Deadline()`, for an application that
    /// wants to know how long it may go without pulsing, or to report it.
    /// The same for lease stores and for Kafka.
    pub fn liveness(&self) -> Option<Liveness> {
        let timeout = self.timing().liveness_timeout?;
        let now = self.shared.clock.now().mono;
        let last = crate::clock::MonoTime::from_nanos(
            self.shared
                .pulse
                .last
                .load(std::sync::atomic::Ordering::Acquire),
        );
        Some(Liveness {
            since_last_pulse: now.saturating_since(last),
            lost_in: (last + timeout).saturating_since(now),
        })
    }

    /// The elector's health: unhealthy while this process believes it leads
    /// on a term whose deadline has passed (the task that would have ended
    /// the term is not running: the process is wedged), or once it stopped
    /// because it can never lead. Wire it into a liveness probe so a
    /// supervisor restarts a wedged leader; the term's own deadline still
    /// protects the shared resource meanwhile.
    ///
    /// ```
    /// # use tenure::{Elector, MemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let elector = Elector::builder(MemoryStore::new(), "jobs").start()?;
    /// // In an HTTP handler for /healthz (see examples/healthz.rs):
    /// let status = if elector.health().is_healthy() { 200 } else { 500 };
    /// assert_eq!(status, 200);
    /// # elector.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn health(&self) -> Health {
        match self.role() {
            Role::Leader(term) if !term.is_cancelled() && term.remaining().is_zero() => {
                Health::Unhealthy {
                    reason: format!(
                        "leads group {} on term {} past its deadline: the elector is not running",
                        term.group(),
                        term.token()
                    ),
                }
            }
            Role::Stopped => match self.fault() {
                Some(fault) => Health::Unhealthy {
                    reason: fault.to_string(),
                },
                None => Health::Healthy,
            },
            _ => Health::Healthy,
        }
    }

    /// Waits at most `timeout` for leadership: the term, or
    /// [`ElectorError::NotLeader`] once the time is up (the candidate keeps
    /// standing; call [`shutdown`](Elector::shutdown) to withdraw).
    pub async fn wait_for_leadership_within(
        &self,
        timeout: Duration,
    ) -> Result<Term, ElectorError> {
        match tokio::time::timeout(timeout, self.wait_for_leadership()).await {
            Ok(result) => result,
            Err(_) => Err(ElectorError::NotLeader { waited: timeout }),
        }
    }

    /// Tries once: waits for this candidate's first look at the lease and,
    /// if it was free, its attempt to take it. `Some(term)` if it leads,
    /// `None` if another candidate does (or the store did not answer within
    /// two operation timeouts). The candidate keeps standing either way.
    pub async fn try_acquire(&self) -> Result<Option<Term>, ElectorError> {
        let limit = self.timing().op_timeout * 2;
        let mut role = self.watch_role();
        let decided = async {
            loop {
                match &*role.borrow_and_update() {
                    Role::Leader(t) if t.is_valid() => return Ok(Some(t.clone())),
                    Role::Follower { .. } => return Ok(None),
                    Role::Stopped => return Err(()),
                    _ => {}
                }
                if role.changed().await.is_err() {
                    return Err(());
                }
            }
        };
        match tokio::time::timeout(limit, decided).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(())) => Err(self
                .wait_for_leadership()
                .await
                .err()
                .unwrap_or(ElectorError::Stopped)),
            Err(_) => Ok(None),
        }
    }
}
