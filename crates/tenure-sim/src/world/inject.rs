//! Injecting faults, and the deliberate crash of the fault-free tail.

use super::*;

impl World {
    /// A random node that is up and satisfies `ok`, preferring the leader
    /// with probability `p_leader`.
    pub(super) fn target(&mut self, p_leader: f64, ok: impl Fn(&Node) -> bool) -> Option<usize> {
        let leader = self
            .checker
            .leader_at(self.now)
            .map(|(n, _)| n)
            .filter(|&n| self.nodes[n].up() && ok(&self.nodes[n]));
        if let Some(l) = leader {
            if self.rng.gen_bool(p_leader) {
                return Some(l);
            }
        }
        let eligible: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up() && ok(&self.nodes[i]))
            .collect();
        if eligible.is_empty() {
            return None;
        }
        Some(eligible[self.rng.gen_range(0..eligible.len())])
    }

    pub(super) fn inject(&mut self, kind: Planned) {
        let t = self.now;
        let term = self.timing.term;
        match kind {
            Planned::Crash => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Crash);
                self.crash(n, false);
                let down = between(&mut self.rng, term / 5, term * 3);
                let at = t.after(down).min(self.fault_end.max(t));
                self.push(at, Ev::Restart { node: n });
            }
            Planned::Pause => {
                let Some(n) = self.target(0.5, |node| !node.paused) else {
                    return;
                };
                let long = self.rng.gen_bool(0.7);
                let d = if long {
                    self.count(FaultKind::LongPause);
                    between(&mut self.rng, term, term * 3)
                } else {
                    self.count(FaultKind::ShortPause);
                    between(&mut self.rng, Duration::from_millis(1), term)
                };
                self.trace
                    .event(t, Some(n), "PAUSE", &[d.as_nanos() as u64], || {
                        format!("process paused for {d:?}")
                    });
                self.checker.disturb(t);
                self.nodes[n].paused = true;
                let life = self.nodes[n].life;
                self.push(t.after(d), Ev::PauseEnd { node: n, life });
            }
            Planned::Partition => self.open_window(
                (FaultKind::Partition, 0.5),
                (term / 5, term * 4),
                ("PARTITION", |d| format!("cut off from the store for {d:?}")),
                Ev::PartitionEnd,
                |node| &mut node.partitioned_until,
            ),
            Planned::Resign => self.ask(
                (FaultKind::Resign, 0.8),
                ("RESIGN", "asked to resign"),
                Msg::Resign,
            ),
            Planned::Stall => self.open_window(
                (FaultKind::Stall, 0.7),
                (term / 2, term * 3),
                ("STALL", |d| format!("application stops pulsing for {d:?}")),
                Ev::StallEnd,
                |node| &mut node.stalled_until,
            ),
            Planned::Shutdown => self.ask(
                (FaultKind::Shutdown, 0.5),
                ("SHUTDOWN", "asked to shut down"),
                Msg::Shutdown,
            ),
        }
    }

    /// Opens a window of trouble (a partition, a stall) of `kind` on a
    /// node that is up (the leader with probability `p_leader`), if any:
    /// counts it, draws its length between `lengths`, traces it (its tag,
    /// and its text for that length), tells the checker, extends the node's
    /// window that `until` picks, and schedules `end` for when it closes.
    fn open_window(
        &mut self,
        (kind, p_leader): (FaultKind, f64),
        lengths: (Duration, Duration),
        (tag, text): (&'static str, impl FnOnce(Duration) -> String),
        end: Ev,
        until: impl FnOnce(&mut Node) -> &mut SimTime,
    ) {
        let Some(n) = self.target(p_leader, |_| true) else {
            return;
        };
        self.count(kind);
        let d = between(&mut self.rng, lengths.0, lengths.1);
        let t = self.now;
        self.trace
            .event(t, Some(n), tag, &[d.as_nanos() as u64], || text(d));
        self.checker.disturb(t);
        let until = until(&mut self.nodes[n]);
        *until = (*until).max(t.after(d));
        self.push(t.after(d), end);
    }

    /// Has the application of a node that is up (the leader with
    /// probability `p_leader`), if any, ask its machine to `msg` (resign,
    /// shut down): counts it as a fault of `kind`, tells the checker, and
    /// traces it (its tag and text).
    fn ask(
        &mut self,
        (kind, p_leader): (FaultKind, f64),
        (tag, text): (&'static str, &'static str),
        msg: Msg,
    ) {
        let Some(n) = self.target(p_leader, |_| true) else {
            return;
        };
        self.count(kind);
        let t = self.now;
        self.checker.disturb(t);
        self.trace.event(t, Some(n), tag, &[], || text.into());
        self.deliver_at(t, n, msg);
    }

    pub(super) fn storm(&mut self, storm: Storm) {
        let t = self.now;
        let until = self.fault_end.max(t);
        self.trace
            .event(t, None, "STORM", &[], || format!("{storm:?} until {until}"));
        self.checker.disturb(t);
        for n in 0..self.nodes.len() {
            match storm {
                Storm::PartitionAll => {
                    self.count(FaultKind::Partition);
                    let node = &mut self.nodes[n];
                    node.partitioned_until = node.partitioned_until.max(until);
                }
                Storm::PauseAll => {
                    let node = &self.nodes[n];
                    if node.up() && !node.paused {
                        self.count(FaultKind::LongPause);
                        self.nodes[n].paused = true;
                        let life = self.nodes[n].life;
                        self.push(until, Ev::PauseEnd { node: n, life });
                    }
                }
            }
        }
        if storm == Storm::PartitionAll {
            self.push(until, Ev::PartitionEnd);
        }
    }

    /// Crashes node `n`; a crash of the leader starts a failover the checker
    /// times.
    pub(super) fn crash(&mut self, n: usize, tail: bool) {
        let t = self.now;
        self.trace
            .event(t, Some(n), "CRASH", &[], || "process crashes".into());
        let leader_token = self.checker.crashed(t, n);
        self.kill(n);
        match leader_token {
            Some(token) => {
                // The bound needs one candidate that can act: up, running,
                // and able to reach the store.
                let healthy = (0..self.nodes.len()).any(|i| {
                    let o = &self.nodes[i];
                    i != n && o.up() && !o.paused && o.partitioned_until <= t
                });
                let idx = self.checker.leader_crash(t, n, token, healthy, tail);
                // Just past the bound, so an election exactly at the bound
                // counts as in time.
                let at = t.after(self.bounds.crash + Duration::from_nanos(1));
                self.push(at, Ev::CrashDeadline(idx));
            }
            None => self.checker.disturb(t),
        }
    }

    pub(super) fn pause_end(&mut self, n: usize, life: u32) {
        let t = self.now;
        let node = &mut self.nodes[n];
        if node.life != life || !node.paused {
            return;
        }
        node.paused = false;
        let held = std::mem::take(&mut node.deferred);
        self.trace
            .event(t, Some(n), "RESUME", &[held.len() as u64], || {
                format!("process resumes with {} queued inputs", held.len())
            });
        self.checker.disturb(t);
        for msg in held {
            // An input can stop the machine; the rest are then moot.
            if !self.nodes[n].up() {
                break;
            }
            self.handle(n, msg);
        }
        // Timers are checked on resume, as a runtime would.
        self.step(n, Input::Tick);
    }

    pub(super) fn tail_crash(&mut self) {
        let t = self.now;
        let leader = self.checker.leader_at(t);
        if let Some((node, token)) = self.heal_leader {
            if leader != Some((node, token)) {
                self.checker.unstable(t, node, token, leader);
            }
        }
        if let Some((n, _)) = leader {
            if self.nodes[n].up() {
                self.crash(n, true);
                let at = t.after(self.timing.term / 2);
                self.push(at, Ev::Restart { node: n });
            }
        }
    }
}
