//! A TCP proxy on loopback that a test can cut, to put one candidate out of
//! reach of a real server while the others still reach it, or make lose
//! the server's replies, to put a request's outcome in doubt.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

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
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.mode.send(Mode::Cut);
    }
}

impl TcpProxy {
    /// Starts a proxy on `127.0.0.1:0` to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(Mode::Forward);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if *mode_rx.borrow() == Mode::Cut {
                    drop(inbound);
                    continue;
                }
                let mode = mode_rx.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    pump(inbound, outbound, mode).await;
                });
            }
        });
        Ok(TcpProxy { addr, mode, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding: open connections go silent, new ones are refused.
    pub fn cut(&self) {
        let _ = self.mode.send(Mode::Cut);
    }

    /// Forwards requests to the server but throws its replies away, on open
    /// connections and new ones, until [`heal`](TcpProxy::heal): the server
    /// acts on a request whose client never hears back, as when a reply is
    /// lost in the network.
    pub fn drop_replies(&self) {
        let _ = self.mode.send(Mode::DropReplies);
    }

    /// Forwards again; connections that were cut or lost replies are
    /// closed, so clients reconnect.
    pub fn heal(&self) {
        let _ = self.mode.send(Mode::Forward);
    }
}

/// Carries one connection's bytes both ways as the mode says, until either
/// side closes, or the proxy heals a connection it disturbed.
async fn pump(inbound: TcpStream, outbound: TcpStream, mut mode: watch::Receiver<Mode>) {
    let (mut client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, mut server_tx) = outbound.into_split();
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    // Whether this connection lost bytes or went silent: it cannot carry a
    // protocol on after that, so it is closed when the proxy heals.
    let mut disturbed = false;
    loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Cut => {
                // Keep both sockets open and unread until healed: the
                // client sees silence, not a reset, like a partition.
                disturbed = true;
                if mode.changed().await.is_err() {
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
        tokio::select! {
            r = client_rx.read(&mut up) => match r {
                Ok(n) if n > 0 => {
                    if server_tx.write_all(&up[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            r = server_rx.read(&mut down) => match r {
                Ok(n) if n > 0 => {
                    if now == Mode::DropReplies {
                        disturbed = true;
                    } else if client_tx.write_all(&down[..n]).await.is_err() {
                        return;
                    }
                }
                _ => return,
            },
            changed = mode.changed() => {
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
