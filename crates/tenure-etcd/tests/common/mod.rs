//! Helpers shared by the etcd store's tests: a private etcd that a
//! test may kill and restart, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use tenure::testkit::{free_port, wait_for_port, ServerProcess, TempDir};

/// A private etcd on free ports whose data directory survives restarts,
/// killed by PID on drop.
pub struct EtcdServer {
    pub port: u16,
    peer: u16,
    dir: TempDir,
    child: ServerProcess,
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        let mut s = EtcdServer {
            port: free_port(),
            peer: free_port(),
            dir: TempDir::new("etcd"),
            child: ServerProcess::default(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("t={peer}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child.start(&mut cmd).expect("etcd is installed");
        wait_for_port(self.port, Duration::from_secs(5));
        // Serving only once it elected itself: wait for a read to work.
        for _ in 0..100 {
            if self.ctl(&["get", "probe"]).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd on port {} did not become ready", self.port);
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// SIGKILL; the data directory stays.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Starts again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Starts again on the same ports with no data: a cluster rebuilt from
    /// nothing, whose revisions count from 1 again.
    pub fn wipe_and_restart(&mut self) {
        self.kill();
        std::fs::remove_dir_all(self.dir.path().join("data")).expect("remove the data directory");
        self.spawn();
    }

    /// Runs etcdctl: (success, stdout + stderr).
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", self.port))
            .args(["--command-timeout=2s", "--dial-timeout=1s"])
            .args(args)
            .output()
            .expect("etcdctl is installed");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure::testkit::scenarios::{elector, one_leader};

impl tenure::testkit::scenarios::Restart for EtcdServer {
    fn kill(&mut self) {
        EtcdServer::kill(self);
    }

    fn restart(&mut self) {
        EtcdServer::restart(self);
    }
}
