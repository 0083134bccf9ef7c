//! The elector handle's state, as a backend publishes it: the role watch,
//! the event stream, the current term and its metrics. Both backends (the
//! lease driver and a [`Coordinator`](crate::Coordinator)) publish through
//! this one type, so the handle means the same whatever the backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::clock::{Clock, MonoTime};
use crate::link::DrainedTo;
use crate::machine::{EndReason, Fault};
use crate::metrics::Meter;
use crate::record::{GroupName, Holder, Metadata};
use crate::role::{Event, LeaderInfo, Role};
use crate::term::Term;

pub(crate) struct Publisher {
    pub(crate) group: GroupName,
    pub(crate) holder: Holder,
    pub(crate) clock: Arc<dyn Clock>,
    role: watch::Sender<Role>,
    events: Events,
    meter: Meter,
    term: Option<Term>,
    /// The deadline of the term in force (monotonic nanoseconds), 0 when
    /// not leading: what `Elector::is_leader` reads without a lock.
    leader_until: Arc<AtomicU64>,
    /// What the last failure was, to send a health event only when that
    /// changes: a kind such as "timeout", not the message, whose details
    /// (durations, addresses) differ from one retry to the next.
    store_error: Option<String>,
    /// Set once when the backend can never lead again; the handle reports it.
    fault: Arc<OnceLock<Fault>>,
    /// Where to say that an ended term's work has drained.
    drained: DrainedTo,
}

/// The event stream of one elector, created when someone first listens:
/// an elector nobody listens to costs no buffer (a broadcast channel
/// allocates all its slots up front), and events sent before the first
/// listener would be lost in any case.
#[derive(Clone, Default)]
pub(crate) struct Events(Arc<OnceLock<broadcast::Sender<Event>>>);

impl Events {
    /// Room for this many undelivered events per listener.
    const CAPACITY: usize = 256;

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0
            .get_or_init(|| broadcast::channel(Self::CAPACITY).0)
            .subscribe()
    }

    pub(crate) fn send(&self, event: Event) {
        if let Some(tx) = self.0.get() {
            let _ = tx.send(event);
        }
    }
}

/// What the handle and its publisher share.
pub(crate) struct Shared {
    pub(crate) events: Events,
    pub(crate) leader_until: Arc<AtomicU64>,
    pub(crate) fault: Arc<OnceLock<Fault>>,
}

impl Publisher {
    pub(crate) fn new(
        group: GroupName,
        holder: Holder,
        clock: Arc<dyn Clock>,
        role: watch::Sender<Role>,
        shared: &Shared,
        drained: DrainedTo,
    ) -> Publisher {
        Publisher {
            meter: Meter::new(&group),
            group,
            holder,
            clock,
            role,
            events: shared.events.clone(),
            term: None,
            leader_until: shared.leader_until.clone(),
            store_error: None,
            fault: shared.fault.clone(),
            drained,
        }
    }

    /// The term in force, if leading.
    pub(crate) fn term(&self) -> Option<&Term> {
        self.term.as_ref()
    }

    pub(crate) fn elected(&mut self, token: u64, deadline: MonoTime) -> Term {
        self.elected_after(token, deadline, Metadata::new())
    }

    /// A new term; `predecessor` is what the record it replaced published.
    pub(crate) fn elected_after(
        &mut self,
        token: u64,
        deadline: MonoTime,
        predecessor: Metadata,
    ) -> Term {
        if self.term.is_some() {
            // Two terms are never in force at once: a backend reporting a
            // new term without ending the old one ends it here, at once.
            tracing::error!(group = %self.group, token, "elected while a term was in force; ending the old term first");
            let now = self.clock.now().mono;
            self.end_term(EndReason::Superseded { by: None }, now);
        }
        let term = Term::new(
            self.group.clone(),
            self.holder.id.clone(),
            token,
            deadline,
            self.clock.clone(),
            predecessor,
        );
        tracing::info!(group = %self.group, candidate = %self.holder.id, token, "elected leader");
        self.meter.elected(term.remaining());
        self.term = Some(term.clone());
        self.leader_until
            .store(deadline.as_nanos(), Ordering::Release);
        self.role.send_replace(Role::Leader(term.clone()));
        self.events.send(Event::Elected { token });
        term
    }

    pub(crate) fn renewed(&mut self, deadline: MonoTime, latency: Duration) {
        if let Some(term) = &self.term {
            term.set_deadline(deadline);
            self.leader_until
                .store(term.deadline_mono().as_nanos(), Ordering::Release);
            self.meter.renewed(latency, term.remaining());
            tracing::trace!(group = %self.group, token = term.token(), ?latency, "renewed");
        }
    }

    /// Ends the current term: the work is told to stop now and must be gone
    /// by `work_deadline`; the drained channel hears when it is.
    pub(crate) fn end_term(&mut self, reason: EndReason, work_deadline: MonoTime) {
        let Some(term) = self.term.take() else {
            return;
        };
        let token = term.token();
        self.leader_until.store(0, Ordering::Release);
        tracing::info!(group = %self.group, candidate = %self.holder.id, token, %reason, "term ended");
        self.meter.ended(&reason);
        term.cancel();
        let clock = self.clock.clone();
        let drained = self.drained.clone();
        tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = term.drained() => drained.drained(term.token()),
                _ = clock.sleep_until(work_deadline) => {}
            }
            term.end();
        });
        self.role.send_replace(Role::Candidate);
        self.events.send(Event::Ousted { token, reason });
    }

    pub(crate) fn leader_changed(&mut self, leader: Option<LeaderInfo>) {
        if self.term.is_none() {
            self.role.send_replace(match &leader {
                Some(l) => Role::Follower { leader: l.clone() },
                None => Role::Candidate,
            });
        }
        self.events.send(Event::LeaderChanged { leader });
    }

    /// Notes whether the backend's store answers, sending an event when
    /// that changes (not for every failure): `error` is the failure's kind,
    /// compared between failures, and its message, reported.
    pub(crate) fn store_health(&mut self, op: &'static str, error: Option<(String, String)>) {
        match error {
            None => {
                if self.store_error.take().is_some() {
                    tracing::info!(group = %self.group, "store answers again");
                    self.events.send(Event::StoreHealth { message: None });
                }
            }
            Some((kind, message)) => {
                self.meter.store_error(op);
                if self.store_error.as_deref() == Some(kind.as_str()) {
                    tracing::debug!(group = %self.group, op, error = %message, "store operation failed again");
                } else {
                    tracing::warn!(group = %self.group, op, error = %message, "store operation failed");
                    self.store_error = Some(kind);
                    self.events.send(Event::StoreHealth {
                        message: Some(message),
                    });
                }
            }
        }
    }

    /// The backend can never lead again: report why, once.
    pub(crate) fn failed(&mut self, fault: Fault) {
        tracing::error!(group = %self.group, candidate = %self.holder.id, %fault, "giving up");
        if self.fault.set(fault.clone()).is_ok() {
            self.events.send(Event::Failed { fault });
        }
    }

    pub(crate) fn stopped(&mut self) {
        self.leader_until.store(0, Ordering::Release);
        if let Some(term) = self.term.take() {
            term.end();
        }
        tracing::debug!(group = %self.group, candidate = %self.holder.id, "stopped");
        self.role.send_replace(Role::Stopped);
    }
}
