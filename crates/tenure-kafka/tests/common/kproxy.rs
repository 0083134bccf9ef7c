//! A Kafka-protocol-aware TCP proxy on loopback, to cut one client off from
//! part of a broker: the group coordinator only (the partial partition in
//! which a leader keeps producing and reading while its group session
//! expires), or everything.
//!
//! Clients are told apart by their `client.id`, which every Kafka request
//! header carries. librdkafka talks to the group coordinator on a
//! connection of its own (its "GroupCoordinator" logical broker), so
//! stalling every connection that carries a group request (JoinGroup,
//! Heartbeat, LeaveGroup, SyncGroup, OffsetCommit, OffsetFetch) cuts the
//! coordinator alone, while fetches and produces go on. A stalled
//! connection stays open and silent, as in a network partition; healing
//! closes it so the client reconnects.
//!
//! The broker must advertise the proxy's address, so that every
//! connection, not only the bootstrap one, goes through it.
//!
//! It can also cap the Fetch version the broker announces
//! ([`KafkaProxy::cap_fetch`]): tansu answers a fetch for a topic it no
//! longer has with leader hints that name no topic, on which librdkafka
//! 2.12 crashes when it fetches by topic id (Fetch 13 and later); capped at
//! 12, it fetches by name.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Group-coordinator API keys.
const GROUP_APIS: &[i16] = &[8, 9, 11, 12, 13, 14];

/// The Heartbeat API key.
const HEARTBEAT: i16 = 12;
/// The ApiVersions API key.
const API_VERSIONS: i16 = 18;
/// The Fetch API key.
const FETCH: i16 = 1;

#[derive(Default)]
struct Cuts {
    /// Clients cut off from the group coordinator.
    group: HashSet<String>,
    /// Clients cut off from everything.
    all: HashSet<String>,
    /// Clients whose group heartbeats the proxy answers itself.
    zombie: HashSet<String>,
    /// The highest Fetch version announced to clients.
    fetch_cap: Option<i16>,
}

/// The proxy; dropping it stops accepting and closes every connection.
pub struct KafkaProxy {
    listener_port: u16,
    cuts: Arc<Mutex<Cuts>>,
    changed: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.changed.send_modify(|n| *n += 1);
    }
}

impl KafkaProxy {
    /// Binds the proxy's port now (so a broker can be told to advertise it)
    /// and forwards to `target` once [`forward`](KafkaProxy::forward) runs.
    pub async fn bind() -> (TcpListener, u16) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    }

    /// Starts forwarding connections accepted on `listener` to `target`.
    pub fn forward(listener: TcpListener, target: SocketAddr) -> KafkaProxy {
        let listener_port = listener.local_addr().unwrap().port();
        let cuts = Arc::new(Mutex::new(Cuts::default()));
        let (changed, _) = watch::channel(0u64);
        let (c, tx) = (cuts.clone(), changed.clone());
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let (c, rx) = (c.clone(), tx.subscribe());
                tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(target).await {
                        connection(inbound, outbound, c, rx).await;
                    }
                });
            }
        });
        KafkaProxy {
            listener_port,
            cuts,
            changed,
            task,
        }
    }

    /// The address clients (and the broker's advertised listener) use.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.listener_port)
    }

    /// Cuts client `id` off from the group coordinator only.
    pub fn cut_group(&self, id: &str) {
        self.cuts.lock().unwrap().group.insert(id.to_owned());
        self.changed.send_modify(|n| *n += 1);
    }

    /// Cuts client `id` off from the broker entirely.
    pub fn cut_all(&self, id: &str) {
        self.cuts.lock().unwrap().all.insert(id.to_owned());
        self.changed.send_modify(|n| *n += 1);
    }

    /// Announces at most Fetch version `max` to clients that connect from
    /// now on.
    pub fn cap_fetch(&self, max: i16) {
        self.cuts.lock().unwrap().fetch_cap = Some(max);
    }

    /// Answers client `id`'s group heartbeats with success without passing
    /// them on: the coordinator expires its session and gives its
    /// partitions away, while the client believes it is still a member (a
    /// stale coordinator's view), and keeps producing and reading.
    pub fn zombie(&self, id: &str) {
        self.cuts.lock().unwrap().zombie.insert(id.to_owned());
        self.changed.send_modify(|n| *n += 1);
    }

    /// Lets client `id` through again; its stalled connections close.
    pub fn heal(&self, id: &str) {
        let mut c = self.cuts.lock().unwrap();
        c.group.remove(id);
        c.all.remove(id);
        c.zombie.remove(id);
        drop(c);
        self.changed.send_modify(|n| *n += 1);
    }
}

