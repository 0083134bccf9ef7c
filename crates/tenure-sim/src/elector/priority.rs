//! Candidate priorities in the elector tier (`--priorities`): each
//! candidate's priority and the seed's preemption delay, drawn from the
//! seed; the bound within which the highest-priority live candidate must
//! lead once every fault has healed; and the stale transfer requests the
//! tail writes into leaders' records, which they must decline.
//!
//! Priorities come from a random stream of their own (the seed, salted),
//! so a seed's fault schedule, clocks and work are the same with and
//! without `--priorities`: the two runs differ only in who leads.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::record::{TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY};
use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView, Timing};

use crate::checker::{BoundTerms, LivenessBounds};
use crate::faults::between;
use crate::report::Violation;

use super::*;

/// Mixed into the seed for the priorities' own random stream.
const SALT: u64 = 0x7072_696f_7269_7479;

/// What the priority checks of one seed need.
pub(crate) struct Priorities {
    /// Per candidate slot, the priority its electors are built with; `None`
    /// sets none (which the library treats as 0), and some seeds draw an
    /// explicit 0, which must behave the same.
    pub(crate) of: Vec<Option<u32>>,
    /// The preemption delay every candidate is built with; `None` keeps
    /// the library's default (one term).
    pub(crate) delay: Option<Duration>,
    /// The longest one preemption may take in the tail ([`hop`]).
    pub(crate) hop: Duration,
    /// The stream the tail's stale requests draw from.
    pub(crate) rng: StdRng,
}

impl Priorities {
    /// Draws the priorities of `nodes` candidates and the delay for
    /// `seed`; the hop bound follows from `timing` and the ordinary
    /// one-way latency bound `latency`.
    pub(crate) fn draw(seed: u64, nodes: usize, timing: &Timing, latency: Duration) -> Priorities {
        let mut rng = StdRng::seed_from_u64(seed ^ SALT);
        // Few levels, so that ties (at the top too) are common; a quarter
        // of the candidates set none.
        let of = (0..nodes)
            .map(|_| match rng.gen_range(0..8) {
                0 | 1 => None,
                2 => Some(0),
                _ => Some(rng.gen_range(1..=3)),
            })
            .collect();
        let term = timing.term;
        let delay = match rng.gen_range(0..4) {
            // Zero asks at once: requests are still a term apart.
            0 => Some(Duration::ZERO),
            1 => Some(between(&mut rng, term / 4, term * 2)),
            _ => None,
        };
        let hop = hop(timing, latency, delay.unwrap_or(term));
        Priorities {
            of,
            delay,
            hop,
            rng,
        }
    }

    /// Candidate `n`'s priority as the library reads it (none is 0).
    pub(crate) fn level(&self, n: usize) -> u32 {
        self.of[n].unwrap_or(0)
    }

    /// How many distinct priorities among `nodes` are above `floor`: the
    /// most preemptions a group can need from a leader of priority `floor`,
    /// since each one moves leadership to a strictly higher priority.
    pub(crate) fn levels_above(&self, nodes: impl IntoIterator<Item = usize>, floor: u32) -> usize {
        let mut above: Vec<u32> = nodes
            .into_iter()
            .map(|n| self.level(n))
            .filter(|&p| p > floor)
            .collect();
        above.sort_unstable();
        above.dedup();
        above.len()
    }
}

