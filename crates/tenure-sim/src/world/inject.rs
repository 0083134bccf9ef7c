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
            Planned::Partition => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Partition);
                let d = between(&mut self.rng, term / 5, term * 4);
                self.trace
                    .event(t, Some(n), "PARTITION", &[d.as_nanos() as u64], || {
                        format!("cut off from the store for {d:?}")
                    });
                self.checker.disturb(t);
                let node = &mut self.nodes[n];
                node.partitioned_until = node.partitioned_until.max(t.after(d));
                self.push(t.after(d), Ev::PartitionEnd);
            }
            Planned::Resign => {
                let Some(n) = self.target(0.8, |_| true) else {
                    return;
                };
                self.count(FaultKind::Resign);
                self.checker.disturb(t);
                self.trace
                    .event(t, Some(n), "RESIGN", &[], || "asked to resign".into());
                self.deliver_at(t, n, Msg::Resign);
            }
            Planned::Stall => {
                let Some(n) = self.target(0.7, |_| true) else {
                    return;
                };
                self.count(FaultKind::Stall);
                let d = between(&mut self.rng, term / 2, term * 3);
                self.trace
                    .event(t, Some(n), "STALL", &[d.as_nanos() as u64], || {
                        format!("application stops pulsing for {d:?}")
                    });
                self.checker.disturb(t);
                let node = &mut self.nodes[n];
                node.stalled_until = node.stalled_until.max(t.after(d));
                self.push(t.after(d), Ev::StallEnd);
            }
            Planned::Shutdown => {
                let Some(n) = self.target(0.5, |_| true) else {
                    return;
                };
                self.count(FaultKind::Shutdown);
                self.checker.disturb(t);
                self.trace
                    .event(t, Some(n), "SHUTDOWN", &[], || "asked to shut down".into());
                self.deliver_at(t, n, Msg::Shutdown);
            }
        }
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
