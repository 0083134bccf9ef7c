//! A server a store's test runs for itself (to kill, restart, freeze or
//! misconfigure it) on a loopback port, SIGKILLed on drop. Each store says
//! how to launch its server ([`Launch`]: the port, the command, when it
//! serves); starting, stopping and signalling are the same for all.

use std::net::SocketAddr;
use std::ops::Deref;
use std::process::Command;
use std::time::Duration;

use super::scenarios::Restart;
use super::{wait_for_port, ServerProcess};

/// How to run one server: its port and data stay the same across
/// restarts, so a restarted server is the same server.
pub trait Launch {
    /// The loopback port it listens on.
    fn port(&self) -> u16;

    /// The command that runs it (writing any configuration file it needs).
    fn command(&self) -> Command;

    /// Returns once it serves; panics if it does not in time. By default:
    /// once its port accepts connections, within 10 s.
    fn wait_until_serving(&self) {
        wait_for_port(self.port(), Duration::from_secs(10));
    }
}

/// A running private server. It dereferences to its [`Launch`], whose
/// methods (its URL, a command-line client) the store's tests add.
pub struct PrivateServer<L: Launch> {
    launch: L,
    process: ServerProcess,
}

impl<L: Launch> PrivateServer<L> {
    /// Starts the server `launch` describes.
    ///
    /// # Panics
    ///
    /// If it cannot be run (not installed: `scripts/servers.sh` installs
    /// the servers) or does not serve in time.
    pub fn start(launch: L) -> PrivateServer<L> {
        let mut server = PrivateServer {
            launch,
            process: ServerProcess::default(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut cmd = self.launch.command();
        if let Err(e) = self.process.start(&mut cmd) {
            panic!("cannot run {:?}: {e}", cmd.get_program());
        }
        self.launch.wait_until_serving();
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.launch.port()))
    }

    /// Its process id, while it runs.
    fn pid(&self) -> Option<i32> {
        self.process.pid()
    }

    /// SIGKILL; its data stays.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Starts it again on the same port and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Stops it, runs `between` (to change its data), and starts it again.
    pub fn restart_after(&mut self, between: impl FnOnce(&L)) {
        self.kill();
        between(&self.launch);
        self.spawn();
    }

    /// Sends signal `sig`, if it runs.
    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            let _ = super::signal(pid, sig);
        }
    }

    /// SIGSTOP, returning once every thread of the server has stopped
    /// (delivery to a busy multi-threaded process is not instant).
    ///
    /// # Panics
    ///
    /// If it does not run (no pid, or its threads under `/proc` cannot be
    /// listed: it died), or not every thread stopped within 2 s.
    pub fn freeze(&self) {
        let pid = self.pid().expect("the server runs");
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{pid}/task");
        for _ in 0..400 {
            let stopped = std::fs::read_dir(&tasks)
                .expect("the server's threads")
                .filter_map(Result::ok)
                .all(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    // The state follows the ")" that ends the command name.
                    stat.rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
                });
            if stopped {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("the server did not stop within 2 s of SIGSTOP");
    }

    /// SIGCONT: a frozen server goes on.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl<L: Launch> Deref for PrivateServer<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.launch
    }
}

impl<L: Launch> Drop for PrivateServer<L> {
    fn drop(&mut self) {
        // Thawed first, as a frozen server is not reaped at once.
        self.thaw();
        self.kill();
    }
}

impl<L: Launch> Restart for PrivateServer<L> {
    fn kill(&mut self) {
        PrivateServer::kill(self);
    }

    fn restart(&mut self) {
        PrivateServer::restart(self);
    }
}
