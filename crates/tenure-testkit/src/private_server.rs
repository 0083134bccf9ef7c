//! A server a store's test runs for itself (to kill, restart, freeze or
//! misconfigure it) on a loopback port, SIGKILLed on drop. Each store says
//! how to launch its server ([`Launch`]: the port, the command, when it
//! serves); starting, stopping and signalling are the same for all.

use std::net::SocketAddr;
use std::ops::Deref;
use std::process::Command;
use std::time::Duration;

use super::scenarios::Restart;
use super::ServerProcess;

/// How to run one server: its port and data stay the same across
/// restarts, so a restarted server is the same server.
pub trait Launch {
    /// The loopback port it listens on.
    fn port(&self) -> u16;

    /// The command that runs it (writing any configuration file it needs).
    fn command(&self) -> Command;

    /// Returns once it serves; panics if it does not in time. It is called
    /// once the port accepts connections; by default that is enough.
    fn wait_until_serving(&self) {}

    /// Picks new free ports (and returns true) for a first start whose
    /// server exited at once: another process can take a port between
    /// [`free_port`](super::free_port) and the server's bind, for one as
    /// an outgoing connection's local port. False (the default) where the
    /// ports cannot change.
    fn choose_other_ports(&mut self) -> bool {
        false
    }
}

/// How long a server may take to listen: generous, as a test run starts
/// many servers on a busy machine.
const LISTEN_WITHIN: Duration = Duration::from_secs(30);

/// How many times a first start is tried on other ports.
const FIRST_START_TRIES: usize = 3;

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
        for _ in 1..FIRST_START_TRIES {
            match server.try_spawn() {
                Ok(()) => return server,
                Err(_) if server.launch.choose_other_ports() => {}
                Err(ended) => panic!("{ended}"),
            }
        }
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        if let Err(ended) = self.try_spawn() {
            panic!("{ended}");
        }
    }

    /// Runs it and waits until it serves; the error says how it ended if
    /// it exited before listening.
    fn try_spawn(&mut self) -> Result<(), String> {
        let mut cmd = self.launch.command();
        if let Err(e) = self.process.start(&mut cmd) {
            panic!("cannot run {:?}: {e}", cmd.get_program());
        }
        let port = self.launch.port();
        let program = cmd.get_program().to_owned();
        let exited = |process: &mut ServerProcess| {
            process.exited().map(|status| {
                format!("{program:?} for port {port} exited before serving ({status}); is the port taken?")
            })
        };
        let deadline = std::time::Instant::now() + LISTEN_WITHIN;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(ended) = exited(&mut self.process) {
                return Err(ended);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "nothing listens on port {port} after {LISTEN_WITHIN:?}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        self.launch.wait_until_serving();
        // What answered may be another test's server on the same port, ours
        // having exited on finding it taken.
        match exited(&mut self.process) {
            Some(ended) => Err(ended),
            None => Ok(()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener on a port of its choosing (python3, which the test
    /// script installs), exiting at once if the port is taken.
    struct Listener {
        port: u16,
        tries: usize,
    }

    impl Launch for Listener {
        fn port(&self) -> u16 {
            self.port
        }

        fn command(&self) -> Command {
            let mut cmd = Command::new("python3");
            cmd.args([
                "-c",
                "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',int(sys.argv[1]))); s.listen(); time.sleep(60)",
            ])
            .arg(self.port.to_string());
            cmd.stderr(std::process::Stdio::null());
            cmd
        }

        fn choose_other_ports(&mut self) -> bool {
            self.tries += 1;
            self.port = super::super::free_port();
            true
        }
    }

    #[test]
    fn a_first_start_on_a_taken_port_moves_to_another() {
        // The port an outgoing connection holds: nothing listens on it, and
        // nothing else can bind it.
        let peer = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let peer = peer.local_addr().expect("the listener's address");
        let outgoing = std::net::TcpStream::connect(peer).expect("a loopback connection");
        let port = outgoing
            .local_addr()
            .expect("the connection's address")
            .port();
        let server = PrivateServer::start(Listener { port, tries: 0 });
        assert_eq!(server.tries, 1);
        assert_ne!(server.port, port);
        assert!(std::net::TcpStream::connect(server.addr()).is_ok());
    }

    /// A server that exits at once, on ports it cannot change.
    struct Exits;

    impl Launch for Exits {
        fn port(&self) -> u16 {
            super::super::free_port()
        }

        fn command(&self) -> Command {
            let mut cmd = Command::new("python3");
            cmd.args(["-c", "raise SystemExit(3)"]);
            cmd
        }
    }

    #[test]
    #[should_panic(expected = "exited before serving (exit status: 3)")]
    fn a_server_that_exits_before_listening_says_so() {
        let _ = PrivateServer::start(Exits);
    }
}
