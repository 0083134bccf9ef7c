//! Helpers shared by the etcd store's tests: a private etcd that a
//! test may kill and restart, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tenure_testkit::{free_port, Launch, PrivateServer, TempDir};

/// A private etcd on free ports whose data directory survives restarts.
pub type EtcdServer = PrivateServer<Etcd>;

/// How to run a private one-member etcd cluster.
pub struct Etcd {
    pub port: u16,
    peer: u16,
    dir: TempDir,
}

impl Etcd {
    pub fn start() -> EtcdServer {
        PrivateServer::start(Etcd {
            port: free_port(),
            peer: free_port(),
            dir: TempDir::new("etcd"),
        })
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
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

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

impl Launch for Etcd {
    fn port(&self) -> u16 {
        self.port
    }

    fn command(&self) -> Command {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "t", "--data-dir"])
            .arg(self.data())
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
        cmd
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        self.peer = free_port();
        true
    }

    fn wait_until_serving(&self) {
        // Serving only once it elected itself: wait for a read to work.
        for _ in 0..300 {
            if self.ctl(&["get", "probe"]).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd on port {} did not become ready", self.port);
    }
}

/// Starts `server` again on the same ports with no data: a cluster
/// rebuilt from nothing, whose revisions count from 1 again.
pub fn wipe_and_restart(server: &mut EtcdServer) {
    server.restart_after(|etcd| {
        std::fs::remove_dir_all(etcd.data()).expect("remove the data directory");
    });
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure_testkit::scenarios::{elector, one_leader};
