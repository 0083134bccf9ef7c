//! A private MariaDB stopped (SIGKILL) for longer than a term, then
//! restarted on its data: the leader steps down by its deadline, there is
//! never more than one leader, exactly one leads afterwards, and tokens
//! continue (they are in the rows, committed durably).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tenure_mysql::MysqlStore;
use tenure_testkit::{free_port, scenarios, Launch, PrivateServer, TempDir};

/// A MariaDB in a temporary directory, on a port of its own.
struct MariaDb {
    dir: TempDir,
    port: u16,
}

impl MariaDb {
    fn start() -> PrivateServer<MariaDb> {
        let dir = TempDir::new("mariadb");
        let status = Command::new("mariadb-install-db")
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("mariadb-install-db is installed (scripts/servers.sh installs it)");
        assert!(status.success(), "mariadb-install-db failed");
        PrivateServer::start(MariaDb {
            dir,
            port: free_port(),
        })
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/tenure", self.port)
    }

    fn client(&self, sql: &str) -> bool {
        Command::new("mariadb")
            .arg("--no-defaults")
            .arg(format!(
                "--socket={}",
                self.dir.path().join("sock").display()
            ))
            .args(["-uroot", "-e", sql])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Launch for MariaDb {
    fn port(&self) -> u16 {
        self.port
    }

    fn choose_other_ports(&mut self) -> bool {
        self.port = free_port();
        true
    }

    fn command(&self) -> Command {
        let d = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("server.log"))
            .expect("log file");
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", d.join("sock").display()))
            .arg(format!("--pid-file={}", d.join("pid").display()))
            .arg("--skip-log-bin")
            .stdout(Stdio::null())
            .stderr(log);
        cmd
    }

    fn wait_until_serving(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while !self.client("CREATE DATABASE IF NOT EXISTS tenure") {
            assert!(Instant::now() < until, "the private MariaDB did not serve");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_leader_and_the_token_sequence() {
    // Where the shared server is, mariadbd is installed.
    if tenure_testkit::server_url("TENURE_TEST_MYSQL").is_none() {
        return;
    }
    let mut server = MariaDb::start();
    let url = format!("{}?timeout=1s", server.url());
    scenarios::reported_restart("MariaDB", &url, MysqlStore::connect, &mut server).await;
}
