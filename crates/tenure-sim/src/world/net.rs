//! Requests and replies between nodes and the store, and the store itself.

use super::*;

impl World {
    pub(super) fn send(&mut self, n: usize, op: OpId, req: Req, deadline: tenure::MonoTime) {
        let t = self.now;
        let timeout_at = self.nodes[n].clock.real_at(deadline).max(t);
        self.deliver_at(timeout_at, n, Msg::Timeout(op));
        if self.nodes[n].partitioned_until > t {
            self.trace.event(t, Some(n), "lost", &[op.0], || {
                format!("request {} lost: node is partitioned", op.0)
            });
            return;
        }
        let fate = if t < self.fault_end {
            OpFate::draw(&mut self.rng, &self.params.faults.per_op)
        } else {
            OpFate::Normal
        };
        if let Some(kind) = fate.kind() {
            self.count(kind);
            self.checker.disturb(t);
        }
        if fate == OpFate::DroppedRequest {
            self.trace.event(t, Some(n), "dropped", &[op.0], || {
                format!("request {} dropped before the store", op.0)
            });
            return;
        }
        let at = t.after(self.latency(fate == OpFate::SlowRequest));
        let life = self.nodes[n].life;
        self.push(
            at,
            Ev::Arrive {
                node: n,
                life,
                op,
                req,
                fate,
            },
        );
    }

    pub(super) fn arrive(&mut self, n: usize, life: u32, op: OpId, req: Req, fate: OpFate) {
        let t = self.now;
        let msg = if fate == OpFate::StoreFailure {
            Msg::Failed(op)
        } else {
            match req {
                Req::Read => match self.store.read_now(&self.group) {
                    Ok(result) => Msg::ReadReply { op, result },
                    Err(e) => {
                        self.checker.bad_record(t, n, e.to_string());
                        Msg::Failed(op)
                    }
                },
                Req::Cas { expected, record } => {
                    let outcome = self
                        .store
                        .compare_and_swap_now(&self.group, expected, &record);
                    if let CasOutcome::Applied(v) = outcome {
                        self.trace
                            .event(t, Some(n), "APPLIED", &[v.0, record.token], || {
                                format!(
                                    "store {v}: holder {:?} token {} (op {})",
                                    record.holder.as_ref().map(|h| &h.id),
                                    record.token,
                                    op.0
                                )
                            });
                        self.checker.store_write(t, n, record.token);
                        if self.notify {
                            self.notify_all(t);
                        }
                    }
                    Msg::CasReply { op, outcome }
                }
            }
        };
        if fate == OpFate::LostReply {
            self.trace.event(t, Some(n), "lost", &[op.0], || {
                format!("reply to {} lost after the store handled it", op.0)
            });
            return;
        }
        let at = t.after(self.latency(fate == OpFate::SlowReply));
        self.push(at, Ev::Deliver { node: n, life, msg });
    }

    /// The store hints every node that the record changed.
    pub(super) fn notify_all(&mut self, t: SimTime) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].up() {
                let at = t.after(self.latency(false));
                self.deliver_at(at, i, Msg::Changed);
            }
        }
    }
}
