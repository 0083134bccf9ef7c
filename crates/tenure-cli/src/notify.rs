//! systemd's service notification protocol (`sd_notify(3)`), spoken
//! directly on the `NOTIFY_SOCKET` datagram socket: no C library.
//!
//! Under a unit with `Type=notify`, `tenure run`
//!
//! * sends `READY=1` once it stands (the store is open and the elector
//!   started), not once it leads: a follower is a healthy service too, and
//!   waiting for leadership would hold `systemctl start` until
//!   `TimeoutStartSec` on every host but one;
//! * keeps `STATUS=` up to date with its role (`leading group g with
//!   token 7`, `following host-b (token 7) in group g`, `standing for group
//!   g: no leader visible`), which `systemctl status` shows;
//! * sends `WATCHDOG=1` every half of `WATCHDOG_USEC` (set by
//!   `WatchdogSec=`) while its runtime works, and withholds it while this
//!   process believes it leads on a term past its deadline (the wedged
//!   leader `/healthz` answers 503 for), so systemd restarts it;
//! * sends `STOPPING=1` when told to stop.
//!
//! `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` are taken out of the
//! environment at start ([`capture_env`]), so CMD neither inherits them
//! nor speaks for tenure. A socket that is missing or refuses is reported
//! once as a warning and otherwise ignored: notification never stops the
//! election, as `sd_notify` returning an error stops no daemon.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tenure::{Elector, Role};
use tokio::sync::watch;

use crate::view;

/// What [`capture_env`] took from the environment.
#[derive(Debug, Default)]
struct Captured {
    socket: Option<String>,
    watchdog_usec: Option<String>,
    watchdog_pid: Option<String>,
}

static CAPTURED: OnceLock<Captured> = OnceLock::new();

/// Takes `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` out of the
/// environment, for [`Notifier::from_captured`]. Call once, before any
/// thread starts (`main`, before the runtime).
pub fn capture_env() {
    let take = |name: &str| {
        let value = std::env::var(name).ok();
        // Edition 2021: safe; sound because no other thread runs yet.
        std::env::remove_var(name);
        value
    };
    let _ = CAPTURED.set(Captured {
        socket: take("NOTIFY_SOCKET"),
        watchdog_usec: take("WATCHDOG_USEC"),
        watchdog_pid: take("WATCHDOG_PID"),
    });
}

/// Where the notifications go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A socket file.
    Path(PathBuf),
    /// A socket in Linux's abstract namespace (`@name`).
    Abstract(Vec<u8>),
}

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    target: Target,
    /// How often to send `WATCHDOG=1`, if the manager asked for it.
    watchdog: Option<Duration>,
    /// Whether a failure to send was already reported.
    warned: AtomicBool,
}

