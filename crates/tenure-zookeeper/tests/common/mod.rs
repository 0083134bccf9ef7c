//! Helpers shared by the ZooKeeper store's tests: a raw client that writes
//! nodes as a foreign program would, a private ZooKeeper that a test may
//! kill and restart, and the shared elector helpers.
#![allow(dead_code)]

use tenure::GroupName;
use zookeeper_client as zk;

/// A plain client on the same prefix node, bypassing tenure.
pub struct Raw {
    pub client: zk::Client,
    pub prefix: String,
}

/// `host:port[,host:port]` of a `zk://` URL (no user, no path).
pub fn hosts(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

impl Raw {
    pub async fn connect(url: &str, prefix: &str) -> Raw {
        let client = zk::Client::connect(&hosts(url)).await.expect("raw client");
        Raw {
            client,
            prefix: prefix.to_owned(),
        }
    }

    /// The node of a group, as tenure names it (plain names only).
    pub fn path(&self, group: &GroupName) -> String {
        let name: String = group
            .as_str()
            .chars()
            .map(|c| match c {
                '/' => "%2F".to_owned(),
                '%' => "%25".to_owned(),
                c => c.to_string(),
            })
            .collect();
        format!("{}/{}", self.prefix, name)
    }

    pub async fn plant(&self, group: &GroupName, bytes: &[u8]) {
        let path = self.path(group);
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.client.set_data(&path, bytes, None).await {
            Ok(_) => {}
            Err(zk::Error::NoNode) => {
                self.client.mkdir(&self.prefix, &open).await.expect("mkdir");
                self.client
                    .create(&path, bytes, &open)
                    .await
                    .expect("plant (create)");
            }
            Err(e) => panic!("plant: {e}"),
        }
    }

    pub async fn get(&self, group: &GroupName) -> Option<Vec<u8>> {
        match self.client.get_data(&self.path(group)).await {
            Ok((data, _)) => Some(data),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("read raw: {e}"),
        }
    }
}

#[allow(unused_imports)]
pub use tenure::testkit::scenarios::{elector, one_leader};
