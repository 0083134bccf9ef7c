//! A liveness probe for a leader: `/healthz` answers 500 while this process
//! believes it leads on a term past its deadline (it is wedged) or its
//! elector gave up for good, else 200; `/leader` says who leads. Wire the
//! probe to the supervisor (Kubernetes `livenessProbe`, systemd watchdog)
//! so a wedged leader is restarted, as client-go's `HealthzAdaptor` does.
//!
//! Run: `cargo run -p tenure --example healthz` and
//! `curl -i 127.0.0.1:8080/healthz`.

use std::time::Duration;

use tenure::{Elector, MemoryStore, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let elector = Elector::builder(MemoryStore::new(), "nightly-billing")
        .term(Duration::from_secs(10))
        .start()?;
    let addr = std::env::var("HEALTHZ_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("serving /healthz and /leader on http://{addr}");
    loop {
        let (mut socket, _) = listener.accept().await?;
        let elector = elector.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let Ok(n) = socket.read(&mut request).await else {
                return;
            };
            let head = String::from_utf8_lossy(&request[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/healthz" => {
                    let health = elector.health();
                    if health.is_healthy() {
                        ("200 OK", "ok\n".to_owned())
                    } else {
                        ("500 Internal Server Error", format!("{health:?}\n"))
                    }
                }
                "/leader" => (
                    "200 OK",
                    match elector.role() {
                        Role::Leader(term) => format!("this process, token {}\n", term.token()),
                        Role::Follower { leader } => format!("{}\n", leader.candidate),
                        _ => "nobody visible\n".to_owned(),
                    },
                ),
                _ => ("404 Not Found", "try /healthz or /leader\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        });
    }
}