/// The longest one preemption takes in the fault-free tail: from an
/// instant at which a leader holds a valid term that it keeps until asked
/// (the heal bound has passed, or the previous preemption has completed)
/// to the instant the highest-priority candidate that asked holds a valid
/// term. Notation as in [`LivenessBounds`], with `D` the preemption delay
/// and `I` the renew interval:
///
/// `hop = observe + wait + ask + notice + drain + hand`
///
/// * `observe = max(S, O/(1 − ρ)) + (R + J)/(1 − ρ) + 2·rtt`: the asking
///   candidate learns of the term (its role becomes a follower of that
///   leader, which starts its wait): an operation lost in a fault may
///   first have to time out, or a slow one apply, then a poll and its
///   round trip (a notification is sooner);
/// * `wait = max(D, T)/(1 − ρ)`: the delay on the candidate's clock, or,
///   if a request under this term was already tried during the faults and
///   did not get through, the wait before the next, which is at least a
///   term;
/// * `ask = (I + O)/(1 − ρ) + 8·rtt`: the look for a renewal (a read, a
///   renewal interval and an operation timeout, a read), then the
///   request's compare-and-swap, tried up to three times (a read and a
///   write each) when a renewal or another candidate's request wins the
///   race;
/// * `notice = I/(1 − ρ) + 3·rtt`: the leader's next renewal conflicts
///   with the request (an operation of its own may be in flight first) and
///   its verifying read sees it, or a notification brings the read sooner;
/// * `drain = T/(1 − ρ)`: the work must be gone by the term's deadline, at
///   most a validity (under a term) after the last renewal's send;
/// * `hand = (R + J)/(1 − ρ) + 3·rtt`: the release reserved for the asker,
///   which sees it on its next poll (or a notification) and takes it.
///
/// A group whose leader has priority `p` once the heal bound has passed
/// needs at most one hop per distinct priority above `p` among the live
/// candidates: the bound checked is `heal + hops·hop` after every fault
/// healed.
pub(crate) fn hop(timing: &Timing, latency: Duration, delay: Duration) -> Duration {
    let BoundTerms { rtt, poll, .. } = BoundTerms::new(timing, latency);
    let stretch = |d| BoundTerms::stretch(timing, d);
    let slow = LivenessBounds::slow_op(timing);
    let observe = slow.max(stretch(timing.op_timeout)) + poll + rtt * 2;
    let wait = stretch(delay.max(timing.term));
    // The look for a renewal (a renewal interval and an operation timeout
    // between its reads), then the compare-and-swap, tried up to three
    // times when a renewal or another candidate's request wins the race.
    let ask = stretch(timing.renew_interval + timing.op_timeout) + rtt * 8;
    let notice = stretch(timing.renew_interval) + rtt * 3;
    let drain = stretch(timing.term);
    let hand = poll + rtt * 3;
    // As in `LivenessBounds`: a millisecond for rounding, and here one
    // more for the tokio timer's resolution, which every sleep can add.
    observe + wait + ask + notice + drain + hand + Duration::from_millis(2)
}

/// What the priority checks found in one run, for its report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriorityOutcome {
    /// Per group whose leader at its priority bound was of the highest
    /// priority: the time from every fault healing to the start of that
    /// leader's term (zero if it began before), the group's bound, and how
    /// many preemptions the bound allowed for.
    pub climbs: Vec<(Duration, Duration, usize)>,
    /// Per group, how many preemptions its bound allowed for (a hop per
    /// distinct priority above the heal leader's among the live
    /// candidates).
    pub hops: Vec<usize>,
    /// Stale transfer requests written into leaders' records in the tail
    /// (declined, unless a control forged them above the leader's
    /// priority).
    pub forged: u64,
    /// Chains run: candidates above the lowest priority restarted one by
    /// one under a leader of the lowest, which crashed during their looks.
    pub chains: u64,
}

impl Cluster {
    /// At the heal check: plans each group's priority check, a hop per
    /// distinct priority above its leader's among the live candidates
    /// after now, and a stale request during the climb.
    pub(super) fn plan_priority_checks(&mut self) {
        let Some(p) = &mut self.priorities else {
            return;
        };
        let live = self.stage.running();
        let now = self.stage.now;
        let mut plan = Vec::new();
        for g in 0..self.work.len() {
            // Without a leader (a liveness violation already), the climb
            // may start from the lowest priority.
            let lowest = live.iter().map(|&n| p.level(n)).min().unwrap_or(0);
            let floor = self.heal_leaders[g].map_or(lowest, |(n, _)| p.level(n));
            let hops = p.levels_above(live.iter().copied(), floor);
            let due = now.after(p.hop * hops as u32);
            let forge =
                (due > now).then(|| now.after(between(&mut p.rng, Duration::ZERO, due.since(now))));
            plan.push((g, due, forge));
            self.priority.hops.push(hops);
        }
        for (g, due, forge) in plan {
            self.priority_due[g] = Some(due);
            self.stage.push(due, Ev::PriorityCheck(g));
            if let Some(at) = forge {
                self.stage.push(at, Ev::Forge(g));
            }
        }
    }

