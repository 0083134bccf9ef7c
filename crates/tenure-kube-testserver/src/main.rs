//! `tenure-kube-testserver --etcd URL --listen ADDR --dir DIR [--prefix P]`:
//! serves Lease objects kept in etcd until stopped (see the library docs).

use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!("usage: tenure-kube-testserver --etcd http://HOST:PORT --listen 127.0.0.1:PORT --dir DIR [--prefix /tenure-kube-test/]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut etcd = None;
    let mut listen = None;
    let mut dir = None;
    let mut prefix = "/tenure-kube-test/".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let Some(value) = args.next() else {
            return usage();
        };
        match arg.as_str() {
            "--etcd" => etcd = Some(value),
            "--listen" => listen = value.parse().ok(),
            "--dir" => dir = Some(value.into()),
            "--prefix" => prefix = value,
            _ => return usage(),
        }
    }
    let (Some(etcd), Some(listen), Some(dir)) = (etcd, listen, dir) else {
        return usage();
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure-kube-testserver: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let config = tenure_kube_testserver::Config {
            etcd,
            listen,
            dir,
            prefix,
        };
        match tenure_kube_testserver::start(config).await {
            Ok(running) => {
                eprintln!(
                    "tenure-kube-testserver on https://{} (kubeconfig {})",
                    running.addr,
                    running.kubeconfig.display()
                );
                let _ = tokio::signal::ctrl_c().await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tenure-kube-testserver: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