/// What one connection has shown about itself.
#[derive(Default, Clone)]
struct Seen {
    client: Option<String>,
    group: bool,
}

fn is_cut(cuts: &Mutex<Cuts>, seen: &Seen) -> bool {
    let Some(client) = &seen.client else {
        return false;
    };
    let c = cuts.lock().unwrap();
    c.all.contains(client) || (seen.group && c.group.contains(client))
}

async fn connection(
    inbound: TcpStream,
    outbound: TcpStream,
    cuts: Arc<Mutex<Cuts>>,
    changed: watch::Receiver<u64>,
) {
    let (mut client_r, mut client_w) = inbound.into_split();
    let (mut server_r, mut server_w) = outbound.into_split();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Responses the proxy makes up, written between the broker's.
    let (replies, mut made_up) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    // ApiVersions requests in flight: correlation id and version.
    let api_versions = Arc::new(Mutex::new(Vec::<(i32, i16)>::new()));
    let replies_keep = replies.clone();

    // Client to broker, one request at a time, reading each header.
    let up = {
        let (seen, cuts, stalled, mut changed) =
            (seen.clone(), cuts.clone(), stalled.clone(), changed.clone());
        let replies = replies_keep.clone();
        let api_versions = api_versions.clone();
        async move {
            loop {
                let frame = read_frame(&mut client_r).await?;
                let h = header(&frame[4..]);
                let snapshot = {
                    let mut s = seen.lock().unwrap();
                    if let Some(h) = &h {
                        s.group |= GROUP_APIS.contains(&h.api);
                        if s.client.is_none() {
                            s.client.clone_from(&h.client);
                        }
                    }
                    s.clone()
                };
                if let Some(h) = h.as_ref().filter(|h| h.api == API_VERSIONS) {
                    api_versions
                        .lock()
                        .unwrap()
                        .push((h.correlation, h.version));
                }
                if let (Some(h), Some(client)) = (&h, &snapshot.client) {
                    let zombie = cuts.lock().unwrap().zombie.contains(client);
                    if zombie && h.api == HEARTBEAT {
                        if let Some(reply) = heartbeat_ok(h) {
                            replies.send(reply).await.map_err(std::io::Error::other)?;
                            continue;
                        }
                    }
                }
                if stalled.load(std::sync::atomic::Ordering::Acquire) || is_cut(&cuts, &snapshot) {
                    stalled.store(true, std::sync::atomic::Ordering::Release);
                    stall_until_healed(&cuts, &seen, &mut changed).await;
                    return Ok::<(), std::io::Error>(());
                }
                server_w.write_all(&frame).await?;
            }
        }
    };
    // Broker to client: whole response frames, and the made-up ones,
    // through one channel so neither lands inside the other.
    let from_broker = {
        let replies = replies.clone();
        let cuts = cuts.clone();
        async move {
            loop {
                let mut frame = read_frame(&mut server_r).await?;
                let correlation = frame
                    .get(4..8)
                    .map(|b| i32::from_be_bytes(b.try_into().unwrap()));
                let request = {
                    let mut inflight = api_versions.lock().unwrap();
                    let i = inflight.iter().position(|(c, _)| Some(*c) == correlation);
                    i.map(|i| inflight.remove(i))
                };
                let cap = cuts.lock().unwrap().fetch_cap;
                if let (Some((_, version)), Some(cap)) = (request, cap) {
                    cap_version(&mut frame[8..], version, FETCH, cap);
                }
                if replies.send(frame).await.is_err() {
                    return Ok::<(), std::io::Error>(());
                }
            }
        }
    };
    drop(replies_keep);
    // Held back while this connection is cut.
    let down = {
        let (seen, cuts, stalled, mut changed) = (seen.clone(), cuts, stalled, changed);
        async move {
            while let Some(frame) = made_up.recv().await {
                let snapshot = seen.lock().unwrap().clone();
                if stalled.load(std::sync::atomic::Ordering::Acquire) || is_cut(&cuts, &snapshot) {
                    stalled.store(true, std::sync::atomic::Ordering::Release);
                    stall_until_healed(&cuts, &seen, &mut changed).await;
                    return Ok::<(), std::io::Error>(());
                }
                client_w.write_all(&frame).await?;
            }
            Ok(())
        }
    };
    // Either direction ending (an error, a close, or a healed stall)
    // closes both sockets.
    tokio::select! {
        _ = up => {}
        _ = from_broker => {}
        _ = down => {}
    }
}

