//! Certificates for TLS tests against real servers.

use std::path::PathBuf;
use std::process::Command;

use super::TempDir;

/// A throwaway CA and a server certificate it signed for `127.0.0.1` and
/// `localhost`, made with the `openssl` command (a test tool; tenure links
/// no OpenSSL). The files are removed on drop.
#[derive(Debug)]
pub struct TlsFiles {
    /// The CA's certificate (PEM): what a client trusts.
    pub ca: PathBuf,
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    dir: TempDir,
}

impl TlsFiles {
    /// Makes the CA and the server certificate; panics (naming the command)
    /// if `openssl` fails.
    pub fn make() -> TlsFiles {
        let dir = TempDir::new("tls");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("the openssl command makes the test certificates");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=tenure test CA",
            ],
        ]
        .concat());
        run(&[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=localhost",
            ],
        ]
        .concat());
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        TlsFiles {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("server.pem"),
            key: dir.path().join("server.key"),
            dir,
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}
