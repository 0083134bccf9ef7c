//! SIGINT, SIGTERM and SIGHUP as cancellation: the first asks for a clean
//! stop, a second one for a quick one. SIGHUP counts because a closed
//! terminal would otherwise kill tenure outright, leaving its lease to
//! expire instead of being released.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Fires on the first SIGINT, SIGTERM or SIGHUP ([`stop`](Stop::stop)) and on the
/// second ([`hurry`](Stop::hurry)).
#[derive(Clone, Debug)]
pub struct Stop {
    stop: CancellationToken,
    hurry: CancellationToken,
    signo: Arc<AtomicI32>,
}

impl Stop {
    /// Starts listening. Must run inside a tokio runtime.
    pub fn listen() -> std::io::Result<Stop> {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let stop = Stop {
            stop: CancellationToken::new(),
            hurry: CancellationToken::new(),
            signo: Arc::new(AtomicI32::new(0)),
        };
        let s = stop.clone();
        tokio::spawn(async move {
            loop {
                let signo = tokio::select! {
                    Some(()) = int.recv() => libc::SIGINT,
                    Some(()) = term.recv() => libc::SIGTERM,
                    Some(()) = hup.recv() => libc::SIGHUP,
                    else => return,
                };
                if s.stop.is_cancelled() {
                    tracing::warn!("second signal: stopping without grace");
                    s.hurry.cancel();
                } else {
                    tracing::info!(signal = signo, "stopping");
                    s.signo.store(signo, Ordering::Release);
                    s.stop.cancel();
                }
            }
        });
        Ok(stop)
    }

    /// Completes on the first signal.
    pub async fn stopped(&self) {
        self.stop.cancelled().await
    }

    /// Whether the first signal came.
    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Whether the second signal came.
    pub fn is_hurried(&self) -> bool {
        self.hurry.is_cancelled()
    }

    /// The signal that asked to stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.signo.load(Ordering::Acquire) {
            0 => None,
            s => Some(s),
        }
    }
}
