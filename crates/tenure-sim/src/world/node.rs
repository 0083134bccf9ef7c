//! A node's process: inputs in, machine steps, actions out, timers.

use super::*;

impl Node {
    /// Notes what a read delivered to the machine at `t` showed.
    fn saw(&mut self, t: SimTime, result: Option<&Versioned>) {
        let Some(v) = result else {
            self.seen = None;
            return;
        };
        if self.seen.as_ref().is_some_and(|s| s.version == v.version) {
            return;
        }
        let mine = v
            .record
            .holder
            .as_ref()
            .is_some_and(|h| h.id == self.name && h.incarnation == self.incarnation);
        let held_by_other = (v.record.holder.is_some() && !mine).then_some(v.record.term);
        self.seen = Some(Seen {
            version: v.version,
            held_by_other,
            first: self.clock.mono(t),
        });
    }
}

impl World {
    /// Node `n` tries to take over the version `expected`: counts it as an
    /// early takeover if the record was another's and the node has not yet
    /// watched it for the takeover wait, so only the wall-clock rule can
    /// have allowed it. The node's first sight of the version is never
    /// later than the machine's own anchor, so this undercounts at worst.
    pub(super) fn note_takeover(&mut self, n: usize, expected: Option<Version>) {
        let t = self.now;
        let node = &self.nodes[n];
        let Some(seen) = node.seen.as_ref().filter(|s| Some(s.version) == expected) else {
            return;
        };
        let Some(term) = seen.held_by_other else {
            return;
        };
        let ready = seen.first + self.timing.takeover_wait(term);
        let now = node.clock.mono(t);
        if now >= ready {
            return;
        }
        let early = ready.saturating_since(now);
        self.early_takeovers += 1;
        self.earliest_takeover = Some(self.earliest_takeover.map_or(early, |e| e.max(early)));
        self.trace
            .event(t, Some(n), "EARLY", &[early.as_nanos() as u64], || {
                format!("takeover by the wall-clock rule, {early:?} before the monotonic wait")
            });
    }

    pub(super) fn restart(&mut self, n: usize) {
        if self.nodes[n].up() {
            return;
        }
        let t = self.now;
        let incarnation: u64 = self.rng.gen();
        let machine_seed: u64 = self.rng.gen();
        let node = &mut self.nodes[n];
        let now = node.clock.now(t);
        let me = Holder {
            id: node.name.clone(),
            incarnation,
        };
        let md = Metadata::address(format!("10.0.0.{n}:8080"));
        let mut machine = Machine::new(self.timing.clone(), me, md, machine_seed, now);
        if self.params.tier.anchor_at_receive {
            machine.anchor_deadlines_at_receive();
        }
        node.machine = Some(machine);
        node.paused = false;
        node.deferred.clear();
        node.ops.clear();
        node.incarnation = incarnation;
        node.seen = None;
        self.trace.event(t, Some(n), "start", &[incarnation], || {
            format!("process starts, incarnation {incarnation:#x}")
        });
        self.deliver_at(t, n, Msg::Start);
        if self.timing.liveness_timeout.is_some() {
            let life = self.nodes[n].life;
            self.push(t, Ev::Pulse { node: n, life });
        }
    }

    /// The application of node `n` pulses, unless it is stalled or its
    /// process paused (a paused application cannot pulse; nothing is queued).
    pub(super) fn pulse(&mut self, n: usize, life: u32) {
        let t = self.now;
        let Some(timeout) = self.timing.liveness_timeout else {
            return;
        };
        let node = &self.nodes[n];
        if node.life != life || !node.up() {
            return;
        }
        if !node.paused && node.stalled_until <= t {
            let at = node.clock.mono(t);
            self.step(n, Input::Pulse { at });
        }
        self.push(t.after(timeout / 4), Ev::Pulse { node: n, life });
    }

    /// Loses the node's process: machine, queued inputs, work.
    pub(super) fn kill(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        node.machine = None;
        node.life += 1;
        node.paused = false;
        node.deferred.clear();
        node.ops.clear();
        node.wake_gen += 1;
    }

    pub(super) fn deliver(&mut self, n: usize, life: u32, msg: Msg) {
        let t = self.now;
        let node = &mut self.nodes[n];
        if node.life != life || !node.up() {
            return;
        }
        if msg.travels_from_store() && node.partitioned_until > t {
            self.trace.event(t, Some(n), "lost", &[], || {
                format!("{msg:?} lost: node is partitioned")
            });
            return;
        }
        if node.paused {
            node.deferred.push(msg);
            return;
        }
        self.handle(n, msg);
    }

