//! A TCP proxy on loopback that a test can cut, to put one candidate out of
//! reach of a real server while the others still reach it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards connections from a local port to `target` until
/// [`cut`](TcpProxy::cut): then every open connection stops forwarding (it
/// hangs, as a network partition does) and new ones are dropped, until
/// [`heal`](TcpProxy::heal).
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    cut_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.cut_tx.send(true);
    }
}

impl TcpProxy {
    /// Starts a proxy on `127.0.0.1:0` to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let (cut_tx, cut_rx) = watch::channel(false);
        let flag = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if flag.load(Ordering::Acquire) {
                    drop(inbound);
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                let mut heal_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let mut inbound = inbound;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = async { cut_rx.wait_for(|cut| *cut).await.is_ok() } => {
                            // Stop forwarding but keep both sockets open
                            // until healed: the client sees silence, not a
                            // reset, like a partition.
                            let _ = async { heal_rx.wait_for(|cut| !*cut).await.is_ok() }.await;
                            let _ = inbound.shutdown().await;
                        }
                    }
                });
            }
        });
        Ok(TcpProxy {
            addr,
            cut,
            cut_tx,
            task,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding: open connections go silent, new ones are refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        let _ = self.cut_tx.send(true);
    }

    /// Forwards again; connections that were cut are closed, so clients
    /// reconnect.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::Release);
        let _ = self.cut_tx.send(false);
    }
}