async fn stall_until_healed(
    cuts: &Mutex<Cuts>,
    seen: &Mutex<Seen>,
    changed: &mut watch::Receiver<u64>,
) {
    loop {
        let snapshot = seen.lock().unwrap().clone();
        if !is_cut(cuts, &snapshot) {
            return;
        }
        if changed.changed().await.is_err() {
            // The proxy is gone: hold the connection until the task ends.
            std::future::pending::<()>().await;
        }
    }
}

/// A request header.
struct Header {
    api: i16,
    version: i16,
    correlation: i32,
    client: Option<String>,
}

/// Reads one whole frame, its 4-byte big-endian size first (a negative
/// size reads as empty): the bytes as they came, size included.
async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    r.read_exact(&mut size).await?;
    let len = i32::from_be_bytes(size).max(0) as usize;
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&size);
    r.read_exact(&mut frame[4..]).await?;
    Ok(frame)
}

/// The header of a request frame (without its size).
fn header(frame: &[u8]) -> Option<Header> {
    let api = i16::from_be_bytes(frame.get(0..2)?.try_into().ok()?);
    let version = i16::from_be_bytes(frame.get(2..4)?.try_into().ok()?);
    let correlation = i32::from_be_bytes(frame.get(4..8)?.try_into().ok()?);
    // client_id is a nullable INT16-length string in every header version.
    let len = i16::from_be_bytes(frame.get(8..10)?.try_into().ok()?);
    let client = if len < 0 {
        None
    } else {
        let bytes = frame.get(10..10 + len as usize)?;
        Some(String::from_utf8_lossy(bytes).into_owned())
    };
    Some(Header {
        api,
        version,
        correlation,
        client,
    })
}

/// Lowers the highest version announced for `api` to `cap` in an
/// ApiVersions response body (after the correlation id) of `version`,
/// in place: every field rewritten has a fixed size.
fn cap_version(body: &mut [u8], version: i16, api: i16, cap: i16) -> Option<()> {
    let mut at = 2; // error_code
    let count = if version >= 3 {
        let (n, used) = uvarint(body.get(at..)?)?;
        at += used;
        n.checked_sub(1)? as usize
    } else {
        let n = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
        at += 4;
        n.max(0) as usize
    };
    for _ in 0..count {
        let key = i16::from_be_bytes(body.get(at..at + 2)?.try_into().ok()?);
        let max_at = at + 4;
        if key == api {
            let max = i16::from_be_bytes(body.get(max_at..max_at + 2)?.try_into().ok()?);
            body.get_mut(max_at..max_at + 2)?
                .copy_from_slice(&max.min(cap).to_be_bytes());
        }
        at += 6;
        if version >= 3 {
            // Tagged fields: a count, then (tag, size, bytes) each.
            let (tags, used) = uvarint(body.get(at..)?)?;
            at += used;
            for _ in 0..tags {
                let (_, used) = uvarint(body.get(at..)?)?;
                at += used;
                let (size, used) = uvarint(body.get(at..)?)?;
                at += used + size as usize;
            }
        }
    }
    Some(())
}

fn uvarint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A successful Heartbeat response to `h` (versions 0 to 3, the ones
/// librdkafka sends; newer ones are flexible and not faked).
fn heartbeat_ok(h: &Header) -> Option<Vec<u8>> {
    let mut body = h.correlation.to_be_bytes().to_vec();
    match h.version {
        0 => {}
        1..=3 => body.extend_from_slice(&0i32.to_be_bytes()),
        _ => return None,
    }
    body.extend_from_slice(&0i16.to_be_bytes());
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    Some(frame)
}
