//! `tenure run` on a 3-server ZooKeeper ensemble (`scripts/servers.sh`
//! starts it on loopback): the ensemble's own fail-over under three
//! candidates with a 2 s term, each CMD writing to a fenced resource (see
//! `cluster/mod.rs`).
//!
//! * SIGKILL of the ensemble's leader while tenure's leader renews,
//!   restarted on its data 3 s later, three times;
//! * each server in turn cut off from tenure's clients (its client proxy
//!   goes silent) and frozen (SIGSTOP: silent to its peers too; a frozen
//!   leader makes the others elect another, a frozen follower is dropped by
//!   the leader after syncLimit).
//!
//! * each server of a private ensemble in turn partitioned from its
//!   quorum (a proxy in front of each server's quorum and election ports
//!   silences its traffic both ways) while it still answers its clients,
//!   tenure's among them: it must stop serving (else the cut did not
//!   take), and until then a session on it reads a record older than the
//!   quorum's (shown: ZooKeeper's reads without `sync` are not
//!   linearizable; tenure acts only on its writes' replies).
//!
//! All check that the resource never saw a lower token after a higher
//! one (never two valid terms, no token back), that CMD tokens rose, and
//! that a term leads once the ensemble is whole, and, after a kill, that
//! tenure's term kept if the ensemble led again fast enough for a retried
//! renewal (0.41 s at a 2 s term, which ZooKeeper's election often
//! meets); and print, for each fault, the longest interval without a
//! write (the gap with no valid term) and whether tenure's term survived
//! it (docs/benchmarks.md has the figures).
#![cfg(feature = "zookeeper")]

mod cluster;
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use cluster::{Cluster, Store};

/// The tests share one ensemble: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The server's `Mode:` as its `srvr` four-letter word says (`leader`,
/// `follower`), or `None` if it does not answer or serves no one.
fn mode(addr: SocketAddr) -> Option<String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    c.write_all(b"srvr").ok()?;
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::to_owned)
}

fn leader(c: &Cluster) -> Option<usize> {
    c.members
        .iter()
        .position(|m| mode(m.client).as_deref() == Some("leader"))
}

fn whole(c: &Cluster) -> bool {
    let modes: Vec<Option<String>> = c.members.iter().map(|m| mode(m.client)).collect();
    modes
        .iter()
        .all(|m| matches!(m.as_deref(), Some("leader" | "follower")))
        && modes
            .iter()
            .filter(|m| m.as_deref() == Some("leader"))
            .count()
            == 1
}

fn url(hosts: &str, own: &str, options: &str) -> String {
    let more = if options.is_empty() { "" } else { "?" };
    format!("zk://{hosts}/{own}{more}{options}")
}

fn store(cluster: &Cluster) -> Store<'_> {
    Store {
        name: "zookeeper",
        cluster,
        leader,
        whole,
        url,
    }
}

fn cluster() -> Option<Cluster> {
    Cluster::from_env(
        "TENURE_TEST_ZOOKEEPER_ENSEMBLE",
        "TENURE_TEST_ZOOKEEPER_ENSEMBLE_DIR",
        "s",
    )
}

#[test]
fn sigkill_of_the_leading_server_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = cluster() else {
        return;
    };
    store(&c).kill_the_leading_member(3);
}

#[test]
fn a_server_cut_off_or_frozen_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = cluster() else {
        return;
    };
    store(&c).cut_off_each_member();
}

/// Quorum traffic of a private 3-server ensemble, through a proxy in front
/// of each server's quorum and election ports that can cut one server off
/// from the others while it still answers its clients.
///
/// Each server's own configuration names its real ports, and the others'
/// proxies: every connection between two servers goes through the proxy
/// of the one it was dialed to, and says in its first bytes who dialed
/// it: the server id is the second 64-bit word an election connection
/// sends (after the protocol version), and in the learner's first packet
/// to its leader (FOLLOWERINFO: type, zxid, data length, then the id). A
/// cut silences every connection to the server's proxies and every one it
/// dialed to the others' (new ones too) until healed, then closes them.
mod quorum {
    use std::sync::Arc;

    use crate::cluster::peer_proxy::{Dialer, Identify};

    /// The server cut off: its index and its server id.
    pub type Cut = crate::cluster::peer_proxy::Cut<i64>;

    /// The dialer's id: the big-endian 64-bit word at offset `id_at` of
    /// what it sends first.
    pub fn id_at(at: usize) -> Identify<i64> {
        Arc::new(move |head: &[u8]| match head.get(at..at + 8) {
            Some(word) => {
                let mut id = [0u8; 8];
                id.copy_from_slice(word);
                Dialer::Known(Some(i64::from_be_bytes(id)))
            }
            None => Dialer::More,
        })
    }
}

