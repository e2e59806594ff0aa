//! Shared by the examples: a throwaway `redis-server` unless
//! `REDLEASE_EXAMPLE_URL` names a server to use, and a throwaway cluster
//! unless `REDLEASE_EXAMPLE_CLUSTER_NODES` names one.
//!
//! The examples write keys and flush nothing, but they never use a server
//! they were not pointed at on purpose: an unrelated `REDIS_URL` in the
//! environment (a production server, say) is ignored, with a note.
#![allow(dead_code)]

use std::error::Error;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The variable that points the examples at a server of your own.
pub(crate) const URL_VAR: &str = "REDLEASE_EXAMPLE_URL";
/// The variable that points the cluster example at a cluster of your own.
pub(crate) const CLUSTER_VAR: &str = "REDLEASE_EXAMPLE_CLUSTER_NODES";

/// `host:port` of `url`, for saying which server is used (never the
/// password a URL may carry).
fn shown(url: &str) -> String {
    redis::Client::open(url).map_or_else(
        |_| "(an unparsable URL)".to_owned(),
        |c| c.get_connection_info().addr().to_string(),
    )
}

/// A `redis-server` started for this run unless `REDLEASE_EXAMPLE_URL` is set.
pub(crate) struct ThrowawayServer {
    url: String,
    child: Option<Child>,
}

impl ThrowawayServer {
    pub(crate) fn start_unless_configured() -> Result<Self, Box<dyn Error>> {
        if let Ok(url) = std::env::var(URL_VAR) {
            println!("using the Redis server at {} ({URL_VAR})", shown(&url));
            return Ok(ThrowawayServer { url, child: None });
        }
        if std::env::var_os("REDIS_URL").is_some() {
            println!("ignoring REDIS_URL; set {URL_VAR} to run against a server of your own");
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("{URL_VAR} is not set and redis-server could not start: {e}"))?;
        let server = ThrowawayServer {
            url: format!("redis://127.0.0.1:{port}/0"),
            child: Some(child),
        };
        let client = redis::Client::open(server.url.as_str())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while client
            .get_connection_with_timeout(Duration::from_millis(200))
            .is_err()
        {
            if Instant::now() > deadline {
                return Err("the throwaway redis-server did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("started a throwaway redis-server on port {port}");
        Ok(server)
    }

    pub(crate) fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for ThrowawayServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Three `redis-server` primaries formed into a cluster with `redis-cli`,
/// started for this run unless `REDLEASE_EXAMPLE_CLUSTER_NODES` is set.
pub(crate) struct ThrowawayCluster {
    nodes: Vec<String>,
    children: Vec<Child>,
    dirs: Vec<std::path::PathBuf>,
}

impl ThrowawayCluster {
    pub(crate) fn start_unless_configured() -> Result<Self, Box<dyn Error>> {
        if let Ok(nodes) = std::env::var(CLUSTER_VAR) {
            let nodes: Vec<String> = nodes.split(',').map(str::to_owned).collect();
            let named: Vec<String> = nodes.iter().map(|n| shown(n)).collect();
            println!("using the cluster at {} ({CLUSTER_VAR})", named.join(", "));
            return Ok(ThrowawayCluster {
                nodes,
                children: Vec::new(),
                dirs: Vec::new(),
            });
        }
        let mut cluster = ThrowawayCluster {
            nodes: Vec::new(),
            children: Vec::new(),
            dirs: Vec::new(),
        };
        let mut addrs = Vec::new();
        for _ in 0..3 {
            // The cluster bus listens on port + 10000.
            let port = loop {
                let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
                if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
                    break port;
                }
            };
            let dir = std::env::temp_dir()
                .join(format!("redlease-example-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args([
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                ])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| {
                    format!("{CLUSTER_VAR} is not set and redis-server could not start: {e}")
                })?;
            cluster.children.push(child);
            cluster.dirs.push(dir);
            cluster.nodes.push(format!("redis://127.0.0.1:{port}/"));
            addrs.push(format!("127.0.0.1:{port}"));
        }
        for node in &cluster.nodes {
            let client = redis::Client::open(node.as_str())?;
            let deadline = Instant::now() + Duration::from_secs(10);
            while client
                .get_connection_with_timeout(Duration::from_millis(200))
                .is_err()
            {
                if Instant::now() > deadline {
                    return Err("a throwaway cluster node did not answer within 10 s".into());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()?;
        if !created.success() {
            return Err("redis-cli --cluster create failed".into());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &cluster.nodes {
            let mut conn = redis::Client::open(node.as_str())?.get_connection()?;
            loop {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn)?;
                if info.contains("cluster_state:ok") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err("the throwaway cluster did not become ok within 30 s".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        println!(
            "started a throwaway 3-primary cluster on {}",
            addrs.join(", ")
        );
        Ok(cluster)
    }

    pub(crate) fn nodes(&self) -> Vec<String> {
        self.nodes.clone()
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