    pub(super) fn handle(&mut self, n: usize, msg: Msg) {
        let t = self.now;
        let op_timeout = self.timing.op_timeout;
        let node = &mut self.nodes[n];
        let input = match msg {
            Msg::Start => Input::Tick,
            Msg::Tick(gen) => {
                if gen != node.wake_gen {
                    return;
                }
                Input::Tick
            }
            Msg::ReadReply { op, result } => {
                if node.ops.remove(&op.0).is_none() {
                    self.trace.event(t, Some(n), "late", &[op.0], || {
                        format!("reply to read {} after its timeout: dropped", op.0)
                    });
                    return;
                }
                node.saw(t, result.as_ref());
                Input::ReadDone {
                    op,
                    result: Ok(result),
                }
            }
            Msg::CasReply { op, outcome } => {
                if node.ops.remove(&op.0).is_none() {
                    self.trace.event(t, Some(n), "late", &[op.0], || {
                        format!(
                            "reply to cas {} ({outcome:?}) after its timeout: dropped",
                            op.0
                        )
                    });
                    return;
                }
                Input::CasDone {
                    op,
                    result: Ok(outcome),
                }
            }
            Msg::Failed(op) | Msg::Timeout(op) => {
                let Some(kind) = node.ops.remove(&op.0) else {
                    // Answered before its deadline (or the failure reply came
                    // after the timeout): nothing to report.
                    return;
                };
                let err = || match msg {
                    Msg::Timeout(_) => StoreError::Timeout(op_timeout),
                    _ => StoreError::Unavailable {
                        message: "injected store failure".into(),
                        source: None,
                    },
                };
                match kind {
                    OpKind::Read => Input::ReadDone {
                        op,
                        result: Err(err()),
                    },
                    OpKind::Cas => Input::CasDone {
                        op,
                        result: Err(err()),
                    },
                }
            }
            Msg::Drained(token) => {
                self.checker.drained(t, n, token);
                Input::Drained { token }
            }
            Msg::Resign => Input::Resign,
            Msg::Shutdown => Input::Shutdown,
            Msg::Changed => Input::Changed,
        };
        self.step(n, input);
    }

    pub(super) fn step(&mut self, n: usize, input: Input) {
        let t = self.now;
        let is_tick = matches!(input, Input::Tick);
        let (nums, text) = self.trace_input(&input);
        let node = &mut self.nodes[n];
        let now = node.clock.now(t);
        let Some(machine) = node.machine.as_mut() else {
            return;
        };
        let actions = machine.step(now, input);
        self.trace.event(t, Some(n), "input", &nums, || text);
        let quiet_tick = is_tick && actions.is_empty();
        for a in actions {
            self.act(n, a);
        }
        self.schedule_wake(n, quiet_tick);
    }

    pub(super) fn trace_input(&self, input: &Input) -> (Vec<u64>, String) {
        match input {
            Input::ReadDone { op, result } => {
                let v = match result {
                    Ok(Some(v)) => v.version.0,
                    Ok(None) => 0,
                    Err(_) => u64::MAX,
                };
                let text = if self.params.shared.trace {
                    match result {
                        Ok(Some(v)) => format!(
                            "read {} -> {} holder {:?} token {}",
                            op.0,
                            v.version,
                            v.record.holder.as_ref().map(|h| &h.id),
                            v.record.token
                        ),
                        Ok(None) => format!("read {} -> empty", op.0),
                        Err(e) => format!("read {} -> error: {e}", op.0),
                    }
                } else {
                    String::new()
                };
                (vec![1, op.0, v], text)
            }
            Input::CasDone { op, result } => {
                let v = match result {
                    Ok(CasOutcome::Applied(v)) => v.0,
                    Ok(CasOutcome::Conflict) => 0,
                    Err(_) => u64::MAX,
                };
                let text = if self.params.shared.trace {
                    match result {
                        Ok(o) => format!("cas {} -> {o:?}", op.0),
                        Err(e) => format!("cas {} -> error: {e}", op.0),
                    }
                } else {
                    String::new()
                };
                (vec![2, op.0, v], text)
            }
            Input::Tick => (vec![3], self.text(|| "tick".into())),
            Input::Drained { token } => (
                vec![4, *token],
                self.text(|| format!("drained token {token}")),
            ),
            Input::Resign => (vec![5], self.text(|| "resign".into())),
            Input::Shutdown => (vec![6], self.text(|| "shutdown".into())),
            Input::Changed => (vec![7], self.text(|| "change hint".into())),
            Input::Pulse { at } => (vec![8, at.as_nanos()], self.text(|| "pulse".into())),
            Input::Observed { current } => (
                vec![9, current.version.0],
                self.text(|| format!("feed -> {} token {}", current.version, current.record.token)),
            ),
            Input::Feed { live } => (
                vec![10, u64::from(*live)],
                self.text(|| format!("feed live {live}")),
            ),
            Input::RenewEarly => (vec![11], self.text(|| "renew early".into())),
            Input::PollEarly => (vec![12], self.text(|| "poll early".into())),
            Input::TransferTo { to } => (vec![13], self.text(|| format!("transfer to {to}"))),
            Input::SetMetadata { .. } => (vec![14], self.text(|| "set metadata".into())),
        }
    }

    /// Trace text, built only when a trace is kept.
    pub(super) fn text(&self, f: impl FnOnce() -> String) -> String {
        if self.params.shared.trace {
            f()
        } else {
            String::new()
        }
    }

