//! Helpers shared by the etcd store's tests: a private etcd that a
//! test may kill and restart, a TCP proxy that a test may cut, and elector
//! helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure::{Config, Elector, GroupName, LeaseStore};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A free port on loopback (racy in theory, fine for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A throwaway directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tenure-etcd-{label}-{}-{:x}",
            std::process::id(),
            rand_u64()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}

/// A private etcd on free ports whose data directory survives restarts,
/// killed by PID on drop.
pub struct EtcdServer {
    pub port: u16,
    peer: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl EtcdServer {
    pub fn start() -> EtcdServer {
        let mut s = EtcdServer {
            port: free_port(),
            peer: free_port(),
            dir: TempDir::new("etcd"),
            child: None,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "t", "--data-dir"])
            .arg(self.dir.0.join("data"))
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
        self.child = Some(cmd.spawn().expect("etcd is installed"));
        wait_port(self.port);
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
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

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn wait_port(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("nothing listens on port {port} after 5 s");
}

/// Forwards a local port to `target` until cut: then open connections
/// stop forwarding (silence, like a partition) and new ones are dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    cut_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let (cut_tx, cut_rx) = watch::channel(false);
        let flag = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if flag.load(Ordering::Acquire) {
                    drop(inbound);
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = async { cut_rx.wait_for(|cut| *cut).await.is_ok() } => {
                            // Hold both sockets open and silent.
                            std::future::pending::<()>().await;
                        }
                    }
                    let _ = inbound.shutdown().await;
                });
            }
        });
        Proxy {
            addr,
            cut,
            cut_tx,
            task,
        }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        let _ = self.cut_tx.send(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts an elector for `group` with a term.
pub fn elector(store: impl LeaseStore, group: &GroupName, id: &str, term: Duration) -> Elector {
    Elector::builder(store, group.as_str())
        .candidate_id(id)
        .config(Config::new(term))
        .start()
        .expect("valid config")
}

/// Waits until exactly one of `electors` leads, panicking if two ever do.
pub async fn one_leader(electors: &[&Elector], within: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let leaders: Vec<usize> = electors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_leader())
            .map(|(i, _)| i)
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let [one] = leaders[..] {
            return one;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
