//! A TCP proxy on loopback that a test can cut, to put one candidate out of
//! reach of a real server while the others still reach it, or make lose
//! the server's replies, to put a request's outcome in doubt.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the bytes it gets, and how many cuts there
/// have been: a connection whose task slept through a cut and its heal
/// (the two sent back to back, before the task ran) still learns that it
/// was cut, from the count, and is closed like any other cut connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Setting {
    mode: Mode,
    cuts: u64,
}

/// What the proxy does with the bytes it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Silence both ways; new connections are dropped.
    Cut,
    /// Requests go through; replies are read and thrown away.
    DropReplies,
}

/// Forwards connections from a local port to `target` until
/// [`cut`](TcpProxy::cut): then every open connection stops forwarding (it
/// hangs, as a network partition does) and new ones are dropped, until
/// [`heal`](TcpProxy::heal). [`drop_replies`](TcpProxy::drop_replies)
/// instead lets requests through and loses the replies.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    setting: watch::Sender<Setting>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

impl TcpProxy {
    /// Starts a proxy on `127.0.0.1:0` to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (setting, setting_rx) = watch::channel(Setting {
            mode: Mode::Forward,
            cuts: 0,
        });
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if setting_rx.borrow().mode == Mode::Cut {
                    drop(inbound);
                    continue;
                }
                let setting = setting_rx.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    pump(inbound, outbound, setting).await;
                });
            }
        });
        Ok(TcpProxy {
            addr,
            setting,
            task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding: open connections go silent, new ones are refused.
    pub fn cut(&self) {
        self.setting.send_modify(|s| {
            s.mode = Mode::Cut;
            s.cuts = s.cuts.wrapping_add(1);
        });
    }

    /// Forwards requests to the server but throws its replies away, on open
    /// connections and new ones, until [`heal`](TcpProxy::heal): the server
    /// acts on a request whose client never hears back, as when a reply is
    /// lost in the network.
    pub fn drop_replies(&self) {
        self.setting.send_modify(|s| s.mode = Mode::DropReplies);
    }

    /// Forwards again; connections that were cut or lost replies are
    /// closed, so clients reconnect.
    pub fn heal(&self) {
        self.setting.send_modify(|s| s.mode = Mode::Forward);
    }
}

/// Carries one connection's bytes both ways as the setting says, until
/// either side closes, or the proxy heals a connection it disturbed.
async fn pump(inbound: TcpStream, outbound: TcpStream, mut setting: watch::Receiver<Setting>) {
    let (mut client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, mut server_tx) = outbound.into_split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    // The cuts this connection has seen: one more in the setting means it
    // was cut, even if it never saw the mode say so.
    let mut cuts_seen = setting.borrow_and_update().cuts;
    // Whether this connection lost bytes or went silent: it cannot carry a
    // protocol on after that, so it is closed when the proxy heals.
    let mut disturbed = false;
    loop {
        let now = *setting.borrow_and_update();
        if now.cuts != cuts_seen {
            cuts_seen = now.cuts;
            disturbed = true;
        }
        match now.mode {
            Mode::Cut => {
                // Keep both sockets open and unread until healed: the
                // client sees silence, not a reset, like a partition.
                if setting.changed().await.is_err() {
                    return;
                }
                continue;
            }
            Mode::Forward if disturbed => {
                let _ = client_tx.shutdown().await;
                return;
            }
            _ => {}
        }
        // Bytes read after a cut are lost, as in a partition: the
        // connection closes on the heal anyway.
        let cut_since = |setting: &watch::Receiver<Setting>| setting.borrow().cuts != cuts_seen;
        tokio::select! {
            r = client_rx.read(&mut up) => match r {
                Ok(n) if n > 0 => {
                    if cut_since(&setting) {
                        continue;
                    }
                    if server_tx.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            r = server_rx.read(&mut down) => match r {
                Ok(n) if n > 0 => {
                    if cut_since(&setting) {
                        continue;
                    }
                    if now.mode == Mode::DropReplies {
                        disturbed = true;
                    } else if client_tx.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            changed = setting.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// A loopback port whose every connection is handed to a function on a
/// task of its own, until dropped: the front of a test's HTTP fault proxy
/// (which must see whole requests, unlike [`TcpProxy`]), forwarding to
/// the server at [`upstream`](HttpFront::upstream).
#[derive(Debug)]
pub struct HttpFront {
    addr: SocketAddr,
    upstream: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HttpFront {
    /// Listens on `127.0.0.1:0` and calls `serve(connection, upstream)`
    /// for each connection, where `upstream` is the `host:port` of
    /// `upstream_url` (`http://host:port`, a trailing `/` allowed).
    ///
    /// # Panics
    ///
    /// If `upstream_url` is not `http://` and a socket address, or no
    /// loopback port is free.
    pub async fn start<F, Fut>(upstream_url: &str, serve: F) -> HttpFront
    where
        F: Fn(TcpStream, SocketAddr) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let upstream: SocketAddr = upstream_url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("upstream host:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                tokio::spawn(serve(connection, upstream));
            }
        });
        HttpFront {
            addr,
            upstream,
            task,
        }
    }

    /// Where clients send their requests: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server requests are forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback, for the proxy to forward to.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n @ 1..) = c.read(&mut buf).await {
                        if c.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(c: &mut TcpStream) -> usize {
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        c.read(&mut buf).await.unwrap_or(0)
    }

    /// A proxy to an echo server and a connection through it that echoes.
    async fn connected() -> (TcpProxy, TcpStream) {
        let proxy = TcpProxy::start(echo().await).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c).await, 4);
        (proxy, c)
    }

    /// Whether the proxy closes `c` within ten seconds (no bytes first).
    async fn closed_soon(c: &mut TcpStream) -> bool {
        let mut buf = [0u8; 4];
        let read = tokio::time::timeout(std::time::Duration::from_secs(10), c.read(&mut buf)).await;
        matches!(read, Ok(Ok(0) | Err(_)))
    }

    #[tokio::test]
    async fn a_cut_healed_before_the_connection_looked_still_closes_it() {
        let (proxy, mut c) = connected().await;
        // Back to back, without a yield: the connection's task never sees
        // the mode say Cut.
        proxy.cut();
        proxy.heal();
        assert!(
            closed_soon(&mut c).await,
            "closed on the heal, not forwarding"
        );
        // New connections forward again.
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut fresh).await, 4);
    }

    #[tokio::test]
    async fn bytes_sent_during_a_cut_never_arrive() {
        let (proxy, mut c) = connected().await;
        proxy.cut();
        c.write_all(b"lost").await.unwrap();
        let mut buf = [0u8; 4];
        let silent =
            tokio::time::timeout(std::time::Duration::from_millis(300), c.read(&mut buf)).await;
        assert!(silent.is_err(), "no echo during the cut: {silent:?}");
        proxy.heal();
        assert!(closed_soon(&mut c).await, "closed on the heal");
    }
}
