//! `tenure run` on a 3-member etcd cluster (`scripts/servers.sh` starts it
//! on loopback): the cluster's own fail-over under three candidates with a
//! 2 s term, each CMD writing to a fenced resource (see `cluster/mod.rs`).
//!
//! * SIGKILL of the leading etcd member while tenure's leader renews,
//!   restarted on its data 3 s later, three times;
//! * each member in turn cut off from tenure's clients (its client proxy
//!   goes silent) and frozen (SIGSTOP: silent to its peers too, so a
//!   leading member loses its leadership);
//! * each member of a private cluster in turn partitioned from its peers
//!   (a proxy in front of each member's peer port cuts its traffic both
//!   ways) while it still answers its clients, tenure's among them: it must
//!   stop serving linearizable reads (else the cut did not take).
//!
//! All check that the resource never saw a lower token after a higher
//! one (never two valid terms, no token back), that CMD tokens rose, and
//! that a term leads once the cluster is whole, and, after a kill, that
//! tenure's term kept if the cluster led again fast enough for a retried
//! renewal (0.41 s at a 2 s term, a conservative bound: etcd, electing
//! after a 1 s timeout, never meets it); and print,
//! for each fault, the longest interval without a write (the gap with no
//! valid term) and whether tenure's term survived it (docs/benchmarks.md
//! has the figures).
#![cfg(feature = "etcd")]

mod cluster;
mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use cluster::{Cluster, Store};

/// The tests share one cluster: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// (member index, its member id, the leader it names) of every member
/// that answered `etcdctl endpoint status`.
fn statuses(c: &Cluster) -> Vec<(usize, u64, u64)> {
    let endpoints: Vec<String> = c
        .members
        .iter()
        .map(|m| format!("http://{}", m.client))
        .collect();
    // A dead member would hold every poll for the dial timeout.
    let asked: Vec<&str> = endpoints
        .iter()
        .zip(&c.members)
        .filter(|(_, m)| !m.known_dead())
        .map(|(e, _)| e.as_str())
        .collect();
    let Ok(out) = Command::new("etcdctl")
        .args([
            &format!("--endpoints={}", asked.join(",")),
            "--dial-timeout=1s",
            "--command-timeout=1s",
            "endpoint",
            "status",
            "-w",
            "json",
        ])
        .output()
    else {
        return Vec::new();
    };
    // A member that did not answer is missing from the list (etcdctl then
    // exits 1): the others are still there.
    let Ok(list) = serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|v| {
            let i = endpoints.iter().position(|e| v["Endpoint"] == e.as_str())?;
            let id = v["Status"]["header"]["member_id"].as_u64()?;
            let leader = v["Status"]["leader"].as_u64()?;
            Some((i, id, leader))
        })
        .collect()
}

fn leader(c: &Cluster) -> Option<usize> {
    statuses(c)
        .into_iter()
        .find(|&(_, id, leader)| leader != 0 && id == leader)
        .map(|(i, _, _)| i)
}

fn whole(c: &Cluster) -> bool {
    let s = statuses(c);
    s.len() == 3
        && s.iter().all(|&(_, _, l)| l != 0 && l == s[0].2)
        && s.iter().any(|&(_, id, l)| id == l)
}

fn url(hosts: &str, own: &str, options: &str) -> String {
    let more = if options.is_empty() { "" } else { "&" };
    format!("etcd://{hosts}?prefix={own}/{more}{options}")
}

fn store(cluster: &Cluster) -> Store<'_> {
    Store {
        name: "etcd",
        cluster,
        leader,
        whole,
        url,
    }
}

fn cluster() -> Option<Cluster> {
    common::required_tool("etcdctl")?;
    Cluster::from_env(
        "TENURE_TEST_ETCD_CLUSTER",
        "TENURE_TEST_ETCD_CLUSTER_DIR",
        "m",
    )
}

#[test]
fn sigkill_of_the_leading_member_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = cluster() else {
        return;
    };
    store(&c).kill_the_leading_member(3);
}

#[test]
fn a_member_cut_off_or_frozen_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = cluster() else {
        return;
    };
    store(&c).cut_off_each_member();
}

/// The peer traffic of a private 3-member cluster goes, through a proxy in front of
/// each member's peer port that can cut one member off from the others
/// while it still answers its clients.
///
/// etcd members talk over HTTP/1.1 connections that the sender or the
/// receiver of a message may have dialed, so a member's peer traffic is
/// every connection to its own peer port plus every connection it dialed
/// to another's: those carry its id in their first request's
/// `X-Server-From` header. A cut silences both kinds (new ones too) until
/// healed, then closes them; connections without the header (health probes) to the
/// others pass.
/// (An id as etcd writes it, hex.)
mod peers {
    use std::sync::Arc;

    use crate::cluster::peer_proxy::{Dialer, Identify};

    /// The member cut off: its index and its id.
    pub type Cut = crate::cluster::peer_proxy::Cut<String>;

    /// The id in `X-Server-From` of the first request's headers.
    pub fn sender() -> Identify<String> {
        Arc::new(|head: &[u8]| {
            if !head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Dialer::More;
            }
            let text = String::from_utf8_lossy(head);
            Dialer::Known(text.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("x-server-from")
                    .then(|| value.trim().to_owned())
            }))
        })
    }
}

/// A private 3-member cluster whose peer traffic goes through
/// [`cluster::peer_proxy`]s, its members killed when dropped.
struct PeerCluster {
    cluster: Cluster,
    cut: tokio::sync::watch::Sender<peers::Cut>,
    _members: Vec<common::Running>,
    _rt: tokio::runtime::Runtime,
    _dir: tenure_testkit::TempDir,
}

