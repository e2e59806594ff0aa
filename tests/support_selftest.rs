//! Self-test of the shared integration-test support module.

mod support;

use std::path::Path;
use std::time::Duration;

use support::{parse_commandstats, wait_until, RedisServer};

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

fn process_alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show up.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn starts_answers_ping_and_cleans_up() {
    let server = RedisServer::start();
    let port = server.port();
    assert_ne!(port, 6379, "must never use the system redis port");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/0"));
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
    let info = server.info("server");
    assert!(
        info.contains(&format!("process_id:{}", server.pid())),
        "INFO server should report our child pid:\n{info}"
    );
    assert_eq!(server.config_get("save").as_deref(), Some(""));
    assert_eq!(server.config_get("appendonly").as_deref(), Some("no"));
    let dir = server.dir();
    assert!(dir.join("redis.log").exists());
    let pid = server.pid();

    drop(server);
    assert!(!process_alive(pid), "server process {pid} survived Drop");
    assert!(!dir.exists(), "temp dir {} survived Drop", dir.display());
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).unwrap();
    let err = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .err();
    assert!(err.is_some(), "port {port} still answers after Drop");
}

#[test]
fn pause_blocks_commands_until_resume() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();

    server.pause();
    assert!(server.is_paused());
    let err = ping(&mut conn).expect_err("PING must not be answered while paused");
    assert!(err.is_timeout(), "expected a read timeout, got {err:?}");

    server.resume();
    assert!(!server.is_paused());
    // The late PONG of the timed-out PING is skipped by redis-rs.
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    {
        let _paused = server.pause_guard();
        assert!(ping(&mut conn).unwrap_err().is_timeout());
    }
    assert!(!server.is_paused());
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn drop_kills_a_paused_server() {
    let server = RedisServer::start();
    let pid = server.pid();
    let dir = server.dir();
    server.pause();
    drop(server);
    assert!(!process_alive(pid), "paused server {pid} survived Drop");
    assert!(!dir.exists());
}

#[test]
fn restart_keeps_port_and_loses_data() {
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let (port, pid) = (server.port(), server.pid());
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(server.keys("*"), vec!["k".to_owned()]);

    server.pause(); // restart must also work on a paused server
    server.restart();
    assert!(!server.is_paused());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    assert!(!process_alive(pid));
    assert!(server.keys("*").is_empty(), "data survived restart");
    assert_eq!(
        server.config_get("maxmemory-policy").as_deref(),
        Some("allkeys-lru"),
        "extra args must survive restart"
    );
}

#[test]
fn commandstats_and_admin_helpers() {
    let parsed = parse_commandstats(
        "# Commandstats\r\n\
         cmdstat_evalsha:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=0\r\n\
         cmdstat_script|load:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n",
    );
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed["evalsha"], 2);
    assert_eq!(parsed["script|load"], 1);

    let server = RedisServer::start();
    let mut conn = server.conn();
    let script = redis::Script::new("return redis.call('INCR', KEYS[1])");
    server.script_flush();
    server.reset_stats();
    let n: i64 = script.key("counter").invoke(&mut conn).unwrap();
    assert_eq!(n, 1);
    let stats = server.commandstats();
    // EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA
    assert_eq!(stats.get("evalsha"), Some(&2), "{stats:?}");
    assert_eq!(stats.get("script|load"), Some(&1), "{stats:?}");
    assert_eq!(stats.get("incr"), Some(&1), "{stats:?}");

    server.config_set("maxmemory-policy", "volatile-lru");
    assert_eq!(
        server.config_get("maxmemory-policy").as_deref(),
        Some("volatile-lru")
    );

    assert_eq!(server.keys("count*"), vec!["counter".to_owned()]);
    server.flushall();
    assert!(server.keys("*").is_empty());

    // `conn` is a normal client; the helper's own connection is spared (SKIPME yes).
    assert!(server.client_list().len() >= 2);
    assert!(server.client_kill_type("normal") >= 1);
    let err = ping(&mut conn).expect_err("killed connection must fail");
    assert!(err.is_connection_dropped(), "{err:?}");
    assert_eq!(ping(&mut server.conn()).unwrap(), "PONG");
}

#[test]
fn replica_reaches_link_up_and_replicates() {
    let primary = RedisServer::start();
    let replica = RedisServer::builder().replica_of(&primary).start();
    assert!(replica.replica_link_up());
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut primary.conn())
        .unwrap();
    wait_until(Duration::from_secs(5), "key k replicated", || {
        replica.keys("k") == ["k"]
    });
}

#[test]
#[should_panic(expected = "timed out after 20ms waiting for: never true")]
fn wait_until_panics_with_message() {
    wait_until(Duration::from_millis(20), "never true", || false);
}

#[test]
fn monitor_sees_commands_with_their_arguments_unescaped() {
    let server = RedisServer::start();
    let monitor = support::monitor::Monitor::start(&server);
    let odd = "a \"quoted\" \\ back\nslash\u{1}";
    server.query(redis::cmd("SET").arg("k{x}:1").arg(odd));
    server.query(
        redis::cmd("EVAL")
            .arg("return redis.call('GET', KEYS[1])")
            .arg(1)
            .arg("k{x}:1"),
    );
    monitor.catch_up(&server);
    let seen = monitor.seen();
    let set = seen
        .iter()
        .find(|c| c.args[0].eq_ignore_ascii_case("SET"))
        .expect("the SET was seen");
    assert_eq!(set.args, ["SET", "k{x}:1", odd]);
    assert!(set.client.starts_with("127.0.0.1:"), "{set:?}");
    let eval = seen
        .iter()
        .find(|c| c.script_call().is_some())
        .expect("the EVAL was seen");
    let (keys, args) = eval.script_call().unwrap();
    assert_eq!((keys, args), (&["k{x}:1".to_owned()][..], &[][..]));
    assert!(
        !seen.iter().any(|c| c.args[0].eq_ignore_ascii_case("GET")),
        "commands run by a script are left out: {seen:?}"
    );
    let replayed = server.query(&eval.to_cmd());
    assert_eq!(replayed, redis::Value::BulkString(odd.as_bytes().to_vec()));
}