/// A private 3-server ensemble whose quorum traffic goes through
/// [`cluster::peer_proxy`]s, its servers killed when dropped.
struct QuorumEnsemble {
    cluster: Cluster,
    cut: tokio::sync::watch::Sender<quorum::Cut>,
    _servers: Vec<common::Running>,
    rt: tokio::runtime::Runtime,
    _dir: tenure_testkit::TempDir,
}

/// Where Debian's ZooKeeper and a logging backend are (as in
/// scripts/servers.sh).
const ZK_CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

impl QuorumEnsemble {
    fn start() -> QuorumEnsemble {
        use tenure_testkit::free_port;
        let dir = tenure_testkit::TempDir::new("zk-quorum");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (cut, cut_rx) = tokio::sync::watch::channel(None);
        // Per server: client, quorum and election ports as it listens,
        // and the quorum and election ports of its proxies.
        let mut real = Vec::new();
        let mut proxied = Vec::new();
        for i in 0..3 {
            let (client, quorum_port, election) = (free_port(), free_port(), free_port());
            let mut via = Vec::new();
            // The learner's id is at offset 16 of FOLLOWERINFO; an
            // election connection's at offset 8.
            for (port, id_at) in [(quorum_port, 16), (election, 8)] {
                let listener = rt
                    .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                    .expect("bind a quorum proxy");
                via.push(listener.local_addr().expect("addr").port());
                let _guard = rt.enter();
                cluster::peer_proxy::proxy(
                    listener,
                    i,
                    SocketAddr::from(([127, 0, 0, 1], port)),
                    quorum::id_at(id_at),
                    cut_rx.clone(),
                );
            }
            real.push((client, quorum_port, election));
            proxied.push((via[0], via[1]));
        }
        let mut servers = Vec::new();
        let mut members = Vec::new();
        for (i, &(client, quorum_port, election)) in real.iter().enumerate() {
            let name = format!("q{}", i + 1);
            let home = dir.path().join(&name);
            std::fs::create_dir_all(home.join("data")).expect("server dir");
            std::fs::write(home.join("data/myid"), format!("{}\n", i + 1)).expect("myid");
            let mut cfg = format!(
                "tickTime=500\ninitLimit=10\nsyncLimit=8\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n\
                 dataDir={}\nclientPort={client}\nclientPortAddress=127.0.0.1\nforceSync=no\n\
                 maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\n",
                home.join("data").display()
            );
            for (j, &(q, e)) in proxied.iter().enumerate() {
                let (q, e) = if j == i {
                    (quorum_port, election)
                } else {
                    (q, e)
                };
                cfg.push_str(&format!("server.{}=127.0.0.1:{q}:{e}\n", j + 1));
            }
            std::fs::write(home.join("zoo.cfg"), cfg).expect("zoo.cfg");
            let log = std::fs::File::create(home.join("server.log")).expect("log");
            servers.push(common::Running::spawn(
                Command::new("java")
                    .args([
                        "-Xmx128m",
                        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                        "-cp",
                        ZK_CLASSPATH,
                        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    ])
                    .arg(home.join("zoo.cfg"))
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log),
            ));
            members.push(cluster::Member {
                name,
                client: SocketAddr::from(([127, 0, 0, 1], client)),
                dir: home,
            });
        }
        let ensemble = QuorumEnsemble {
            cluster: Cluster { members },
            cut,
            _servers: servers,
            rt,
            _dir: dir,
        };
        common::wait_for(Duration::from_secs(60), || {
            whole(&ensemble.cluster).then_some(())
        })
        .expect("the private ensemble serves under one leader");
        ensemble
    }

    /// Cuts server `i` off from the other two (both ways).
    fn cut_off(&self, i: usize) {
        self.cut.send_replace(Some((i, i as i64 + 1)));
    }

    fn heal(&self) {
        self.cut.send_replace(None);
    }
}