impl PeerCluster {
    fn start() -> PeerCluster {
        use tenure_testkit::free_port;
        let dir = tenure_testkit::TempDir::new("etcd-peers");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (cut, cut_rx) = tokio::sync::watch::channel(None);
        // (client, peer as it listens, peer as the others reach it).
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut advertised = Vec::new();
        for (i, &(_, peer)) in ports.iter().enumerate() {
            let listener = rt
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .expect("bind a peer proxy");
            advertised.push(listener.local_addr().expect("addr"));
            let _guard = rt.enter();
            cluster::peer_proxy::proxy(
                listener,
                i,
                SocketAddr::from(([127, 0, 0, 1], peer)),
                peers::sender(),
                cut_rx.clone(),
            );
        }
        let initial: Vec<String> = advertised
            .iter()
            .enumerate()
            .map(|(i, a)| format!("p{}=http://{a}", i + 1))
            .collect();
        let token = format!("tenure-peers-{:x}", tenure_testkit::unique_suffix());
        let mut members = Vec::new();
        let mut listed = Vec::new();
        for (i, &(client, peer)) in ports.iter().enumerate() {
            let name = format!("p{}", i + 1);
            let data = dir.path().join(&name);
            std::fs::create_dir_all(&data).expect("member dir");
            let log = std::fs::File::create(data.join("server.log")).expect("log");
            members.push(common::Running::spawn(
                Command::new("etcd")
                    .args(["--name", &name, "--data-dir"])
                    .arg(data.join("data"))
                    .arg(format!("--listen-client-urls=http://127.0.0.1:{client}"))
                    .arg(format!("--advertise-client-urls=http://127.0.0.1:{client}"))
                    .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                    .arg(format!(
                        "--initial-advertise-peer-urls=http://{}",
                        advertised[i]
                    ))
                    .arg(format!("--initial-cluster={}", initial.join(",")))
                    .arg(format!("--initial-cluster-token={token}"))
                    .arg("--initial-cluster-state=new")
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log),
            ));
            listed.push(cluster::Member {
                name,
                client: SocketAddr::from(([127, 0, 0, 1], client)),
                dir: data,
            });
        }
        let peer_cluster = PeerCluster {
            cluster: Cluster { members: listed },
            cut,
            _members: members,
            _rt: rt,
            _dir: dir,
        };
        common::wait_for(Duration::from_secs(30), || {
            whole(&peer_cluster.cluster).then_some(())
        })
        .expect("the private cluster serves under one leader");
        peer_cluster
    }

    /// Cuts member `i` off from the other two (both ways).
    fn cut_off(&self, i: usize) {
        let (index, id, _) = statuses(&self.cluster)
            .into_iter()
            .find(|&(index, _, _)| index == i)
            .expect("the member answers");
        self.cut.send_replace(Some((index, format!("{id:x}"))));
    }

    fn heal(&self) {
        self.cut.send_replace(None);
    }

    /// Whether member `i` serves a linearizable read on its own.
    fn serves(&self, i: usize) -> bool {
        Command::new("etcdctl")
            .arg(format!(
                "--endpoints=http://{}",
                self.cluster.members[i].client
            ))
            .args([
                "--dial-timeout=1s",
                "--command-timeout=1s",
                "get",
                "tenure-probe",
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

/// Each member of a private cluster in turn partitioned from the other
/// two (its peer traffic cut both ways) for 3 s while it still answers
/// its clients, tenure's among them (they reach every member directly,
/// with a 1 s request timeout). A partitioned member must stop serving
/// linearizable reads (checked: else the cut did nothing), the fenced
/// resource refuse no write, tokens rise, and a term lead once healed.
#[test]
fn a_member_partitioned_from_its_quorum_never_gives_two_terms() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The shared cluster is not used, but its variable says that
    // scripts/servers.sh installed etcd and etcdctl.
    if cluster().is_none() {
        return;
    }
    let pc = PeerCluster::start();
    let s = store(&pc.cluster);
    let label = "etcd-cluster-partition";
    let own = common::unique(label);
    let url = url(&pc.cluster.hosts(), &own, "timeout=1s");
    let (mut e, candidates) = s.election(label, &url);
    let mut faults = Vec::new();
    for i in 0..3 {
        let was = if leader(&pc.cluster) == Some(i) {
            "leading"
        } else {
            "following"
        };
        let from = common::uptime();
        pc.cut_off(i);
        // etcd's election timeout (1 s) and a read's 1 s bound.
        let refused = common::wait_for(Duration::from_secs(10), || (!pc.serves(i)).then_some(()));
        std::thread::sleep(
            Duration::from_secs(3).saturating_sub(Duration::from_secs_f64(common::uptime() - from)),
        );
        pc.heal();
        assert!(
            refused.is_some(),
            "{} still served linearizable reads while cut off from its peers: the partition did not take",
            pc.cluster.members[i].name
        );
        common::wait_for(Duration::from_secs(30), || whole(&pc.cluster).then_some(()))
            .expect("the cluster is whole again");
        std::thread::sleep(Duration::from_secs(2));
        faults.push(cluster::Fault {
            leaderless: None,
            what: format!(
                "{} ({was}) partitioned from its peers for 3s",
                pc.cluster.members[i].name
            ),
            from,
            to: common::uptime(),
        });
    }
    s.finish(&mut e, candidates, &faults);
}
