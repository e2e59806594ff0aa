//! Shared by the examples: a throwaway `redis-server` when `REDIS_URL` is
//! not set.
#![allow(dead_code)]

use std::error::Error;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` started for this run when `REDIS_URL` is not set.
pub(crate) struct ThrowawayServer {
    url: String,
    child: Option<Child>,
}

impl ThrowawayServer {
    pub(crate) fn start_unless_configured() -> Result<Self, Box<dyn Error>> {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Ok(ThrowawayServer { url, child: None });
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("REDIS_URL is not set and redis-server could not start: {e}"))?;
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
