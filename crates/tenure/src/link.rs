//! How an elector's handle and its publisher reach the backend that runs
//! the election: a coordinator's own channels, or the shared engine that
//! runs the lease elections of many groups.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::coordinator::Command;
use crate::engine::{EngineShared, GroupId, ToEngine};

/// The handle's side: commands and pulses.
pub(crate) enum Link {
    /// A coordinator reads commands through its [`Session`](crate::Session);
    /// it sees the channel close when the last handle is gone.
    Channel(mpsc::UnboundedSender<Command>),
    /// One group among many in an engine.
    Engine {
        engine: Arc<EngineShared>,
        id: GroupId,
    },
}

impl Link {
    pub(crate) fn command(&self, cmd: Command) {
        match self {
            Link::Channel(commands) => {
                let _ = commands.send(cmd);
            }
            Link::Engine { engine, id } => engine.send(ToEngine::Command(*id, cmd)),
        }
    }

    /// Sends an engine-only request; `false` for a coordinator, which has no
    /// way to act on it.
    pub(crate) fn to_engine(&self, msg: impl FnOnce(GroupId) -> ToEngine) -> bool {
        match self {
            Link::Channel(_) => false,
            Link::Engine { engine, id } => {
                engine.send(msg(*id));
                true
            }
        }
    }

    /// A pulse came while the backend waits for one. Coordinators read the
    /// last pulse when they need it, so only the engine is woken.
    pub(crate) fn pulse(&self) {
        if let Link::Engine { engine, id } = self {
            engine.send(ToEngine::Pulse(*id));
        }
    }
}

impl Drop for Link {
    /// The last handle is gone: the candidate stops, as after `shutdown`.
    fn drop(&mut self) {
        if let Link::Engine { engine, id } = self {
            engine.send(ToEngine::Command(*id, Command::Shutdown));
        }
    }
}

/// The publisher's side: telling the backend that a term's work drained.
#[derive(Clone)]
pub(crate) enum DrainedTo {
    Channel(mpsc::UnboundedSender<u64>),
    Engine {
        engine: Arc<EngineShared>,
        id: GroupId,
    },
}

impl DrainedTo {
    pub(crate) fn drained(&self, token: u64) {
        match self {
            DrainedTo::Channel(drained) => {
                let _ = drained.send(token);
            }
            DrainedTo::Engine { engine, id } => engine.send(ToEngine::Drained(*id, token)),
        }
    }
}
