//! A throwaway PostgreSQL server of a test's own, for tests that stop and
//! restart it without disturbing the shared one.

use std::path::PathBuf;
use std::process::Command;

use tenure_testkit::scenarios::Restart;

/// A PostgreSQL server in a temporary directory, on a port of its own,
/// stopped and removed when dropped.
pub struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
}

/// `tool` in `PG_BIN` (set by `scripts/servers.sh`), else in the newest
/// installed `/usr/lib/postgresql/<major>/bin`.
fn pg_bin(tool: &str) -> String {
    let dir = std::env::var("PG_BIN")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| {
            let mut majors: Vec<(u32, String)> = std::fs::read_dir("/usr/lib/postgresql")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    Some((
                        name.parse().ok()?,
                        format!("/usr/lib/postgresql/{name}/bin"),
                    ))
                })
                .collect();
            majors.sort();
            majors
                .pop()
                .map(|(_, dir)| dir)
                .expect("no PostgreSQL in /usr/lib/postgresql: set PG_BIN")
        });
    format!("{dir}/{tool}")
}

fn run_as_postgres(args: &[&str]) {
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .args(args)
        .status()
        .expect("runuser");
    assert!(status.success(), "{args:?} failed");
}

impl PrivatePostgres {
    pub async fn start() -> PrivatePostgres {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("tenure-pg-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        let data = dir.join("data");
        run_as_postgres(&[
            &pg_bin("initdb"),
            "-D",
            data.to_str().unwrap(),
            "-U",
            "postgres",
            "--auth=trust",
        ]);
        let mut server = PrivatePostgres { dir, port };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

/// `pg_ctl` waits (`-w`) until the server has started or stopped, so the
/// shared restart scenario finds it up, or gone, when these return.
impl Restart for PrivatePostgres {
    /// Starts it again on its data directory and port.
    fn restart(&mut self) {
        let data = self.dir.join("data");
        let log = self.dir.join("server.log");
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        run_as_postgres(&[
            &pg_bin("pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-l",
            log.to_str().unwrap(),
            "-w",
            "-o",
            &opts,
            "start",
        ]);
    }

    /// Stops it at once (`-m immediate`: no checkpoint, as a crash would).
    fn kill(&mut self) {
        let data = self.dir.join("data");
        run_as_postgres(&[
            &pg_bin("pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]);
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("pg_ctl"))
            .args([
                "-D",
                data.to_str().unwrap_or(""),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