    /// Crashes every running candidate of the highest priority and plans
    /// its restart for the end of the fault phase, so that each group's
    /// tail begins under a leader of lower priority and must climb.
    pub(super) fn top_crash(&mut self) {
        let Some(p) = &mut self.priorities else {
            return;
        };
        // In half the seeds only: in the others the tail starts with
        // whoever the faults left, preemption tasks and all.
        if p.rng.gen_bool(0.5) {
            return;
        }
        let running = self.stage.running();
        let Some(top) = running.iter().map(|&n| p.level(n)).max() else {
            return;
        };
        // Only if someone of lower priority stays up to lead meanwhile.
        let tops: Vec<usize> = running
            .iter()
            .copied()
            .filter(|&n| p.level(n) == top)
            .collect();
        if tops.len() == running.len() {
            return;
        }
        for n in tops {
            self.faults[Planned::Crash.kind()] += 1;
            self.crash(n);
            self.stage.push(self.stage.fault_end, Ev::Start(n));
        }
    }

    /// Group `g`'s priority bound has passed: its leader must be a live
    /// candidate of the highest priority among the live ones. Then plans
    /// two stale requests, which it must decline.
    pub(super) fn priority_check(&mut self, g: usize) {
        let leader = self.leader(g);
        self.priority_leaders[g] = leader;
        let Some(p) = &mut self.priorities else {
            return;
        };
        let live = self.stage.running();
        let now = self.stage.now;
        let hop = p.hop;
        let early = between(&mut p.rng, Duration::ZERO, hop / 4);
        let late = between(&mut p.rng, hop / 4, hop / 2);
        self.stage.push(now.after(early), Ev::Forge(g));
        self.stage.push(now.after(late), Ev::Forge(g));
        let Some(top) = live.iter().map(|&n| p.level(n)).max() else {
            return;
        };
        if let Some((n, token)) = leader.filter(|&(n, _)| live.contains(&n) && p.level(n) == top) {
            // The climb: from every fault healing to the start of this
            // leader's term (zero if it began before).
            let fault_end = self.stage.fault_end;
            let began = self.published[g]
                .spans()
                .iter()
                .find(|s| s.token == token && self.stage.slot_index(&s.candidate) == Some(n))
                .map_or(fault_end, |s| self.stage.sim_time(s.elected));
            let climb = began.max(fault_end).since(fault_end);
            let hops = self.priority.hops.get(g).copied().unwrap_or(0);
            self.priority
                .climbs
                .push((climb, now.since(fault_end), hops));
            return;
        }
        let highest: Vec<usize> = live.into_iter().filter(|&n| p.level(n) == top).collect();
        let who = match leader {
            Some((n, token)) => format!("node {n} (priority {}, token {token})", p.level(n)),
            None => "no one".into(),
        };
        let bound = now.since(self.stage.fault_end);
        let detail = format!(
            "group {}: {bound:.3?} after every fault healed (the priority bound, with membership stable) the leader is {who}, not one of the live candidates of the highest priority, {top} (nodes {highest:?})",
            group_name(g)
        );
        let (nodes, tokens) = match leader {
            Some((n, token)) => (vec![n], vec![token]),
            None => (vec![], vec![]),
        };
        self.stage
            .violation(ViolationKind::Priority, nodes, tokens, detail);
    }