    pub(super) fn schedule_wake(&mut self, n: usize, quiet_tick: bool) {
        let t = self.now;
        let node = &mut self.nodes[n];
        let Some(machine) = node.machine.as_ref() else {
            return;
        };
        let now = node.clock.now(t);
        let Some(wake) = machine.next_wake(now) else {
            node.wake_gen += 1;
            return;
        };
        let mut at = node.clock.real_at(wake).max(t);
        if at == t && quiet_tick {
            // A tick that changed nothing, and the machine wants another at
            // once: a real driver would spin.
            if let Wake::BackOff { by, first } = node.spin.again() {
                if first {
                    let detail = format!(
                        "node {n} ({:?}) asked {} times in a row to be woken at {} (its clock reads {}), and each tick there did nothing: a driver sleeping until next_wake would spin",
                        machine.phase(),
                        node.spin.count(),
                        wake.as_nanos(),
                        now.mono.as_nanos()
                    );
                    self.checker.busy_wait(t, n, detail);
                }
                at = t.after(by);
            }
        } else {
            node.spin.reset();
        }
        node.wake_gen += 1;
        let gen = node.wake_gen;
        self.deliver_at(at, n, Msg::Tick(gen));
    }

    /// Traces node `n`'s term of `token` lasting until `deadline` on its
    /// clock (elected or renewed, as `tag` says), with its real instant.
    fn trace_term(&mut self, n: usize, tag: &'static str, token: u64, deadline: MonoTime) {
        let real = self.nodes[n].clock.real_at(deadline);
        self.trace.event(
            self.now,
            Some(n),
            tag,
            &[token, deadline.as_nanos()],
            || format!("token {token} until {} (real {real})", deadline.as_nanos()),
        );
    }

    pub(super) fn act(&mut self, n: usize, action: Action) {
        let t = self.now;
        match action {
            Action::Read { op, deadline, .. } => {
                self.trace
                    .event(t, Some(n), "read", &[op.0, deadline.as_nanos()], || {
                        format!("read {} deadline {}", op.0, deadline.as_nanos())
                    });
                self.nodes[n].ops.insert(op.0, OpKind::Read);
                self.send(n, op, Req::Read, deadline);
            }
            Action::Cas {
                op,
                purpose,
                expected,
                record,
                deadline,
            } => {
                if purpose == WritePurpose::Acquire {
                    self.note_takeover(n, expected);
                }
                let exp = expected.map_or(0, |v| v.0);
                self.trace.event(
                    t,
                    Some(n),
                    "cas",
                    &[op.0, exp, record.token, u64::from(record.holder.is_some())],
                    || {
                        format!(
                            "cas {} expect {:?} token {} {} deadline {}",
                            op.0,
                            expected,
                            record.token,
                            if record.holder.is_some() {
                                "hold"
                            } else {
                                "release"
                            },
                            deadline.as_nanos()
                        )
                    },
                );
                self.nodes[n].ops.insert(op.0, OpKind::Cas);
                self.send(n, op, Req::Cas { expected, record }, deadline);
            }
            Action::Elected { token, deadline } => {
                self.trace_term(n, "ELECTED", token, deadline);
                self.checker.elected(t, n, token, deadline);
            }
            Action::Renewed {
                token, deadline, ..
            } => {
                self.trace_term(n, "renewed", token, deadline);
                self.checker.renewed(t, n, token, deadline);
            }
            Action::EndTerm {
                token,
                reason,
                work_deadline,
            } => {
                self.trace.event(
                    t,
                    Some(n),
                    "END_TERM",
                    &[token, work_deadline.as_nanos()],
                    || {
                        format!(
                            "token {token}: {reason}; work gone by {}",
                            work_deadline.as_nanos()
                        )
                    },
                );
                *self.end_reasons.entry(reason.label()).or_insert(0) += 1;
                self.checker.end_term(t, n, token, work_deadline);
                // The work stops on its own schedule, at the latest by the
                // work deadline, and a third of the time at once.
                let by = self.nodes[n].clock.real_at(work_deadline);
                let at = if by <= t || self.rng.gen_bool(0.3) {
                    t
                } else {
                    t.after(between(&mut self.rng, Duration::ZERO, by.since(t)))
                };
                self.deliver_at(at, n, Msg::Drained(token));
            }
            Action::LeaderChanged { leader } => {
                let (id, token) = leader.as_ref().map_or((String::new(), 0), |v| {
                    (
                        v.record.holder_id().unwrap_or_default().to_string(),
                        v.record.token,
                    )
                });
                self.trace.event(t, Some(n), "leader", &[token], || {
                    format!("sees leader {id:?} token {token}")
                });
            }
            Action::Failed { fault } => {
                self.trace
                    .event(t, Some(n), "FAILED", &[], || format!("gave up: {fault}"));
                self.checker.note("a candidate gave up for good (a fault)");
            }
            Action::Stopped => {
                self.trace
                    .event(t, Some(n), "stopped", &[], || "machine stopped".into());
                self.kill(n);
                // Redeployed after a while, but before the tail begins.
                let term = self.timing.term;
                let down = between(&mut self.rng, term / 5, term * 2);
                let at = t.after(down).min(self.fault_end.max(t));
                self.push(at, Ev::Restart { node: n });
            }
        }
    }
}
