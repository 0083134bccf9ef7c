//! The lease backend behind an [`Elector`](crate::Elector): it feeds the
//! state machine time, store replies and commands, and carries out its
//! actions through the [`Publisher`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::clock::{Clock, MonoTime, Now};
use crate::config::Timing;
use crate::coordinator::Command;
use crate::elector::PulseState;
use crate::error::StoreError;
use crate::machine::{Action, Input, Machine, Phase};
use crate::publish::Publisher;
use crate::record::{GroupName, Metadata};
use crate::role::LeaderInfo;
use crate::store::{ChangeFeed, LeaseStore};

pub(crate) struct Parts {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) timing: Timing,
    pub(crate) metadata: Metadata,
    pub(crate) commands: mpsc::UnboundedReceiver<Command>,
    pub(crate) pulse: Arc<PulseState>,
    pub(crate) publisher: Publisher,
    pub(crate) drained: mpsc::UnboundedReceiver<u64>,
}

type OpFuture = Pin<Box<dyn Future<Output = Input> + Send>>;

type SubscribeFuture = Pin<Box<dyn Future<Output = Option<ChangeFeed>> + Send>>;

struct Driver {
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    timing: Timing,
    clock: Arc<dyn Clock>,
    pulse: Arc<PulseState>,
    publisher: Publisher,
    fed_pulse: u64,
}

pub(crate) async fn run(parts: Parts) {
    let Parts {
        store,
        timing,
        metadata,
        mut commands,
        pulse,
        publisher,
        mut drained,
    } = parts;
    let clock = publisher.clock.clone();
    let holder = publisher.holder.clone();
    let mut machine = Machine::new(
        timing.clone(),
        holder,
        metadata,
        rand::random(),
        clock.now(),
    );
    let mut d = Driver {
        store,
        group: publisher.group.clone(),
        timing,
        clock,
        pulse,
        publisher,
        fed_pulse: 0,
    };
    let mut feed: Option<ChangeFeed> = None;
    // Subscribing runs beside everything else, so a store whose feed is
    // slow to answer never delays the machine's inputs.
    let mut subscribing: Option<SubscribeFuture> = Some(d.subscribe());
    // Without a feed, try to subscribe again at most once per poll period.
    let mut next_subscribe = d.clock.now().mono + d.timing.retry_interval;
    let mut commands_open = true;
    let mut input = Input::Tick;
    // The store operation in flight. Kept out of `Driver` so that the
    // driver can be borrowed across awaits without the future being `Sync`.
    let mut op: Option<(&'static str, OpFuture)> = None;
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
            Some(token) = drained.recv() => Input::Drained { token },
            (label, reply) = poll_op(&mut op) => {
                d.note_reply(label, &reply);
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
            subscribed = poll_subscribe(&mut subscribing) => {
                feed = subscribed;
                // Re-read: a change may have slipped in before the feed.
                if feed.is_some() { Input::Changed } else { Input::Tick }
            }
            _ = d.pulse.wake.notified() => Input::Tick,
            _ = sleep_until(&d.clock, wake) => Input::Tick,
        };
        let now = d.clock.now();
        if feed.is_none()
            && subscribing.is_none()
            && now.mono >= next_subscribe
            && machine.phase() == Phase::Candidate
        {
            next_subscribe = now.mono + d.timing.retry_interval;
            subscribing = Some(d.subscribe());
        }
    }
}

async fn poll_subscribe(subscribing: &mut Option<SubscribeFuture>) -> Option<ChangeFeed> {
    match subscribing {
        Some(fut) => {
            let feed = fut.await;
            *subscribing = None;
            feed
        }
        None => std::future::pending().await,
    }
}

async fn poll_op(op: &mut Option<(&'static str, OpFuture)>) -> (&'static str, Input) {
    match op {
        Some((label, fut)) => {
            let label = *label;
            let input = fut.await;
            *op = None;
            (label, input)
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
    /// Subscribes to change hints, bounded by the operation timeout so a
    /// store that is slow to subscribe cannot stall the election.
    fn subscribe(&self) -> SubscribeFuture {
        let (store, group, clock) = (self.store.clone(), self.group.clone(), self.clock.clone());
        let timeout = self.timing.op_timeout;
        Box::pin(async move {
            let deadline = clock.now().mono + timeout;
            let result = tokio::select! {
                r = store.changes(&group) => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(timeout)),
            };
            match result {
                Ok(feed) => feed,
                Err(e) => {
                    tracing::debug!(group = %group, error = %e, "no change feed; polling");
                    None
                }
            }
        })
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

    /// Runs a store operation, bounded by the machine's deadline, and turns
    /// its result into the machine's input.
    fn start_op<F, T>(
        &self,
        deadline: MonoTime,
        now: Now,
        op: F,
        done: impl FnOnce(Result<T, StoreError>) -> Input + Send + 'static,
    ) -> OpFuture
    where
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
        T: Send + 'static,
    {
        let clock = self.clock.clone();
        let wait = deadline.saturating_since(now.mono);
        Box::pin(async move {
            let result = tokio::select! {
                r = op => r,
                _ = clock.sleep_until(deadline) => Err(StoreError::Timeout(wait)),
            };
            done(result)
        })
    }

    /// Carries out actions; returns true once the machine has stopped.
    fn carry_out(
        &mut self,
        actions: Vec<Action>,
        now: Now,
        op_slot: &mut Option<(&'static str, OpFuture)>,
    ) -> bool {
        let mut stopped = false;
        for action in actions {
            match action {
                Action::Read {
                    op,
                    purpose,
                    deadline,
                } => {
                    let (store, group) = (self.store.clone(), self.group.clone());
                    let read = async move { store.read(&group).await };
                    let fut = self.start_op(deadline, now, read, move |result| Input::ReadDone {
                        op,
                        result,
                    });
                    *op_slot = Some((purpose.label(), fut));
                }
                Action::Cas {
                    op,
                    purpose,
                    expected,
                    record,
                    deadline,
                } => {
                    let (store, group) = (self.store.clone(), self.group.clone());
                    let cas =
                        async move { store.compare_and_swap(&group, expected, &record).await };
                    let fut = self.start_op(deadline, now, cas, move |result| Input::CasDone {
                        op,
                        result,
                    });
                    *op_slot = Some((purpose.label(), fut));
                }
                Action::Elected { token, deadline } => {
                    self.publisher.elected(token, deadline);
                }
                Action::Renewed {
                    deadline, latency, ..
                } => self.publisher.renewed(deadline, latency),
                Action::EndTerm {
                    reason,
                    work_deadline,
                    ..
                } => self.publisher.end_term(reason, work_deadline),
                Action::LeaderChanged { leader } => {
                    let info = leader.as_ref().and_then(LeaderInfo::from_record);
                    self.publisher.leader_changed(info);
                }
                Action::Failed { fault } => self.publisher.failed(fault),
                Action::Stopped => {
                    self.publisher.stopped();
                    stopped = true;
                }
            }
        }
        stopped
    }

    /// Notes a store reply for logs, metrics and health events.
    fn note_reply(&mut self, label: &'static str, input: &Input) {
        let error = match input {
            Input::ReadDone { result: Err(e), .. } | Input::CasDone { result: Err(e), .. } => {
                Some((e.kind().to_owned(), e.to_string()))
            }
            Input::ReadDone { .. } | Input::CasDone { .. } => None,
            _ => return,
        };
        self.publisher.store_health(label, error);
    }
}
