//! Plumbing for tests that start their own servers.

use std::path::{Path, PathBuf};

/// A free TCP port on loopback (another process could take it before it is
/// used; fine for tests that start a server on it at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Sends `sig` to process `pid` (a server or command a test started), or,
/// for a negative `pid`, to every process of group `-pid`; std can only
/// SIGKILL a child. Ids that would reach every process (-1) or the test's
/// own group (0) are refused with `EINVAL`.
#[allow(unsafe_code, reason = "std has no call to send a signal")]
pub fn signal(pid: i32, sig: i32) -> std::io::Result<()> {
    if pid == 0 || pid == -1 {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A server process a test started itself (to kill, freeze or restart it):
/// SIGKILLed and reaped when stopped, replaced or dropped.
#[derive(Debug, Default)]
pub struct ServerProcess(Option<std::process::Child>);

impl ServerProcess {
    /// Runs `cmd` as the server, stopping the one before if any.
    pub fn start(&mut self, cmd: &mut std::process::Command) -> std::io::Result<()> {
        self.kill();
        self.0 = Some(cmd.spawn()?);
        Ok(())
    }

    /// SIGKILL, then reaps it; nothing if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// How it ended, if it has exited (it is then reaped).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.0.as_ref().and_then(|c| i32::try_from(c.id()).ok())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `what` accepts connections on `127.0.0.1:port`, without
/// blocking the runtime (for a server a test restarts while electors run
/// on it); panics naming `what` after `within`.
pub async fn wait_for_listener(what: &str, port: u16, within: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{what} did not listen on {port} within {within:?}");
}

/// Waits until process `pid` itself listens on `port` (one of its open
/// sockets is the listening socket of that port, by `/proc`), not merely
/// until something answers there: a port from [`free_port`] can be taken
/// by another test's server in the moment before this one binds it, and
/// a server that then fails to bind would leave its test talking to the
/// other one (seen: a moto checking no signatures answered for the one
/// that should have). `Err` if `pid` exits first or `within` passes.
pub async fn wait_for_own_listener(
    pid: u32,
    port: u16,
    within: std::time::Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if exited(pid) {
            return Err(format!("process {pid} exited before listening on {port}"));
        }
        let listening = listening_inodes(port);
        if !listening.is_empty() && owns_any_socket(pid, &listening) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "process {pid} did not listen on {port} within {within:?}"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// Whether process `pid` is gone or a zombie (exited, not yet reaped: a
/// child nobody waits on stays one, and keeps its `/proc` entry).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the ")" that ends the command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// The inodes of the sockets listening on TCP `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let wanted = format!(":{port:04X}");
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, state (0A: LISTEN), inode.
            if let (Some(local), Some(&"0A"), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            {
                if local.ends_with(&wanted) {
                    inodes.push((*inode).to_owned());
                }
            }
        }
    }
    inodes
}

/// Whether process `pid` holds one of the sockets `inodes`.
fn owns_any_socket(pid: u32, inodes: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            inodes
                .iter()
                .any(|inode| target == format!("socket:[{inode}]").as_str())
        })
    })
}

/// A random suffix for names that must not collide between test runs.
pub fn unique_suffix() -> u64 {
    rand::random()
}

/// A throwaway directory, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `tenure-<label>-<pid>-<random>` in the system's temp dir.
    pub fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tenure-{label}-{}-{:x}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The listener is told apart by its owner: this process owns it,
    /// another process (a `sleep`) does not, and one that exited is said
    /// to have.
    #[tokio::test]
    async fn a_listener_is_owned_only_by_the_process_that_holds_it() -> std::io::Result<()> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let me = std::process::id();
        assert_eq!(
            wait_for_own_listener(me, port, Duration::from_secs(5)).await,
            Ok(())
        );
        let mut other = std::process::Command::new("sleep").arg("30").spawn()?;
        let not_its = wait_for_own_listener(other.id(), port, Duration::from_millis(200)).await;
        assert!(
            not_its
                .as_ref()
                .is_err_and(|e| e.contains("did not listen")),
            "{not_its:?}"
        );
        // Exited but not reaped (a zombie), then reaped.
        other.kill()?;
        let zombie = wait_for_own_listener(other.id(), port, Duration::from_secs(5)).await;
        assert!(
            zombie.as_ref().is_err_and(|e| e.contains("exited")),
            "{zombie:?}"
        );
        other.wait()?;
        let exited = wait_for_own_listener(other.id(), port, Duration::from_secs(5)).await;
        assert!(
            exited.as_ref().is_err_and(|e| e.contains("exited")),
            "{exited:?}"
        );
        drop(listener);
        Ok(())
    }
}