/// Each server of a private ensemble in turn partitioned from the other
/// two (its quorum traffic cut both ways) for 4 s while it still answers
/// its clients, tenure's among them (every server in their URL, a 1 s
/// request timeout). The partitioned server must stop serving within
/// `syncLimit` × `tickTime` (4 s in this private ensemble; checked: else the cut did nothing), the
/// fenced resource refuse no write, tokens rise, and a term lead once
/// healed. Until it stops serving, the partitioned server answers reads
/// from its own state, which may be stale: tenure acts only on the replies
/// to its writes, which no partitioned server can give.
#[test]
fn a_server_partitioned_from_its_quorum_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The shared ensemble is not used, but its variable says that
    // scripts/servers.sh installed ZooKeeper.
    if cluster().is_none() {
        return;
    }
    let ensemble = QuorumEnsemble::start();
    let s = store(&ensemble.cluster);
    let label = "zookeeper-cluster-partition";
    let own = common::unique(label);
    let url = url(&ensemble.cluster.hosts(), &own, "timeout=1s");
    let (mut e, candidates) = s.election(label, &url);
    let mut faults = Vec::new();
    let mut stale_read = None;
    for i in 0..3 {
        let name = ensemble.cluster.members[i].name.clone();
        let was = if leader(&ensemble.cluster) == Some(i) {
            "leading"
        } else {
            "following"
        };
        let readers = (was == "following" && stale_read.is_none())
            .then(|| TwoReaders::open(&ensemble.rt, &e.group, &ensemble.cluster, &own, i));
        let from = common::uptime();
        ensemble.cut_off(i);
        if let Some(readers) = &readers {
            stale_read = Some(readers.after_the_cut(&ensemble.rt));
        }
        let stopped = common::wait_for(Duration::from_secs(10), || {
            mode(ensemble.cluster.members[i].client)
                .is_none()
                .then_some(())
        });
        let held =
            Duration::from_secs(4).saturating_sub(Duration::from_secs_f64(common::uptime() - from));
        std::thread::sleep(held);
        ensemble.heal();
        assert!(
            stopped.is_some(),
            "{name} still served while cut off from its quorum: the partition did not take"
        );
        common::wait_for(Duration::from_secs(30), || {
            whole(&ensemble.cluster).then_some(())
        })
        .expect("the ensemble is whole again");
        std::thread::sleep(Duration::from_secs(2));
        faults.push(cluster::Fault {
            leaderless: None,
            what: format!("{name} ({was}) partitioned from its quorum for 4s"),
            from,
            to: common::uptime(),
        });
    }
    s.finish(&mut e, candidates, &faults);
    let (stale, newer) = stale_read.expect("a follower was partitioned");
    eprintln!(
        "zookeeper: a partitioned follower read a record written after the cut as {stale:?} \
         while the quorum had it at version (mzxid) {newer}"
    );
    assert!(
        stale.is_none_or(|v| v < newer),
        "the partitioned server read version {stale:?}, the quorum {newer}: it heard of a write made after the cut"
    );
}

/// A session on server `i` (opened before it is cut off) and one on
/// another server of the quorum, each reading a probe record of the
/// test's own, which the quorum's session writes after the cut.
struct TwoReaders {
    on_it: tenure_zookeeper::ZkStore,
    on_quorum: tenure_zookeeper::ZkStore,
    probe: tenure::GroupName,
}

impl TwoReaders {
    fn open(
        rt: &tokio::runtime::Runtime,
        group: &str,
        c: &Cluster,
        own: &str,
        i: usize,
    ) -> TwoReaders {
        let connect = |m: usize| {
            rt.block_on(tenure_zookeeper::ZkStore::connect(&url(
                &c.members[m].client.to_string(),
                own,
                "",
            )))
            .expect("connect to one server")
        };
        let probe = tenure::GroupName::new(format!("{group}-probe")).expect("group name");
        let on_it = connect(i);
        let on_quorum = connect((i + 1) % 3);
        TwoReaders {
            on_it,
            on_quorum,
            probe,
        }
    }

    /// Writes the probe through the quorum after the cut, then reads it
    /// through the partitioned server, which has heard of no write since
    /// (none, or an older version), and through the quorum (its
    /// version). Until it stops serving (`syncLimit` × `tickTime`, 4 s),
    /// the partitioned server still answers the session it had, from its
    /// own state: a read without `sync` is not linearizable.
    fn after_the_cut(&self, rt: &tokio::runtime::Runtime) -> (Option<u64>, u64) {
        use tenure::{LeaseStore, LeaseView};
        let now = tenure::WallTime::now();
        let record = tenure::LeaseRecord {
            holder: None,
            token: 1,
            term: Duration::from_secs(1),
            renewed_at: now,
            expires_at: now,
            metadata: tenure::Metadata::new(),
        };
        rt.block_on(async {
            let current = self
                .on_quorum
                .read(&self.probe)
                .await
                .expect("read the probe");
            self.on_quorum
                .compare_and_swap(&self.probe, current.map(|v| v.version), &record)
                .await
                .expect("the quorum takes a write")
        });
        let newer = version(rt, &self.on_quorum, &self.probe).expect("the quorum reads the probe");
        let stale = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(3), self.on_it.read(&self.probe)).await
        });
        let stale = stale
            .expect("the partitioned server still answers its session's reads")
            .expect("a read of the partitioned server")
            .map(|v| v.version.0);
        (stale, newer)
    }
}

/// The version (`mzxid`) of `group`'s record as `store` reads it.
fn version(
    rt: &tokio::runtime::Runtime,
    store: &tenure_zookeeper::ZkStore,
    group: &tenure::GroupName,
) -> Option<u64> {
    use tenure::LeaseView;
    let read = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(3), store.read(group)).await });
    Some(read.ok()?.ok()??.version.0)
}
