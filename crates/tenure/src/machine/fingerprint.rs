//! The machine's fingerprint for the model checker (`tenure-model`): two
//! machines that hash alike behave alike.

use super::Machine;

/// Every field that decides what the machine does next, so two machines
/// that hash alike behave alike. The timing is left out (a model runs all
/// its machines with one), and the random generator enters as its next
/// output: a fingerprint of its position in the stream, since `StdRng`
/// offers no `Hash`; with zero jitter it is never drawn from, so it is
/// left out too.
impl std::hash::Hash for Machine {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        use rand::RngCore;
        // Destructured, so that a new field cannot be forgotten here.
        let Machine {
            timing: _,
            me,
            metadata,
            rng,
            state,
            op,
            next_op,
            observed,
            last_held_term,
            stand,
            last_pulse,
            reported,
            max_token,
            predecessor,
            metadata_dirty,
            preempt,
            anchor_at_receive,
            // A buffer (see `Machine::recycle`): no state.
            spare: _,
        } = self;
        me.hash(h);
        metadata.hash(h);
        if !self.timing.retry_jitter.is_zero() {
            rng.clone().next_u64().hash(h);
        }
        state.hash(h);
        op.hash(h);
        next_op.hash(h);
        observed.hash(h);
        last_held_term.hash(h);
        stand.hash(h);
        last_pulse.hash(h);
        reported.hash(h);
        max_token.hash(h);
        predecessor.hash(h);
        metadata_dirty.hash(h);
        preempt.hash(h);
        anchor_at_receive.hash(h);
    }
}
