//! How an elector's handle and its publisher reach the backend that runs
//! the election: a coordinator's own channels, or the shared engine that
//! runs the lease elections of many groups.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::coordinator::Command;
use crate::engine::{EngineShared, GroupId, ToEngine};

/// Where messages of one kind go: a coordinator's own channel, or the
/// engine, tagged with the group they are for.
#[derive(Clone)]
pub(crate) enum Route<T> {
    /// A coordinator reads the channel through its
    /// [`Session`](crate::Session); it sees the channel close when the last
    /// sender is gone.
    Channel(mpsc::UnboundedSender<T>),
    /// One group among many in an engine.
    Engine {
        engine: Arc<EngineShared>,
        id: GroupId,
    },
}

impl<T> Route<T> {
    /// Delivers `msg`; `for_engine` tags it with the group for the engine.
    /// A coordinator that has stopped is past caring, so a closed channel
    /// is not an error.
    fn deliver(&self, msg: T, for_engine: fn(GroupId, T) -> ToEngine) {
        match self {
            Route::Channel(tx) => {
                let _ = tx.send(msg);
            }
            Route::Engine { engine, id } => engine.send(for_engine(*id, msg)),
        }
    }
}

/// The handle's side: commands and pulses.
pub(crate) struct Link(pub(crate) Route<Command>);

impl Link {
    pub(crate) fn command(&self, cmd: Command) {
        self.0.deliver(cmd, ToEngine::Command);
    }

    /// Sends an engine-only request; `false` for a coordinator, which has no
    /// way to act on it.
    pub(crate) fn to_engine(&self, msg: impl FnOnce(GroupId) -> ToEngine) -> bool {
        match &self.0 {
            Route::Channel(_) => false,
            Route::Engine { engine, id } => {
                engine.send(msg(*id));
                true
            }
        }
    }

    /// A pulse came while the backend waits for one. Coordinators read the
    /// last pulse when they need it, so only the engine is woken.
    pub(crate) fn pulse(&self) {
        self.to_engine(ToEngine::Pulse);
    }
}

impl Drop for Link {
    /// The last handle is gone: the candidate stops, as after `shutdown`.
    /// (A coordinator sees its command channel close instead.)
    fn drop(&mut self) {
        self.to_engine(|id| ToEngine::Command(id, Command::Shutdown));
    }
}

/// The publisher's side: telling the backend that a term's work drained.
pub(crate) type DrainedTo = Route<u64>;

impl DrainedTo {
    pub(crate) fn drained(&self, token: u64) {
        self.deliver(token, ToEngine::Drained);
    }
}