impl Notifier {
    /// The notifier for the environment [`capture_env`] took, if systemd
    /// (or anything speaking its protocol) set `NOTIFY_SOCKET`. A value
    /// that is no socket address is a warning, not an error.
    pub fn from_captured() -> Option<Arc<Notifier>> {
        let captured = CAPTURED.get()?;
        let target = match parse_target(captured.socket.as_deref()?) {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!("NOTIFY_SOCKET ignored: {why}");
                return None;
            }
        };
        let watchdog = watchdog_interval(
            captured.watchdog_usec.as_deref(),
            captured.watchdog_pid.as_deref(),
            std::process::id(),
        );
        let socket = match UnixDatagram::unbound().and_then(|s| {
            // A manager that does not read must never block tenure.
            s.set_nonblocking(true)?;
            Ok(s)
        }) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("cannot create a socket to notify the service manager: {e}");
                return None;
            }
        };
        Some(Arc::new(Notifier {
            socket,
            target,
            watchdog,
            warned: AtomicBool::new(false),
        }))
    }

    /// Sends one notification (newline-separated `KEY=VALUE` lines).
    fn send(&self, message: &str) -> io::Result<()> {
        let sent = match &self.target {
            Target::Path(path) => self.socket.send_to(message.as_bytes(), path)?,
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                self.socket.send_to_addr(message.as_bytes(), &addr)?
            }
        };
        if sent == message.len() {
            Ok(())
        } else {
            Err(io::Error::other("the notification was cut short"))
        }
    }

    /// Sends `message`; the first failure is logged as a warning, later
    /// ones at debug level.
    pub fn notify(&self, message: &str) {
        if let Err(e) = self.send(message) {
            if self.warned.swap(true, Ordering::Relaxed) {
                tracing::debug!("cannot notify the service manager: {e}");
            } else {
                tracing::warn!(
                    socket = ?self.target,
                    "cannot notify the service manager through NOTIFY_SOCKET (going on without it): {e}"
                );
            }
        }
    }

    /// Follows the electors of `tenure run` (one per stint, `None`
    /// between stints): `READY=1` once the first stands, `STATUS=` at every
    /// change of role, and the watchdog's pings while the process works.
    pub fn spawn(self: &Arc<Self>, electors: watch::Receiver<Option<Elector>>) {
        let me = Arc::clone(self);
        let mut follow = electors.clone();
        tokio::spawn(async move {
            let mut ready = false;
            loop {
                let elector = follow.borrow_and_update().clone();
                if let Some(elector) = elector {
                    let mut roles = elector.watch_role();
                    loop {
                        let status = status_of(&elector, &roles.borrow_and_update());
                        let message = if ready {
                            format!("STATUS={status}")
                        } else {
                            ready = true;
                            format!("READY=1\nSTATUS={status}")
                        };
                        me.notify(&message);
                        tokio::select! {
                            r = roles.changed() => if r.is_err() { break },
                            r = follow.changed() => if r.is_err() { return } else { break },
                        }
                    }
                } else if follow.changed().await.is_err() {
                    return;
                }
            }
        });
        if let Some(every) = self.watchdog {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let wedged = matches!(
                        electors.borrow().as_ref().map(Elector::role),
                        Some(Role::Leader(term)) if term.remaining().is_zero()
                    );
                    if wedged {
                        tracing::warn!("watchdog ping withheld: this process leads on a term past its deadline");
                    } else {
                        me.notify("WATCHDOG=1");
                    }
                }
            });
        }
    }

    /// Tells the manager that tenure is stopping.
    pub fn stopping(&self) {
        self.notify("STOPPING=1\nSTATUS=stopping: releasing the lease");
    }
}

/// The role as one line for `STATUS=` (escaped: ids come from the store).
fn status_of(elector: &Elector, role: &Role) -> String {
    let group = view::escape(elector.group().as_str());
    match role {
        Role::Leader(term) => format!("leading group {group} with token {}", term.token()),
        Role::Follower { leader: l } => format!(
            "following {} (token {}) in group {group}",
            view::escape(&l.candidate),
            l.token
        ),
        Role::Stopped => format!("stopped standing for group {group}"),
        _ => format!("standing for group {group}: no leader visible"),
    }
}

/// `NOTIFY_SOCKET`: an absolute path, or `@name` in the abstract namespace.
fn parse_target(value: &str) -> Result<Target, String> {
    if let Some(name) = value.strip_prefix('@') {
        if name.is_empty() {
            return Err("`@` names no abstract socket".into());
        }
        return Ok(Target::Abstract(name.as_bytes().to_vec()));
    }
    if value.starts_with('/') {
        return Ok(Target::Path(PathBuf::from(value)));
    }
    Err(format!(
        "{:?} is neither an absolute path nor @name",
        view::escape(value)
    ))
}

/// Half the interval `WATCHDOG_USEC` asks for (as `sd_watchdog_enabled`
/// advises), if it is meant for this process (`WATCHDOG_PID` unset or
/// ours), at least 1 ms.
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, me: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|u| *u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(me) {
            return None;
        }
    }
    Some((Duration::from_micros(usec) / 2).max(Duration::from_millis(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("/run/systemd/notify"),
            Ok(Target::Path("/run/systemd/notify".into()))
        );
        assert_eq!(parse_target("@n"), Ok(Target::Abstract(b"n".to_vec())));
        assert!(parse_target("@").is_err());
        assert!(parse_target("relative").is_err());
        assert!(parse_target("").is_err());
    }

    #[test]
    fn watchdog_for_this_process_only() {
        let half = Some(Duration::from_secs(5));
        assert_eq!(watchdog_interval(Some("10000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("10000000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("10000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("abc"), None, 7), None);
        assert_eq!(watchdog_interval(Some("-5"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(
            watchdog_interval(Some("1"), None, 7),
            Some(Duration::from_millis(1))
        );
        // u64::MAX microseconds: no overflow.
        assert!(watchdog_interval(Some("18446744073709551615"), None, 7).is_some());
    }
}
