//! Helpers shared by the Redis store's tests: a private Redis server that a
//! test may kill and restart, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::process::{Command, Stdio};

use tenure_testkit::{free_port, Launch, PrivateServer, TempDir};

/// A private redis-server on a free port, without persistence (so a
/// restart loses every key, as the shared test server would).
pub type RedisServer = PrivateServer<Redis>;

/// How to run a private redis-server: `extra` arguments after the usual.
pub struct Redis {
    pub port: u16,
    dir: TempDir,
    extra: Vec<String>,
}

impl Redis {
    pub fn start(extra: &[&str]) -> RedisServer {
        PrivateServer::start(Redis {
            port: free_port(),
            dir: TempDir::new("server"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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

impl Launch for Redis {
    fn port(&self) -> u16 {
        self.port
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        true
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure_testkit::scenarios::{elector, one_leader};
