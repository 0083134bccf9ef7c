//! A TCP proxy in front of one member's peer port that can cut one member
//! off from the others while it still answers its clients. Each
//! connection's first bytes say who dialed it (the store's own protocol:
//! an HTTP header for etcd, a server id for ZooKeeper); a cut silences
//! every connection to the cut member's proxy and every one it dialed to
//! the others' (new ones too), as a partition does, until healed, and then
//! closes them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The member cut off: its index and its id as its connections give it.
pub type Cut<K> = Option<(usize, K)>;

/// What the first bytes of a connection tell.
pub enum Dialer<K> {
    /// Not enough yet: read more.
    More,
    /// The dialer's id, or `None` if the connection names none (a health
    /// probe).
    Known(Option<K>),
}

/// Reads a connection's first bytes and tells who dialed it.
pub type Identify<K> = Arc<dyn Fn(&[u8]) -> Dialer<K> + Send + Sync>;

/// The most first bytes read to learn who dialed.
const MAX_HEAD: usize = 64 * 1024;

/// Starts the proxy in front of member `index`'s port `target`, on
/// `listener`.
pub fn proxy<K>(
    listener: TcpListener,
    index: usize,
    target: SocketAddr,
    identify: Identify<K>,
    cut: watch::Receiver<Cut<K>>,
) where
    K: PartialEq + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            tokio::spawn(connection(
                inbound,
                index,
                target,
                identify.clone(),
                cut.clone(),
            ));
        }
    });
}

fn blocked<K: PartialEq>(cut: Option<&(usize, K)>, index: usize, from: Option<&K>) -> bool {
    cut.is_some_and(|(i, id)| *i == index || from == Some(id))
}

/// Waits while the cut blocks this connection (both sockets kept open and
/// unread: silence, as in a partition); the caller then closes it.
async fn silent_until_healed<K: PartialEq>(
    cut: &mut watch::Receiver<Cut<K>>,
    index: usize,
    from: Option<&K>,
) {
    while cut.changed().await.is_ok() && blocked(cut.borrow_and_update().as_ref(), index, from) {}
}

async fn connection<K: PartialEq>(
    mut inbound: TcpStream,
    index: usize,
    target: SocketAddr,
    identify: Identify<K>,
    mut cut: watch::Receiver<Cut<K>>,
) {
    let mut head = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let from = loop {
        if let Dialer::Known(from) = identify(&head) {
            break from;
        }
        if head.len() >= MAX_HEAD {
            break None;
        }
        match inbound.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    };
    if blocked(cut.borrow_and_update().as_ref(), index, from.as_ref()) {
        silent_until_healed(&mut cut, index, from.as_ref()).await;
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(target).await else {
        return;
    };
    if outbound.write_all(&head).await.is_err() {
        return;
    }
    let (mut client_rx, mut client_tx) = inbound.into_split();
    let (mut server_rx, mut server_tx) = outbound.into_split();
    let mut down = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            r = client_rx.read(&mut buf) => match r {
                Ok(n) if n > 0 => if server_tx.write_all(&buf[..n]).await.is_err() { return },
                _ => return,
            },
            r = server_rx.read(&mut down) => match r {
                Ok(n) if n > 0 => if client_tx.write_all(&down[..n]).await.is_err() { return },
                _ => return,
            },
            changed = cut.changed() => {
                if changed.is_err() {
                    return;
                }
                if blocked(cut.borrow_and_update().as_ref(), index, from.as_ref()) {
                    silent_until_healed(&mut cut, index, from.as_ref()).await;
                    return;
                }
            }
        }
    }
}
