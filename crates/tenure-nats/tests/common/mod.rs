//! Helpers shared by the NATS store's tests: the shared server's URL, a
//! private nats-server that a test may configure, kill and restart, raw
//! access to a bucket, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use tenure::testkit::{free_port, unique_suffix, wait_for_port, ServerProcess, TempDir};

/// A bucket name of a test's own, so runs never share state.
pub fn fresh_bucket(label: &str) -> String {
    format!("{label}-{:x}", unique_suffix())
}

/// The shared server's URL with a fresh bucket, or `None` (the test is
/// skipped; under `CI=true` it fails instead).
pub fn shared_url(label: &str) -> Option<String> {
    let server = tenure::testkit::server_url("TENURE_TEST_NATS")?;
    Some(format!(
        "{}/{}",
        server.trim_end_matches('/'),
        fresh_bucket(label)
    ))
}

/// The bucket of a store URL, and the URL without it.
pub fn split_bucket(url: &str) -> (&str, &str) {
    url.rsplit_once('/').expect("a URL with a bucket")
}

/// Raw access to a bucket, bypassing tenure (a foreign program, an
/// operator with the `nats` command).
pub async fn raw_bucket(server: &str, bucket: &str) -> kv::Store {
    let client = async_nats::connect(server.trim_start_matches("nats://"))
        .await
        .expect("raw connect");
    let js = jetstream::new(client);
    js.get_key_value(bucket).await.expect("the bucket exists")
}

/// Makes `bucket` as `nats kv add BUCKET --history 1` does: unlike the
/// buckets tenure creates, it allows purges and roll-ups (`nats kv purge`).
pub async fn nats_kv_add(server: &str, bucket: &str) {
    let client = async_nats::connect(server.trim_start_matches("nats://"))
        .await
        .expect("raw connect");
    jetstream::new(client)
        .create_stream(jetstream::stream::Config {
            name: format!("KV_{bucket}"),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            discard: jetstream::stream::DiscardPolicy::New,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            ..Default::default()
        })
        .await
        .expect("create the bucket");
}

/// A private nats-server on a free port, with JetStream and file storage
/// in a directory that survives restarts, killed by PID on drop. `config`
/// is extra configuration-file text (authorization, TLS).
pub struct NatsServer {
    pub port: u16,
    dir: TempDir,
    config: String,
    jetstream: bool,
    child: ServerProcess,
}

impl NatsServer {
    pub fn start() -> NatsServer {
        NatsServer::with_config("")
    }

    pub fn with_config(config: &str) -> NatsServer {
        NatsServer::build(config, true)
    }

    /// A server without JetStream.
    pub fn without_jetstream() -> NatsServer {
        NatsServer::build("", false)
    }

    fn build(config: &str, jetstream: bool) -> NatsServer {
        let mut s = NatsServer {
            port: free_port(),
            dir: TempDir::new("nats"),
            config: config.to_owned(),
            jetstream,
            child: ServerProcess::default(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let store = self.dir.path().join("store");
        let jetstream = if self.jetstream {
            format!("jetstream {{ store_dir: {store:?} }}")
        } else {
            String::new()
        };
        let conf = self.dir.path().join("server.conf");
        std::fs::write(
            &conf,
            format!(
                "listen: \"127.0.0.1:{}\"\n{jetstream}\n{}\n",
                self.port, self.config
            ),
        )
        .expect("write the server configuration");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let mut cmd = Command::new("nats-server");
        cmd.arg("-c").arg(&conf).stdout(Stdio::null()).stderr(log);
        self.child
            .start(&mut cmd)
            .expect("nats-server is installed (scripts/servers.sh installs it)");
        wait_for_port(self.port, Duration::from_secs(10));
    }

    pub fn url(&self, bucket: &str) -> String {
        format!("nats://127.0.0.1:{}/{bucket}", self.port)
    }

    pub fn server(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> i32 {
        self.child.pid().unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGKILL; the store directory stays.
    pub fn kill(&mut self) {
        self.child.kill();
    }

    /// Starts again on the same port and store directory.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// SIGSTOP, returning once every thread of the server has stopped
    /// (delivery to a busy multi-threaded process is not instant).
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
        let tasks = format!("/proc/{}/task", self.pid());
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
        panic!("nats-server did not stop within 2 s of SIGSTOP");
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    pub fn signal(&self, sig: i32) {
        let _ = tenure::testkit::signal(self.pid(), sig);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        self.kill();
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure::testkit::scenarios::{elector, one_leader};

impl tenure::testkit::scenarios::Restart for NatsServer {
    fn kill(&mut self) {
        NatsServer::kill(self);
    }

    fn restart(&mut self) {
        NatsServer::restart(self);
    }
}
