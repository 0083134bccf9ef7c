//! How a term's work behaves, drawn from the seed when it starts and then
//! acted out. Shared by the elector and sharded tiers.

use std::future::Future;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use tenure::Term;

use crate::clock::SimTime;
use crate::faults::between;

/// How one term's work behaves, drawn when it starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Behaviour {
    /// Stops when told, after lingering this long.
    Cooperative { linger: Duration },
    /// Ignores the cancellation; it is dropped when the term ends.
    Stubborn,
    /// Returns `Ok` after this long (in the sharded tier the shard's term is
    /// resigned), unless told to stop first.
    Quits { after: Duration, linger: Duration },
    /// Returns an error after this long (in the sharded tier every shard's
    /// work of the member is dropped and `run_per_shard` is called again),
    /// unless told to stop first.
    Fails { after: Duration, linger: Duration },
}

impl Behaviour {
    /// Draws a work's behaviour for a term of length `term` from `rng`,
    /// `now` being when it starts: it quits or fails on its own only if it
    /// would do so before `fault_end`, the fault-free tail.
    pub(crate) fn draw(
        rng: &mut StdRng,
        term: Duration,
        now: SimTime,
        fault_end: SimTime,
    ) -> Behaviour {
        let linger = if rng.gen_bool(0.3) {
            Duration::ZERO
        } else {
            between(rng, Duration::ZERO, term / 2)
        };
        let after = between(rng, Duration::ZERO, term * 3);
        let before_tail = now.after(after) < fault_end;
        match rng.gen_range(0..10) {
            0 => Behaviour::Stubborn,
            1 if before_tail => Behaviour::Quits { after, linger },
            2 if before_tail => Behaviour::Fails { after, linger },
            _ => Behaviour::Cooperative { linger },
        }
    }

    /// Acts the behaviour out on `term`, waiting with `sleep` (each tier
    /// sleeps on its own clock); a work that fails returns `failed`.
    pub(crate) async fn act<E, S, F>(self, term: &Term, sleep: S, failed: E) -> Result<(), E>
    where
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        let (after, linger, outcome) = match self {
            Behaviour::Cooperative { linger } => {
                term.cancelled().await;
                sleep(linger).await;
                return Ok(());
            }
            Behaviour::Stubborn => return std::future::pending().await,
            Behaviour::Quits { after, linger } => (after, linger, Ok(())),
            Behaviour::Fails { after, linger } => (after, linger, Err(failed)),
        };
        tokio::select! {
            biased;
            _ = term.cancelled() => {
                sleep(linger).await;
                Ok(())
            }
            _ = sleep(after) => outcome,
        }
    }
}
