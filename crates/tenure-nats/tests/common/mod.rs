//! Helpers shared by the NATS store's tests: the shared server's URL, a
//! private nats-server that a test may configure, kill and restart, raw
//! access to a bucket, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::process::{Command, Stdio};

use async_nats::jetstream::{self, kv};
use tenure_testkit::{free_port, unique_suffix, Launch, PrivateServer, TempDir};

/// A bucket name of a test's own, so runs never share state.
pub fn fresh_bucket(label: &str) -> String {
    format!("{label}-{:x}", unique_suffix())
}

/// The shared server's URL with a fresh bucket, or `None` (the test is
/// skipped; under `CI=true` it fails instead).
pub fn shared_url(label: &str) -> Option<String> {
    let server = tenure_testkit::server_url("TENURE_TEST_NATS")?;
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
/// in a directory that survives restarts.
pub type NatsServer = PrivateServer<Nats>;

/// How to run a private nats-server: `config` is extra configuration-file
/// text (authorization, TLS).
pub struct Nats {
    pub port: u16,
    dir: TempDir,
    config: String,
    jetstream: bool,
}

impl Nats {
    pub fn start() -> NatsServer {
        Nats::with_config("")
    }

    pub fn with_config(config: &str) -> NatsServer {
        Nats::build(config, true)
    }

    /// A server without JetStream.
    pub fn without_jetstream() -> NatsServer {
        Nats::build("", false)
    }

    fn build(config: &str, jetstream: bool) -> NatsServer {
        PrivateServer::start(Nats {
            port: free_port(),
            dir: TempDir::new("nats"),
            config: config.to_owned(),
            jetstream,
        })
    }

    pub fn url(&self, bucket: &str) -> String {
        format!("nats://127.0.0.1:{}/{bucket}", self.port)
    }

    pub fn server(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Launch for Nats {
    fn port(&self) -> u16 {
        self.port
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        true
    }

    fn command(&self) -> Command {
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
        cmd
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure_testkit::scenarios::{elector, one_leader};
