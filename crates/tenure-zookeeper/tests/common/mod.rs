//! Helpers shared by the ZooKeeper store's tests: a raw client that writes
//! nodes as a foreign program would, a private ZooKeeper that a test may
//! kill and restart, and the shared elector helpers.
#![allow(dead_code, reason = "each test binary uses a different part")]

use tenure::GroupName;
use tenure_testkit::TcpProxy;
use tenure_zookeeper::ZkStore;
use zookeeper_client as zk;

/// Two handles on `path` (such as `/feed`) of the server at `server_url`
/// (`zk://127.0.0.1:PORT`): the first through `proxy`, to be cut off, with
/// a 1 s operation timeout and the given session timeout (such as `30s`);
/// the second direct.
pub async fn proxied_and_direct(
    proxy: &TcpProxy,
    server_url: &str,
    path: &str,
    session_timeout: &str,
) -> (ZkStore, ZkStore) {
    let via = ZkStore::connect(&format!(
        "zk://{}{path}?timeout=1s&session_timeout={session_timeout}",
        proxy.addr()
    ))
    .await
    .expect("connect through the proxy");
    let direct = ZkStore::connect(&format!("{server_url}{path}"))
        .await
        .expect("connect");
    (via, direct)
}

/// A plain client on the same prefix node, bypassing tenure.
pub struct Raw {
    pub client: zk::Client,
    pub prefix: String,
}

/// `host:port[,host:port]` of a `zk://` URL (no user, no path).
pub fn hosts(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

impl Raw {
    pub async fn connect(url: &str, prefix: &str) -> Raw {
        let client = zk::Client::connect(&hosts(url)).await.expect("raw client");
        Raw {
            client,
            prefix: prefix.to_owned(),
        }
    }

    /// The node of a group, as tenure names it (plain names only).
    pub fn path(&self, group: &GroupName) -> String {
        let name: String = group
            .as_str()
            .chars()
            .map(|c| match c {
                '/' => "%2F".to_owned(),
                '%' => "%25".to_owned(),
                c => c.to_string(),
            })
            .collect();
        format!("{}/{}", self.prefix, name)
    }

    pub async fn plant(&self, group: &GroupName, bytes: &[u8]) {
        let path = self.path(group);
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.client.set_data(&path, bytes, None).await {
            Ok(_) => {}
            Err(zk::Error::NoNode) => {
                self.client.mkdir(&self.prefix, &open).await.expect("mkdir");
                self.client
                    .create(&path, bytes, &open)
                    .await
                    .expect("plant (create)");
            }
            Err(e) => panic!("plant: {e}"),
        }
    }

    /// Deletes the group's node and its children, as zkCli's `deleteall`.
    pub async fn delete_all(&self, group: &GroupName) {
        let path = self.path(group);
        let children = self.client.list_children(&path).await.expect("children");
        for child in children {
            self.client
                .delete(&format!("{path}/{child}"), None)
                .await
                .expect("delete a child");
        }
        self.client.delete(&path, None).await.expect("delete");
    }

    pub async fn get(&self, group: &GroupName) -> Option<Vec<u8>> {
        match self.client.get_data(&self.path(group)).await {
            Ok((data, _)) => Some(data),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("read raw: {e}"),
        }
    }
}

#[allow(unused_imports, reason = "not every test binary uses them")]
pub use tenure_testkit::scenarios::{elector, one_leader};

use std::process::{Command, Stdio};
use std::time::Duration;

use tenure_testkit::{free_port, Launch, PrivateServer, TempDir};

/// Where Debian's ZooKeeper jar and a logging backend are (what
/// `scripts/servers.sh` installs); `TENURE_ZOOKEEPER_CLASSPATH` overrides.
fn classpath() -> String {
    std::env::var("TENURE_ZOOKEEPER_CLASSPATH")
        .unwrap_or_else(|_| "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar".into())
}

/// A private standalone ZooKeeper on a free port whose data directory
/// survives restarts. Sessions may be as short as 1 s (tickTime 500 ms).
pub type ZkServer = PrivateServer<Zk>;

/// How to run a private standalone ZooKeeper.
pub struct Zk {
    pub port: u16,
    dir: TempDir,
}

impl Zk {
    pub fn start() -> ZkServer {
        PrivateServer::start(Zk {
            port: free_port(),
            dir: TempDir::new("zookeeper"),
        })
    }

    pub fn url(&self) -> String {
        format!("zk://127.0.0.1:{}", self.port)
    }
}

impl Launch for Zk {
    fn port(&self) -> u16 {
        self.port
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        true
    }

    fn command(&self) -> Command {
        let cfg = format!(
            "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n",
            self.dir.path().join("data").display(),
            self.port
        );
        let zoo_cfg = self.dir.path().join("zoo.cfg");
        std::fs::write(&zoo_cfg, cfg).expect("zoo.cfg");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log");
        let mut cmd = Command::new("java");
        cmd.args([
            "-Xmx128m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
        ])
        .arg(classpath())
        .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
        .arg(zoo_cfg)
        .stdout(Stdio::null())
        .stderr(log);
        cmd
    }

    fn wait_until_serving(&self) {
        for _ in 0..600 {
            if serving(self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("ZooKeeper on port {} did not start in 30 s", self.port);
    }
}

/// Whether the ZooKeeper on `port` serves requests: it opens its port
/// before it does, and answers `srvr` with its version only once it does.
pub fn serving(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut out = String::new();
    s.write_all(b"srvr").is_ok()
        && s.read_to_string(&mut out).is_ok()
        && out.contains("Zookeeper version")
}

/// A prefix node of its own for a test on the shared server.
pub fn unique_prefix(label: &str) -> String {
    format!("/tenure-{label}-{:x}", tenure_testkit::unique_suffix())
}

/// Writes `g` held by `id` (token 1) expecting `expected`; the write must
/// apply. Returns the new version.
pub async fn write_held_by(
    store: &tenure_zookeeper::ZkStore,
    g: &GroupName,
    expected: Option<tenure::Version>,
    id: &str,
) -> tenure::Version {
    tenure_testkit::applied(store, g, expected, &tenure_testkit::held_by(id, 1)).await
}
