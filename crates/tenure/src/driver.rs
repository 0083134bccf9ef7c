//! The task behind an [`Elector`](crate::Elector): it feeds the state machine
//! time, store replies and commands, and carries out its actions.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};

use crate::clock::{Clock, MonoTime, Now};
use crate::config::Timing;
use crate::elector::PulseState;
use crate::error::StoreError;
use crate::machine::{Action, Input, Machine, Phase};
use crate::metrics::Meter;
use crate::record::{GroupName, Holder, Metadata};
use crate::role::{Event, LeaderInfo, Role};
use crate::store::{ChangeFeed, LeaseStore};
use crate::term::Term;

/// What the handle asks of the driver.
pub(crate) enum Command {
    Resign,
    Shutdown,
}

pub(crate) struct Parts {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) group: GroupName,
    pub(crate) holder: Holder,
    pub(crate) timing: Timing,
    pub(crate) metadata: Metadata,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) role: watch::Sender<Role>,
    pub(crate) events: broadcast::Sender<Event>,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    pub(crate) pulse: Arc<PulseState>,
}

type OpFuture = Pin<Box<dyn Future<Output = Input> + Send>>;

/// Which store operation is in flight, for logs and metrics.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Read,
    Write,
    Renew,
    Release,
}

impl OpKind {
    fn label(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "acquire",
            OpKind::Renew => "renew",
            OpKind::Release => "release",
        }
    }
}

struct Driver {
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    holder: Holder,
    timing: Timing,
    clock: Arc<dyn Clock>,
    role: watch::Sender<Role>,
    events: broadcast::Sender<Event>,
    pulse: Arc<PulseState>,
    meter: Meter,
    term: Option<Term>,
    fed_pulse: u64,
    store_error: Option<String>,
    drained_tx: mpsc::UnboundedSender<u64>,
}

pub(crate) async fn run(parts: Parts) {
    let Parts {
        store,
        group,
        holder,
        timing,
        metadata,
        clock,
        role,
        events,
        mut commands,
        pulse,
    } = parts;
    let now = clock.now();
    let mut machine = Machine::new(
        timing.clone(),
        holder.clone(),
        metadata,
        rand::random(),
        now,
    );
    let (drained_tx, mut drained_rx) = mpsc::unbounded_channel();
    let mut d = Driver {
        meter: Meter::new(&group, &holder.id),
        store,
        group,
        holder,
        timing,
        clock,
        role,
        events,
        pulse,
        term: None,
        fed_pulse: 0,
        store_error: None,
        drained_tx,
    };
    let mut feed = d.subscribe().await;
    let mut commands_open = true;
    let mut input = Input::Tick;
    // The store operation in flight. Kept out of `Driver` so that the
    // driver can be borrowed across awaits without the future being `Sync`.
    let mut op: Option<(OpKind, OpFuture)> = None;
    loop {
        let now = d.clock.now();
        let mut actions = d.feed_pulse(&mut machine, now);
        actions.extend(machine.step(now, input));
        if d.carry_out(actions, now, &mut op) {
            break;
        }
        let now = d.clock.now();
        let wake = machine.next_wake(now);
        d.watch_liveness(&machine, now);
        input = tokio::select! {
            biased;
            cmd = commands.recv(), if commands_open => match cmd {
                Some(Command::Resign) => Input::Resign,
                Some(Command::Shutdown) => Input::Shutdown,
                None => {
                    // Every handle was dropped: leave cleanly.
                    commands_open = false;
                    Input::Shutdown
                }
            },
            Some(token) = drained_rx.recv() => Input::Drained { token },
            (kind, reply) = poll_op(&mut op) => {
                d.note_reply(kind, &reply);
                reply
            }
            hint = next_hint(&mut feed) => match hint {
                Some(()) => Input::Changed,
                None => {
                    tracing::debug!(group = %d.group, "change feed ended; polling");
                    feed = None;
                    Input::Tick
                }
            },
            _ = d.pulse.wake.notified() => Input::Tick,
            _ = sleep_until(&d.clock, wake) => Input::Tick,
        };
        if feed.is_none() && matches!(input, Input::Tick) && machine.phase() == Phase::Candidate {
            feed = d.subscribe().await;
        }
    }
}

async fn poll_op(op: &mut Option<(OpKind, OpFuture)>) -> (OpKind, Input) {
    match op {
        Some((kind, fut)) => {
            let kind = *kind;
            let input = fut.await;
            *op = None;
            (kind, input)
        }
        None => std::future::pending().await,
    }
}

