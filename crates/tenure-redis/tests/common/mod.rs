//! Helpers shared by the Redis store's tests: a private Redis server that a
//! test may kill and restart, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use tenure::testkit::{free_port, wait_for_port, ServerProcess, TempDir};

/// A private redis-server on a free port, without persistence (so a
/// restart loses every key, as the shared test server would), killed by
/// PID on drop.
pub struct RedisServer {
    pub port: u16,
    dir: TempDir,
    extra: Vec<String>,
    child: ServerProcess,
}

impl RedisServer {
    pub fn start(extra: &[&str]) -> RedisServer {
        let mut s = RedisServer {
            port: free_port(),
            dir: TempDir::new("server"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: ServerProcess::default(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child
            .start(&mut cmd)
            .expect("redis-server is installed");
        wait_for_port(self.port, Duration::from_secs(5));
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// SIGKILL: the data (in memory only) is gone.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Starts again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs redis-cli against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .args(args)
            .output()
            .expect("redis-cli is installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure::testkit::scenarios::{elector, one_leader};