    /// Writes a stale transfer request into group `g`'s record, as a
    /// candidate that read an old record or a misconfigured one would:
    /// naming a live candidate of no higher priority than the holder's,
    /// with a priority not above the holder's (above it, with the forgery
    /// control). Like a candidate, it never replaces a request already
    /// there, so a real one is not lost.
    pub(super) async fn forge(&mut self, g: usize) {
        // Electors built without priorities are all 0: any number would
        // be above, and honoured; that control is about the climb alone.
        if self.params.tier.priorities_unset {
            return;
        }
        let Ok(group) = GroupName::new(group_name(g)) else {
            return;
        };
        let Ok(Some(current)) = self.store.read(&group).await else {
            return;
        };
        let record = &current.record;
        if record.transfer_to().is_some() {
            return;
        }
        let Some(holder) = record.holder_id().and_then(|id| self.stage.slot_index(id)) else {
            return;
        };
        let above = self.params.tier.priorities_forge_above;
        let live = self.stage.running();
        let Some(p) = &mut self.priorities else {
            return;
        };
        let mine = p.level(holder);
        let names: Vec<usize> = live
            .into_iter()
            .filter(|&n| n != holder && p.level(n) <= mine)
            .collect();
        if names.is_empty() {
            return;
        }
        let to = names[p.rng.gen_range(0..names.len())];
        let asked = if above {
            mine + 1
        } else {
            p.rng.gen_range(0..=mine)
        };
        let mut forged = record.clone();
        let name = self.stage.slots[to].name.clone();
        forged.metadata.insert(TRANSFER_TO_KEY, name.clone());
        forged
            .metadata
            .insert(TRANSFER_PRIORITY_KEY, asked.to_string());
        if forged.metadata.validate().is_err() {
            return;
        }
        let written = self
            .store
            .compare_and_swap(&group, Some(current.version), &forged)
            .await;
        if let Ok(CasOutcome::Applied(_)) = written {
            self.priority.forged += 1;
            let token = record.token;
            self.stage
                .event(Some(holder), "FORGE", &[g as u64, token, asked.into()], || {
                    format!(
                        "{}: a stale request in token {token}'s record: hand over to {name}, priority {asked}",
                        group_name(g)
                    )
                });
        }
    }

    /// What the priority checks find once the run is over: leadership
    /// moves in the stable tail (after the heal bound, before the tail's
    /// crash) that do not go to a strictly higher priority, or that come
    /// after a group's priority bound.
    pub(super) fn oscillations(&self) -> Vec<Violation> {
        let mut violations = Vec::new();
        let Some(p) = &self.priorities else {
            return violations;
        };
        let fault_end = self.stage.fault_end;
        let healed = fault_end.after(self.bounds.heal);
        let crash = self
            .chain_started
            .into_iter()
            .chain(self.tail_crash.as_ref().map(|(at, _)| *at))
            .min()
            .unwrap_or(self.stage.now);
        for g in 0..self.work.len() {
            let Some(due) = self.priority_due[g] else {
                continue;
            };
            let spans = self.published[g].spans();
            let mut prev: Option<(usize, u64)> = self.heal_leaders[g];
            for s in &spans {
                let at = self.stage.sim_time(s.elected);
                if at <= healed || at >= crash {
                    continue;
                }
                let Some(n) = self.stage.slot_index(&s.candidate) else {
                    continue;
                };
                if prev == Some((n, s.token)) {
                    continue;
                }
                let moved = match prev {
                    Some((m, token)) => format!(
                        "from node {m} (priority {}, token {token}) to node {n} (priority {}, token {})",
                        p.level(m),
                        p.level(n),
                        s.token
                    ),
                    None => format!("to node {n} (priority {}, token {})", p.level(n), s.token),
                };
                let why = if at > due {
                    Some(format!(
                        "after the group's priority bound had passed at {due}"
                    ))
                } else {
                    prev.filter(|&(m, _)| p.level(n) <= p.level(m))
                        .map(|_| "not to a higher priority".to_owned())
                };
                if let Some(why) = why {
                    let mut nodes: Vec<usize> = prev.iter().map(|&(m, _)| m).collect();
                    nodes.push(n);
                    let mut tokens: Vec<u64> = prev.iter().map(|&(_, t)| t).collect();
                    tokens.push(s.token);
                    violations.push(Violation::new(
                        self.stage.seed,
                        ViolationKind::Oscillation,
                        at,
                        nodes,
                        tokens,
                        format!(
                            "group {}: at {at}, with every fault healed and membership stable, leadership moved {moved}, {why}",
                            group_name(g)
                        ),
                    ));
                }
                prev = Some((n, s.token));
            }
        }
        violations
    }
}