async fn next_hint(feed: &mut Option<ChangeFeed>) -> Option<()> {
    match feed {
        Some(f) => f.changed().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(clock: &Arc<dyn Clock>, wake: Option<MonoTime>) {
    match wake {
        Some(t) => clock.sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    async fn subscribe(&self) -> Option<ChangeFeed> {
        match self.store.changes(&self.group).await {
            Ok(feed) => feed,
            Err(e) => {
                tracing::debug!(group = %self.group, error = %e, "no change feed; polling");
                None
            }
        }
    }

    /// Feeds the latest application pulse, if any arrived since the last.
    fn feed_pulse(&mut self, machine: &mut Machine, now: Now) -> Vec<Action> {
        let last = self.pulse.last.load(Ordering::Acquire);
        if last <= self.fed_pulse {
            return Vec::new();
        }
        self.fed_pulse = last;
        let at = MonoTime::from_nanos(last).min(now.mono);
        machine.step(now, Input::Pulse { at })
    }

    /// Asks pulses to wake the driver while the application's silence is
    /// what keeps this candidate from leading.
    fn watch_liveness(&self, machine: &Machine, now: Now) {
        if let Some(timeout) = self.timing.liveness_timeout {
            let last = MonoTime::from_nanos(self.pulse.last.load(Ordering::Acquire));
            let silent = now.mono >= last + timeout;
            let standing = machine.phase() == Phase::Candidate;
            self.pulse
                .waiting
                .store(silent && standing, Ordering::Release);
        }
    }

    /// Carries out actions; returns true once the machine has stopped.
    fn carry_out(
        &mut self,
        actions: Vec<Action>,
        now: Now,
        op_slot: &mut Option<(OpKind, OpFuture)>,
    ) -> bool {
        let mut stopped = false;
        for action in actions {
            match action {
                Action::Read { op, deadline } => {
                    let store = self.store.clone();
                    let group = self.group.clone();
                    let clock = self.clock.clone();
                    let wait = deadline.saturating_since(now.mono);
                    let fut = async move {
                        let result = tokio::select! {
                            r = store.read(&group) => r,
                            _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(wait)),
                        };
                        Input::ReadDone { op, result }
                    };
                    *op_slot = Some((OpKind::Read, Box::pin(fut)));
                }
                Action::Cas {
                    op,
                    expected,
                    record,
                    deadline,
                } => {
                    let kind = if record.holder.is_none() {
                        OpKind::Release
                    } else if self.term.is_some() {
                        OpKind::Renew
                    } else {
                        OpKind::Write
                    };
                    let store = self.store.clone();
                    let group = self.group.clone();
                    let clock = self.clock.clone();
                    let wait = deadline.saturating_since(now.mono);
                    let fut = async move {
                        let result = tokio::select! {
                            r = store.compare_and_swap(&group, expected, &record) => r,
                            _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(wait)),
                        };
                        Input::CasDone { op, result }
                    };
                    *op_slot = Some((kind, Box::pin(fut)));
                }
                Action::Elected { token, deadline } => {
                    let term = Term::new(
                        self.group.clone(),
                        self.holder.id.clone(),
                        token,
                        deadline,
                        self.clock.clone(),
                    );
                    tracing::info!(group = %self.group, candidate = %self.holder.id, token, "elected leader");
                    self.meter.elected(term.remaining());
                    self.term = Some(term.clone());
                    self.role.send_replace(Role::Leader(term));
                    let _ = self.events.send(Event::Elected { token });
                }
                Action::Renewed {
                    token,
                    deadline,
                    latency,
                } => {
                    if let Some(term) = &self.term {
                        term.set_deadline(deadline);
                        self.meter.renewed(latency, term.remaining());
                    }
                    tracing::trace!(group = %self.group, token, ?latency, "renewed");
                }
                Action::EndTerm {
                    token,
                    reason,
                    work_deadline,
                } => {
                    tracing::info!(group = %self.group, candidate = %self.holder.id, token, %reason, "term ended");
                    self.meter.ended(&reason);
                    if let Some(term) = self.term.take() {
                        term.cancel();
                        self.reap(term, work_deadline);
                    }
                    self.role.send_replace(Role::Candidate);
                    let _ = self.events.send(Event::Ousted { token, reason });
                }
                Action::LeaderChanged { leader } => {
                    let info = leader.as_ref().and_then(LeaderInfo::from_record);
                    if self.term.is_none() {
                        self.role.send_replace(match &info {
                            Some(leader) => Role::Follower {
                                leader: leader.clone(),
                            },
                            None => Role::Candidate,
                        });
                    }
                    let _ = self.events.send(Event::LeaderChanged { leader: info });
                }
                Action::Stopped => {
                    tracing::debug!(group = %self.group, candidate = %self.holder.id, "stopped");
                    self.role.send_replace(Role::Stopped);
                    stopped = true;
                }
            }
        }
        stopped
    }

    /// Ends the work of a finished term: once every guard is dropped, or at
    /// the work deadline at the latest.
    fn reap(&self, term: Term, work_deadline: MonoTime) {
        let clock = self.clock.clone();
        let drained = self.drained_tx.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.drained() => {
                    let _ = drained.send(term.token());
                }
                _ = clock.sleep_until(work_deadline) => {}
            }
            term.end();
        });
    }

    /// Notes a store reply for logs, metrics and health events.
    fn note_reply(&mut self, kind: OpKind, input: &Input) {
        let error = match input {
            Input::ReadDone { result: Err(e), .. } | Input::CasDone { result: Err(e), .. } => e,
            Input::ReadDone { .. } | Input::CasDone { .. } => {
                if self.store_error.take().is_some() {
                    tracing::info!(group = %self.group, "store answers again");
                    let _ = self.events.send(Event::StoreHealth { message: None });
                }
                return;
            }
            _ => return,
        };
        self.meter.store_error(kind.label());
        let message = error.to_string();
        if self.store_error.as_deref() != Some(message.as_str()) {
            tracing::warn!(group = %self.group, op = kind.label(), error = %message, "store operation failed");
            self.store_error = Some(message.clone());
            let _ = self.events.send(Event::StoreHealth {
                message: Some(message),
            });
        }
    }
}
