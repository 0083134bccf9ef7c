//! A chain of priorities under a dead leader (`--priorities`, half the
//! seeds): the tail's crash check, preceded by the schedule that once
//! stretched it. Every candidate above the lowest priority crashes, so that
//! one of the lowest leads; they start again a third of a term apart, each
//! waits its preemption delay and looks for a renewal; the leader crashes
//! within the first look. Requests written into the dead leader's record
//! must not delay the takeover: a term must start within the crash
//! fail-over bound, as for any crash with nothing else going wrong.
//!
//! The negative control (`--priorities-chain-unmarked`) writes requests
//! into the dead leader's record without the rewrite mark, as a tenure
//! that counted every write as a renewal would have treated its own: the
//! crash check must then report a liveness violation.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::record::{TRANSFER_PRIORITY_KEY, TRANSFER_TO_KEY};
use tenure::store::CasOutcome;
use tenure::{GroupName, LeaseStore, LeaseView};

use crate::faults::between;

use super::*;

/// Mixed into the seed for the chain's own random stream, so that the
/// priorities' stream (and every other) is the same with and without it.
const SALT: u64 = 0x6368_6169_6e5f_7464;

/// Whether seed `seed` runs the chain, and the stream it draws from.
pub(super) fn draw(seed: u64) -> Option<StdRng> {
    let mut rng = StdRng::seed_from_u64(seed ^ SALT);
    rng.gen_bool(0.5).then_some(rng)
}

impl Cluster {
    /// The tail's end: the plain leader crash, or the chain before it.
    pub(super) fn plan_tail_end(&mut self, at: SimTime) {
        if self.chain_rng.is_some() {
            self.stage.push(at, Ev::ChainStart);
        } else {
            self.push_tail_crash(at);
        }
    }

    /// Crashes the tail's leader at `at` and checks its fail-over.
    fn push_tail_crash(&mut self, at: SimTime) {
        let b = self.bounds;
        self.stage.push(at, Ev::TailCrash);
        self.stage
            .push(at.after(b.crash + Duration::from_millis(1)), Ev::CrashCheck);
        self.stage
            .push(at.after(b.crash + self.timing.term), Ev::End);
    }

    /// Crashes every running candidate above the lowest priority and plans
    /// their restarts and the leader's crash.
    pub(super) fn chain_start(&mut self) {
        self.check_kept();
        let now = self.stage.now;
        self.chain_started = Some(now);
        let running = self.stage.running();
        let Some(p) = &self.priorities else {
            return self.push_tail_crash(now);
        };
        let Some(lowest) = running.iter().map(|&n| p.level(n)).min() else {
            return self.push_tail_crash(now);
        };
        let highs: Vec<usize> = running
            .iter()
            .copied()
            .filter(|&n| p.level(n) > lowest)
            .collect();
        if highs.is_empty() {
            return self.push_tail_crash(now);
        }
        let delay = p.delay.unwrap_or(self.timing.term);
        for &n in &highs {
            self.crash(n);
        }
        let term = self.timing.term;
        // One of the lowest leads within a crash fail-over; a term more
        // and the chain begins.
        let first = now.after(self.bounds.crash + term);
        for (i, &n) in highs.iter().enumerate() {
            self.stage
                .push(first.after(term / 3 * i as u32), Ev::Start(n));
        }
        // The first restarted candidate sees the leader within a poll and
        // looks a delay later, for a renewal interval and an operation
        // timeout: the leader dies somewhere in there.
        let t = &self.timing;
        let look = t.renew_interval + t.op_timeout + t.retry_interval + t.retry_jitter;
        let Some(rng) = &mut self.chain_rng else {
            return;
        };
        let kill = first.after(delay + between(rng, Duration::ZERO, look));
        self.stage.push(kill, Ev::ChainKill);
        self.priority.chains += 1;
    }

    /// The chain's leader (of group 0) crashes: the tail's crash check.
    pub(super) fn chain_kill(&mut self) {
        let now = self.stage.now;
        let b = self.bounds;
        let term = self.timing.term;
        self.stage.push(now.after(b.crash + term), Ev::End);
        let Some(led) = self.crash_leader() else {
            return;
        };
        self.stage.push(
            now.after(b.crash + Duration::from_millis(1)),
            Ev::CrashCheck,
        );
        if self.params.tier.priorities_chain_unmarked {
            let mut at = now.after(term / 4);
            while at < now.after(b.crash) {
                for &g in &led {
                    self.stage.push(at, Ev::ChainForge(g));
                }
                at = at.after(term / 4);
            }
        }
    }

    /// The control: a request without the rewrite mark into group `g`'s
    /// record while the dead leader still holds it.
    pub(super) async fn chain_forge(&mut self, g: usize) {
        let Some((crashed, led)) = self.tail_crash.clone() else {
            return;
        };
        if !led.contains(&g) {
            return;
        }
        let Ok(group) = GroupName::new(group_name(g)) else {
            return;
        };
        let Ok(Some(current)) = self.store.read(&group).await else {
            return;
        };
        // Only while no new term began (a new holder's record is left be).
        let began = self.work[g]
            .spans()
            .iter()
            .any(|s| self.stage.sim_time(s.elected) >= crashed);
        if began || current.record.holder.is_none() {
            return;
        }
        let mut unmarked = current.record.clone();
        let to = format!("node-{}", self.stage.slots.len() - 1);
        unmarked.metadata.insert(TRANSFER_TO_KEY, to);
        let asked = self.stage.now.0.to_string();
        unmarked.metadata.insert(TRANSFER_PRIORITY_KEY, asked);
        if let Ok(CasOutcome::Applied(_)) = self
            .store
            .compare_and_swap(&group, Some(current.version), &unmarked)
            .await
        {
            self.stage.event(None, "FORGE", &[g as u64], || {
                format!(
                    "{}: an unmarked request in the dead leader's record",
                    group_name(g)
                )
            });
        }
    }
}
