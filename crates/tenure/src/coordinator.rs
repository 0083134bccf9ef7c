//! The seam for backends whose leadership is decided outside tenure, such as
//! Kafka's consumer-group assignment (NELI, in `tenure-kafka`).
//!
//! A [`Coordinator`] gets a [`Session`] and reports through it what happened
//! (elected with a token, renewed, term ended, leader changed); users hold
//! the same [`Elector`](crate::Elector) handle as with a lease store: role
//! watch, events, `run_while_leader`, `pulse`, `resign`, `shutdown`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::clock::{Clock, MonoTime};
use crate::config::Timing;
use crate::elector::PulseState;
use crate::machine::{EndReason, Fault};
use crate::publish::Publisher;
use crate::record::{GroupName, Holder, Metadata};
use crate::role::LeaderInfo;
use crate::term::Term;

/// What the elector's handle asks of its backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Give up the current term and stand again later.
    Resign,
    /// Drain, release and stop for good (also sent when every handle is
    /// dropped).
    Shutdown,
}

/// A backend that decides leadership itself and reports it through a
/// [`Session`]. [`run`](Coordinator::run) returns once it has stopped; the
/// elector is then [`Role::Stopped`](crate::Role::Stopped).
///
/// The contract is the lease backend's: report [`Session::elected`] only
/// with a token greater than every earlier term's in the group, end a term
/// ([`Session::end_term`]) no later than its deadline, and never report two
/// terms at once.
#[async_trait]
pub trait Coordinator: Send + 'static {
    /// Campaigns until told to shut down.
    async fn run(self: Box<Self>, session: Session);
}

/// A backend's side of an elector: what it publishes through (role, events,
/// terms) and what it hears from the handle (commands, drained work,
/// pulses). A [`Coordinator`] gets one; the engine that runs lease
/// elections keeps one per group, so both backends drive the handle the
/// same way.
pub struct Session {
    pub(crate) publisher: Publisher,
    /// Commands and drained terms, for a coordinator that reads them here;
    /// `None` for a group in an engine, which hears them on its own channel.
    inbox: Option<Inbox>,
    pub(crate) pulse: Arc<PulseState>,
    timing: Timing,
    metadata: Metadata,
}

struct Inbox {
    commands: mpsc::UnboundedReceiver<Command>,
    drained: mpsc::UnboundedReceiver<u64>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("group", &self.publisher.group)
            .field("candidate", &self.publisher.holder.id)
            .finish()
    }
}

impl Session {
    /// A session whose commands and drained terms arrive on `channels`
    /// (a coordinator's), or reach an engine directly (`None`).
    pub(crate) fn new(
        publisher: Publisher,
        channels: Option<(
            mpsc::UnboundedReceiver<Command>,
            mpsc::UnboundedReceiver<u64>,
        )>,
        pulse: Arc<PulseState>,
        timing: Timing,
        metadata: Metadata,
    ) -> Self {
        Session {
            publisher,
            inbox: channels.map(|(commands, drained)| Inbox { commands, drained }),
            pulse,
            timing,
            metadata,
        }
    }

    /// The group this session stands for.
    pub fn group(&self) -> &GroupName {
        &self.publisher.group
    }

    /// This candidate (id and incarnation).
    pub fn candidate(&self) -> &Holder {
        &self.publisher.holder
    }

    /// What this candidate publishes when it leads.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The validated timing the user configured.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The elector's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.publisher.clock
    }

    /// The current term, if leading.
    pub fn term(&self) -> Option<&Term> {
        self.publisher.term()
    }

    /// This candidate leads from now until `deadline` (on [`clock`](Session::clock))
    /// unless renewed, with fencing token `token`.
    pub fn elected(&mut self, token: u64, deadline: MonoTime) -> Term {
        self.publisher.elected(token, deadline)
    }

    /// The term's deadline moves to `deadline`.
    pub fn renewed(&mut self, deadline: MonoTime, latency: Duration) {
        self.publisher.renewed(deadline, latency)
    }

    /// The term ends: its work is told to stop now and is dropped at
    /// `work_deadline` at the latest. Does nothing when not leading.
    pub fn end_term(&mut self, reason: EndReason, work_deadline: MonoTime) {
        self.publisher.end_term(reason, work_deadline)
    }

    /// Ends the term like [`end_term`](Session::end_term) and waits until
    /// its work has drained or `work_deadline` passed: the barrier a
    /// rebalance waits on so the next leader cannot start early.
    pub async fn end_term_and_drain(&mut self, reason: EndReason, work_deadline: MonoTime) {
        let Some(token) = self.publisher.term().map(Term::token) else {
            return;
        };
        self.publisher.end_term(reason, work_deadline);
        let clock = self.publisher.clock.clone();
        let Some(inbox) = self.inbox.as_mut() else {
            return clock.sleep_until(work_deadline).await;
        };
        let drained = async {
            while let Some(t) = inbox.drained.recv().await {
                if t == token {
                    return;
                }
            }
        };
        tokio::select! {
            biased;
            _ = drained => {}
            _ = clock.sleep_until(work_deadline) => {}
        }
    }

    /// Another candidate leads now (`Some`), or nobody visibly does.
    pub fn leader_changed(&mut self, leader: Option<LeaderInfo>) {
        self.publisher.leader_changed(leader)
    }

    /// Reports whether the backend's store answers (`None`) or fails. An
    /// event is sent when the message changes, so pass a message that stays
    /// the same while the failure does (no durations or counters in it).
    pub fn store_health(&mut self, op: &'static str, error: Option<String>) {
        self.publisher
            .store_health(op, error.map(|message| (message.clone(), message)))
    }

    /// The backend can never lead again, for `fault`: the handle reports it
    /// ([`Event::Failed`](crate::Event::Failed), then
    /// [`ElectorError::Failed`](crate::ElectorError::Failed) from
    /// `wait_for_leadership`). End any term first; the coordinator should
    /// then return from [`run`](Coordinator::run).
    pub fn fail(&mut self, fault: Fault) {
        self.publisher.failed(fault)
    }

    /// The next command from the handle; [`Command::Shutdown`] once every
    /// handle is gone.
    pub async fn command(&mut self) -> Command {
        match self.inbox.as_mut() {
            Some(inbox) => inbox.commands.recv().await.unwrap_or(Command::Shutdown),
            // An engine's group hears commands on the engine's channel.
            None => std::future::pending().await,
        }
    }

    /// When the application last called [`Elector::pulse`](crate::Elector::pulse).
    pub fn last_pulse(&self) -> MonoTime {
        MonoTime::from_nanos(self.pulse.last.load(Ordering::Acquire))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.publisher.stopped();
    }
}
