//! The polled feed's look-back for rows committed late, on a slow link
//! (every reply 700 ms late, so each poll takes 700 ms instead of the
//! configured 100 ms): the look-back still comes about once a second (by
//! the clock, not every tenth poll, which was every 7 s here and missed a
//! row committed 1.5 s late on a busy table nearly every time).

mod common;

use std::time::Duration;

use common::{raw, server_addr, url};
use mysql_async::prelude::Queryable;
use tenure::LeaseView;
use tenure_mysql::MysqlStore;
use tenure_testkit as testkit;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A proxy that holds every chunk of the server's replies for `delay`.
async fn slow_proxy(upstream: String, delay: Duration) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let Ok(n) = sr.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    tokio::time::sleep(delay).await;
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Seen to fail before (3 runs of 3: the look-back counted polls).
#[tokio::test(flavor = "multi_thread")]
async fn a_row_committed_1_5_s_late_reaches_a_slow_feed_on_a_busy_table() {
    let Some(url) = url() else { return };
    let name = format!("tenure_late_slow_{:x}", testkit::unique_suffix());
    let sep = if url.contains('?') { '&' } else { '?' };
    let direct = format!("{url}{sep}table={name}");
    let writer = MysqlStore::connect(&direct).await.unwrap();
    let proxy = slow_proxy(server_addr(&url), Duration::from_millis(700)).await;
    let slow = direct.replace(&server_addr(&url), &proxy.to_string());
    let follower = MysqlStore::connect(&format!("{slow}&timeout=30s&poll=100ms"))
        .await
        .unwrap();
    let mut feed = follower.watch().await.unwrap().expect("a store-wide feed");
    // A busy table: a write every 100 ms keeps the feed's cursor at the
    // server's clock.
    let busy = testkit::unique_group("my-busy");
    let w = writer.clone();
    let b = busy.clone();
    let ticker = tokio::spawn(async move {
        let mut v = testkit::applied(&w, &b, None, &testkit::held_by("a", 1)).await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            v = testkit::applied(&w, &b, Some(v), &testkit::held_by("a", 1)).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let late = testkit::unique_group("my-late-slow");
    let record = testkit::held_by("a", 7);
    let mut db = raw(&url).await;
    db.exec_drop(
        format!(
            "INSERT INTO {name} (group_name, version, record) \
             VALUES (?, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED) - 1500000, ?)"
        ),
        (late.as_str().as_bytes(), record.encode()),
    )
    .await
    .unwrap();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match feed.next().await {
                Some(tenure::store::Change::Written { group, current }) if group == late => {
                    return Some(current);
                }
                Some(tenure::store::Change::Resync) => return None,
                Some(_) => {}
                None => return None,
            }
        }
    })
    .await;
    ticker.abort();
    let _ = db.query_drop(format!("DROP TABLE {name}")).await;
    assert!(
        matches!(found, Ok(Some(_))),
        "the row committed 1.5 s late was never reported by the feed: {found:?}"
    );
}
