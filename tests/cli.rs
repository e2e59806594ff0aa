//! End-to-end tests of the `redlease` binary: the real executable against
//! throw-away `redis-server` processes (never the server on 6379).
//!
//! Every wait is bounded (a stuck `redlease` is killed and the test fails);
//! no assertion depends on how long something took.
#![cfg(feature = "cli")]
// clippy.toml forbids `Instant::now` / `thread::sleep` for the sans-IO core;
// these tests wait for processes and files, which have no event to await.
#![allow(clippy::disallowed_methods)]

mod support;

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use sha2::{Digest, Sha256};
use support::{wait_until, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_redlease");
const NS: &str = "clitest";
/// Bound on any one `redlease` run in these tests.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for a file the child writes.
const FILE_TIMEOUT: Duration = Duration::from_secs(10);

// Exit codes documented in `redlease --help`.
const USAGE: i32 = 2;
const UNAVAILABLE: i32 = 69;
const BUSY: i32 = 75;
const LEASE_LOST: i32 = 122;
const CANNOT_EXECUTE: i32 = 126;
const NOT_FOUND: i32 = 127;
// `redlease status`.
const HELD: i32 = 0;
const FREE: i32 = 1;

/// `redlease` with a clean environment for its own variables and
/// `--url`/`--namespace` pointing at `server`.
fn redlease(server: &RedisServer) -> Command {
    let mut cmd = bare();
    cmd.arg("--url")
        .arg(server.url())
        .arg("--namespace")
        .arg(NS);
    cmd
}

/// `redlease` without any Redis URL or namespace.
fn bare() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("REDIS_URL")
        .env_remove("REDLEASE_URL")
        .env_remove("REDLEASE_NAMESPACE")
        .env_remove("REDLEASE_TLS_CA_CERT")
        .env_remove("REDISCLI_AUTH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` to exit, killing it and failing the test after
/// `timeout`.
fn finish(child: Child, timeout: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(output) => output.expect("wait for redlease"),
        Err(_) => {
            signal(pid, "KILL");
            panic!("redlease (pid {pid}) did not exit within {timeout:?}");
        }
    }
}

/// The lines of `child`'s standard output, read on a thread of their own
/// so that each wait for one is bounded ([`next_line`]).
fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    use std::io::{BufRead, BufReader};

    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next line from [`stdout_lines`]; fails the test after
/// [`RUN_TIMEOUT`] or at the end of the output.
#[track_caller]
fn next_line(lines: &mpsc::Receiver<String>) -> String {
    lines
        .recv_timeout(RUN_TIMEOUT)
        .unwrap_or_else(|e| panic!("no next line on redlease's stdout: {e}"))
}

fn run(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("spawn redlease"), RUN_TIMEOUT)
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "redlease died of a signal: {:?}\nstderr:\n{}",
            output.status,
            stderr(output)
        )
    })
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_code(output: &Output, expected: i32) {
    assert_eq!(
        code(output),
        expected,
        "exit code\nstdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

fn sha_hex(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn lock_name(key: &str) -> String {
    format!("{NS}:lock:{{{}}}", sha_hex(key))
}

fn fence_name(key: &str) -> String {
    format!("{NS}:lock-fence:{{{}}}", sha_hex(key))
}

/// Makes someone else the holder of `key` for 30 s, as the library would
/// (the lock, and the next fence).
fn hold_elsewhere(server: &RedisServer, key: &str, token: &str) {
    let mut conn = server.conn();
    let _: () = redis::cmd("SET")
        .arg(lock_name(key))
        .arg(format!("{token}:1"))
        .arg("PX")
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    // Its grant's fence, as the library's acquire would take it.
    let _: u64 = redis::cmd("INCR")
        .arg(fence_name(key))
        .query(&mut conn)
        .unwrap();
}

fn lock_keys(server: &RedisServer) -> Vec<String> {
    server.keys(&format!("{NS}:lock:*"))
}

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redlease-cli-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// A shell script that says it is ready, then waits (at most ~10 s) until
/// SIGTERM, on which it writes `got-term` to `mark` and exits 0.
fn trap_term_script(ready: &Path, mark: &Path) -> String {
    format!(
        "trap 'echo got-term > {mark}; exit 0' TERM; echo ready > {ready}; \
         i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 9",
        mark = mark.display(),
        ready = ready.display()
    )
}

/// A command that writes `vars` (shell words, e.g. `$REDLEASE_FENCE`) to
/// the scratch file `env`, then runs [`trap_term_script`]; returns the
/// `ready`, `mark` and `env` paths and the script.
fn recording_script(scratch: &Scratch, vars: &str) -> (PathBuf, PathBuf, PathBuf, String) {
    let (ready, mark, env) = (
        scratch.path("ready"),
        scratch.path("mark"),
        scratch.path("env"),
    );
    let script = format!(
        "echo \"{vars}\" > {env}; {}",
        trap_term_script(&ready, &mark),
        env = env.display()
    );
    (ready, mark, env, script)
}

/// A loopback port that nothing listens on (bound, read, released).
fn closed_port_url() -> String {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    format!("redis://127.0.0.1:{port}/0")
}

#[test]
fn concurrent_runs_never_overlap_and_fences_increase() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let log = scratch.path("log");
    let script = format!(
        "echo \"start $REDLEASE_FENCE\" >> {log}; sleep 0.2; echo \"end $REDLEASE_FENCE\" >> {log}",
        log = log.display()
    );
    const PROCESSES: usize = 2;
    const ROUNDS: usize = 3;
    thread::scope(|s| {
        for _ in 0..PROCESSES {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    let out = run(redlease(&server)
                        .args(["run", "--wait", "20s", "--lease", "5s", "shared-job"])
                        .args(["--", "sh", "-c", &script]));
                    assert_code(&out, 0);
                }
            });
        }
    });
    let text = read(&log);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * PROCESSES * ROUNDS, "log:\n{text}");
    let mut last_fence = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("expected a start line, got {:?} in:\n{text}", pair[0]));
        assert_eq!(
            pair[1],
            format!("end {start}"),
            "runs overlapped; log:\n{text}"
        );
        let fence: u64 = start.parse().unwrap();
        assert!(fence > last_fence, "fences must increase; log:\n{text}");
        last_fence = fence;
    }
    assert!(
        lock_keys(&server).is_empty(),
        "every run released its lease"
    );
}

#[test]
fn successive_children_see_increasing_fences_and_their_environment() {
    let server = RedisServer::start();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let out = run(redlease(&server).args([
            "run",
            "--lease",
            "7s",
            "job:42",
            "--",
            "sh",
            "-c",
            "echo \"$REDLEASE_FENCE $REDLEASE_KEY $REDLEASE_LEASE_MS\"",
        ]));
        assert_code(&out, 0);
        let text = stdout(&out);
        let fields: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(fields[1..], ["job:42", "7000"], "child saw: {text}");
        fences.push(fields[0].parse::<u64>().unwrap());
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences must strictly increase: {fences:?}"
    );
    // The fence counter in Redis is the last fence handed out.
    let counter: String = redis::cmd("GET")
        .arg(fence_name("job:42"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(counter.parse::<u64>().unwrap(), *fences.last().unwrap());
}

#[test]
fn a_busy_lock_gives_the_busy_exit_code_without_running_the_command() {
    let server = RedisServer::start();
    hold_elsewhere(&server, "nightly", "someone-else");
    let cmd = ["--", "sh", "-c", "echo ran"];

    let out = run(redlease(&server)
        .args(["run", "--wait", "0", "nightly"])
        .args(cmd));
    assert_code(&out, BUSY);
    assert_eq!(stdout(&out), "", "the command must not run");
    assert!(
        stderr(&out).contains("held by someone else"),
        "{}",
        stderr(&out)
    );

    let out = run(redlease(&server)
        .args(["run", "--busy-exit-code", "0", "--quiet", "nightly"])
        .args(cmd));
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "", "the command must not run");
    assert_eq!(stderr(&out), "", "--quiet says nothing about a busy lock");

    let out = run(redlease(&server)
        .args(["run", "--wait", "300ms", "nightly"])
        .args(cmd));
    assert_code(&out, BUSY);
    assert_eq!(stdout(&out), "", "the command must not run");

    // The other holder's lock is untouched.
    assert_eq!(lock_keys(&server), [lock_name("nightly")]);
}

#[test]
fn the_childs_exit_status_is_passed_through() {
    let server = RedisServer::start();
    let out = run(redlease(&server).args(["run", "k", "--", "sh", "-c", "exit 7"]));
    assert_code(&out, 7);
    let out = run(redlease(&server).args(["run", "k", "--", "sh", "-c", "kill -KILL $$"]));
    assert_code(&out, 128 + 9);
    let out = run(redlease(&server).args(["run", "k", "--", "true"]));
    assert_code(&out, 0);
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

#[test]
fn a_missing_command_exits_127_and_releases_the_lease() {
    let server = RedisServer::start();
    let out = run(redlease(&server).args(["run", "k", "--", "/nonexistent/redlease-test-command"]));
    assert_code(&out, NOT_FOUND);
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

#[test]
fn sigterm_reaches_the_child_and_the_lease_is_released() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["run", "--lease", "5s", "term-job", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    assert_eq!(
        lock_keys(&server),
        [lock_name("term-job")],
        "held while running"
    );

    signal(pid, "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_eq!(read(&mark).trim(), "got-term", "the child got SIGTERM");
    assert_code(&out, 0); // the child's own status after its trap
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

/// A `run --wait 30s` of `echo ran` on a key held elsewhere, once it says
/// it waits; its stderr goes to the returned file.
fn run_waiting_behind_another_holder(
    server: &RedisServer,
    scratch: &Scratch,
) -> (std::process::Child, std::path::PathBuf) {
    let err_path = scratch.path("stderr");
    hold_elsewhere(server, "waited", "someone-else");
    let child = redlease(server)
        .args([
            "--verbose",
            "run",
            "--wait",
            "30s",
            "waited",
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "redlease to start waiting", || {
        read(&err_path).contains("waiting up to")
    });
    (child, err_path)
}

#[test]
fn a_signal_while_waiting_ends_the_wait_without_running_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (child, _) = run_waiting_behind_another_holder(&server, &scratch);
    let pid = child.id();
    signal(pid, "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 128 + 15);
    assert_eq!(stdout(&out), "", "the command must not run");
}

#[test]
fn a_lease_deleted_behind_the_childs_back_terminates_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args([
            "run",
            "--lease",
            "1s",
            "--on-lost",
            "term",
            "lost-job",
            "--",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let deleted: u64 = redis::cmd("DEL")
        .arg(lock_name("lost-job"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(deleted, 1);

    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    assert_eq!(
        read(&mark).trim(),
        "got-term",
        "--on-lost term sends SIGTERM"
    );
    assert!(stderr(&out).contains("lost the lease"), "{}", stderr(&out));
}

#[test]
fn usage_errors_exit_2_without_touching_redis() {
    let scratch = Scratch::new();
    let mark = scratch.path("ran");
    let touch = format!("touch {}", mark.display());
    let url = closed_port_url();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "no namespace",
            vec!["--url", &url, "run", "k", "--", "sh", "-c", &touch],
        ),
        (
            "no url",
            vec!["--namespace", NS, "run", "k", "--", "sh", "-c", &touch],
        ),
        (
            "bad namespace",
            vec![
                "--url",
                &url,
                "--namespace",
                "a{b",
                "run",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "empty key",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "number without unit after another part",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "--wait",
                "1m30",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "lease below the minimum",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "--lease",
                "50ms",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "-n with --wait",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "-n",
                "-w",
                "5",
                "k",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "unknown option after KEY",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "k",
                "--bogus",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "bad unit",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "--lease",
                "10x",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "zero lease",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "--lease",
                "0",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "bad on-lost",
            vec![
                "--url",
                &url,
                "--namespace",
                NS,
                "run",
                "--on-lost",
                "shrug",
                "k",
                "--",
                "true",
            ],
        ),
        (
            "no command",
            vec!["--url", &url, "--namespace", NS, "run", "k"],
        ),
        (
            "bad url",
            vec![
                "--url",
                "not-a-url",
                "--namespace",
                NS,
                "run",
                "k",
                "--",
                "sh",
                "-c",
                &touch,
            ],
        ),
        (
            "status without key",
            vec!["--url", &url, "--namespace", NS, "status"],
        ),
        ("no subcommand", vec!["--url", &url, "--namespace", NS]),
    ];
    for (what, args) in cases {
        let out = run(bare().args(&args));
        assert_eq!(
            code(&out),
            USAGE,
            "{what}: {args:?}\nstderr:\n{}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).is_empty(),
            "{what}: a usage error is explained"
        );
    }
    assert!(!mark.exists(), "no command ran");

    // The same arguments made valid do reach for Redis, and fail there.
    let out = run(bare().args([
        "--url",
        &url,
        "--namespace",
        NS,
        "run",
        "k",
        "--",
        "sh",
        "-c",
        &touch,
    ]));
    assert_code(&out, UNAVAILABLE);
    assert!(!mark.exists(), "no command ran");
    let out = run(bare().args(["--url", &url, "--namespace", NS, "status", "k"]));
    assert_code(&out, UNAVAILABLE);
}

/// An argument that is not UTF-8 is a usage error like any other (exit 2,
/// with clap's words), never a panic: where a UTF-8 string is wanted (KEY,
/// an option), and beside another usage error when it is a word of the
/// command, which may be any bytes.
#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let url = closed_port_url();
    let not_utf8 = OsStr::from_bytes(b"caf\xe9");
    let as_key = run(bare()
        .args(["--url", &url, "--namespace", NS, "run"])
        .arg(not_utf8)
        .args(["--", "true"]));
    let as_option = run(bare()
        .args(["--url", &url, "--namespace"])
        .arg(not_utf8)
        .args(["status", "k"]));
    let in_the_command = run(bare()
        .args([
            "--url",
            &url,
            "--namespace",
            NS,
            "run",
            "--bogus",
            "k",
            "echo",
        ])
        .arg(not_utf8));
    for (what, out) in [
        ("key", as_key),
        ("option", as_option),
        ("command", in_the_command),
    ] {
        let err = stderr(&out);
        assert_eq!(code(&out), USAGE, "{what}: {err}");
        assert!(err.starts_with("error: "), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

#[test]
fn the_environment_supplies_url_and_namespace() {
    let server = RedisServer::start();
    let out = run(bare()
        .env("REDIS_URL", server.url())
        .env("REDLEASE_NAMESPACE", NS)
        .args(["run", "env-job", "--", "sh", "-c", "echo $REDLEASE_FENCE"]));
    assert_code(&out, 0);
    assert!(
        stdout(&out).trim().parse::<u64>().is_ok(),
        "{}",
        stdout(&out)
    );
}

/// REDLEASE_URL comes before REDIS_URL (which may name a server of
/// another program), and --url before both; `--help` says so.
#[test]
fn redlease_url_comes_before_redis_url() {
    let server = RedisServer::start();
    let elsewhere = closed_port_url();
    let fence = |cmd: &mut Command| {
        let out = run(cmd
            .env("REDLEASE_NAMESPACE", NS)
            .args(["run", "url-job", "--", "true"]));
        code(&out)
    };
    assert_eq!(
        fence(
            bare()
                .env("REDLEASE_URL", server.url())
                .env("REDIS_URL", &elsewhere)
        ),
        0,
        "REDLEASE_URL wins over REDIS_URL"
    );
    assert_eq!(
        fence(bare().env("REDIS_URL", server.url())),
        0,
        "REDIS_URL when REDLEASE_URL is unset"
    );
    assert_eq!(
        fence(
            bare()
                .env("REDLEASE_URL", &elsewhere)
                .args(["--url", &server.url()])
        ),
        0,
        "--url wins over REDLEASE_URL"
    );
    assert_eq!(
        fence(
            bare()
                .env("REDLEASE_URL", &elsewhere)
                .env("REDIS_URL", server.url())
        ),
        UNAVAILABLE,
        "REDLEASE_URL is used, not REDIS_URL"
    );
    let out = run(bare()
        .env("REDLEASE_URL", "")
        .env("REDLEASE_NAMESPACE", NS)
        .args(["status", "k"]));
    assert_code(&out, USAGE);
    assert!(stderr(&out).contains("REDLEASE_URL"), "{}", stderr(&out));
    let help = stdout(&run(bare().arg("--help")));
    assert!(
        help.contains("REDLEASE_URL") && help.contains("REDIS_URL"),
        "{help}"
    );
}

/// The password can stay out of the command line (and `ps`): from
/// REDISCLI_AUTH (as redis-cli) or --password-file; the URL then carries
/// the user only, or nothing. The password is never printed, also when it
/// is wrong; a password file that cannot be read or is empty is a usage
/// error naming the file.
#[test]
fn a_password_from_rediscli_auth_or_a_file_is_used_and_never_shown() {
    let server = RedisServer::builder().password("pa55-w0rd").start();
    let url = format!("redis://127.0.0.1:{}/0", server.port());
    let scratch = Scratch::new();
    let good = scratch.path("good");
    fs::write(&good, "pa55-w0rd\n").unwrap();
    let wrong = scratch.path("wrong");
    fs::write(&wrong, "wr0ng-pa55").unwrap();
    let empty = scratch.path("empty");
    fs::write(&empty, "\n").unwrap();
    let with = |cmd: &mut Command| {
        run(cmd
            .args(["--url", &url, "--namespace", NS])
            .args(["run", "pw-job", "--", "true"]))
    };

    let out = with(&mut bare());
    assert_code(&out, UNAVAILABLE);
    assert!(
        stderr(&out).contains("authentication failed"),
        "{}",
        stderr(&out)
    );
    assert_code(&with(bare().env("REDISCLI_AUTH", "pa55-w0rd")), 0);
    assert_code(&with(bare().arg("--password-file").arg(&good)), 0);
    let out = with(
        bare()
            .env("REDLEASE_PASSWORD_FILE", &good)
            .env("REDISCLI_AUTH", "wr0ng-pa55"),
    );
    assert_code(&out, 0);

    for out in [
        with(bare().arg("--password-file").arg(&wrong)),
        with(bare().env("REDISCLI_AUTH", "wr0ng-pa55")),
    ] {
        let err = stderr(&out);
        assert_code(&out, UNAVAILABLE);
        assert!(err.contains("authentication failed"), "{err}");
        assert!(!err.contains("wr0ng") && !err.contains("pa55"), "{err}");
    }
    for path in [empty, scratch.path("missing")] {
        let out = with(bare().arg("--password-file").arg(&path));
        let err = stderr(&out);
        assert_code(&out, USAGE);
        assert!(err.contains(&path.display().to_string()), "{err}");
    }

    // An ACL user named in the URL, its password from the file.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "filer", "on", ">fi1e-pa55", "~*", "&*", "+@all"])
        .query(&mut server.conn())
        .unwrap();
    let user_file = scratch.path("user");
    fs::write(&user_file, "fi1e-pa55").unwrap();
    let out = run(bare()
        .args(["--url", &url.replace("redis://", "redis://filer@")])
        .args(["--namespace", NS, "--password-file"])
        .arg(&user_file)
        .args(["run", "pw-job", "--", "true"]));
    assert_code(&out, 0);
}

/// `redlease status KEY` (optionally `--json`) with its exit code.
fn status_of(server: &RedisServer, key: &str, json: bool) -> (i32, String) {
    let mut cmd = redlease(server);
    cmd.arg("status");
    if json {
        cmd.arg("--json");
    }
    let out = run(cmd.arg(key));
    (code(&out), stdout(&out))
}

#[test]
fn status_reports_holder_time_and_fence_but_never_the_token() {
    let server = RedisServer::start();
    assert_eq!(
        status_of(&server, "report", true),
        (
            FREE,
            r#"{"held":false,"remaining_ms":null,"fence":null,"holder":null}"#.to_owned() + "\n"
        )
    );

    // One grant through the binary sets the counter.
    let out =
        run(redlease(&server).args(["run", "report", "--", "sh", "-c", "echo $REDLEASE_FENCE"]));
    assert_code(&out, 0);
    let fence: u64 = stdout(&out).trim().parse().unwrap();
    let (code_free, json) = status_of(&server, "report", true);
    assert_eq!(code_free, FREE);
    assert_eq!(
        json.trim(),
        format!(r#"{{"held":false,"remaining_ms":null,"fence":{fence},"holder":null}}"#)
    );

    hold_elsewhere(&server, "report", "the-secret-owner-token");
    let (code_held, json) = status_of(&server, "report", true);
    assert_eq!(code_held, HELD, "{json}");
    assert!(
        json.starts_with(r#"{"held":true,"remaining_ms":"#),
        "{json}"
    );
    let remaining: u64 = json
        .split("\"remaining_ms\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no remaining_ms in {json}"));
    assert!(remaining > 0 && remaining <= 30_000, "{json}");
    // The record of the earlier `run` is for an older grant: not shown.
    assert!(json.trim_end().ends_with(r#""holder":null}"#), "{json}");
    let (_, text) = status_of(&server, "report", false);
    assert!(text.contains("held:      yes"), "{text}");
    assert!(text.contains(&(fence + 1).to_string()), "{text}");
    assert!(text.contains("holder:    not recorded"), "{text}");
    // Human durations, as in `run`: 29.9s, not 29934 ms.
    assert!(!text.contains(" ms"), "{text}");
    for output in [json, text] {
        assert!(!output.contains("the-secret-owner-token"), "{output}");
    }
}

/// `run` records who holds the key (host, its pid, the program name, never
/// the arguments) beside the lock; `status` shows it while that grant holds.
#[test]
fn status_names_the_holder_that_run_recorded() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["run", "--lease", "5s", "who", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark) + " # secret-argument")
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let (code_held, json) = status_of(&server, "who", true);
    assert_eq!(code_held, HELD, "{json}");
    assert!(
        json.contains(&format!(r#""pid":{pid},"command":"sh"}}"#)),
        "{json}"
    );
    assert!(json.contains(r#""holder":{"host":"#), "{json}");
    let (_, text) = status_of(&server, "who", false);
    assert!(
        text.contains(&format!("holder:    pid {pid} on ")),
        "{text}"
    );
    assert!(text.contains("running sh"), "{text}");
    for output in [&json, &text] {
        assert!(!output.contains("secret-argument"), "{output}");
    }
    // Never in the lock's value.
    let value: String = redis::cmd("GET")
        .arg(lock_name("who"))
        .query(&mut server.conn())
        .unwrap();
    assert!(
        !value.contains("sh") || !value.contains(&pid.to_string()),
        "{value}"
    );
    signal(pid, "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 0);
    assert_eq!(status_of(&server, "who", true).0, FREE);
}

/// Creates the README's least-privilege ACL user for the lock and the
/// semaphore (`locker`, password `s3cret-pass`), with `extra` rules, and
/// empties `ACL LOG`; the URL that logs in as it.
fn least_privilege_user(server: &RedisServer, extra: &str) -> String {
    let rules = format!(
        "on >s3cret-pass resetkeys resetchannels -@all +evalsha +eval +script|load \
         +get +mget +set +mset +del +incr +pexpire +pttl +time +publish +subscribe +unsubscribe \
         +punsubscribe +ping +config|get +info +rpush +lmove +rpop +lpop +lpush +lpos +lset +getdel +exists +lrem +lindex \
         ~{NS}:lock:{{* ~{NS}:lock-fence:{{* ~{NS}:lock-queue:{{* ~{NS}:lock-queued:{{* \
         ~{NS}:lock-reg:{{* ~{NS}:sem:{{* ~{NS}:sem-fence:{{* ~{NS}:sem-permits:{{* \
         ~{NS}:sem-queue:{{* ~{NS}:sem-queued:{{* ~{NS}:sem-reg:{{* \
         ~{NS}:key-names &{NS}:lock-released {extra}"
    );
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("locker");
    for rule in rules.split_whitespace() {
        acl.arg(rule);
    }
    let _: () = acl.query(&mut server.conn()).unwrap();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut server.conn())
        .unwrap();
    server
        .url()
        .replace("redis://", "redis://locker:s3cret-pass@")
}

fn acl_log(server: &RedisServer) -> Vec<redis::Value> {
    redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .unwrap()
}

/// The README's least-privilege ACL (plus `~<ns>:lock-holder:{*` for the
/// holder record) is all `run` and `status` need: no MULTI/EXEC, and
/// nothing in `ACL LOG`.
#[test]
fn run_and_status_work_as_the_least_privilege_acl_user() {
    let server = RedisServer::start();
    let url = least_privilege_user(&server, &format!("~{NS}:lock-holder:{{*"));
    let as_user = || {
        let mut cmd = bare();
        cmd.args(["--url", &url, "--namespace", NS]);
        cmd
    };
    let out = run(as_user().args(["status", "acl-job"]));
    assert_code(&out, FREE);
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = as_user()
        .args(["run", "--lease", "2s", "acl-job", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let out = run(as_user().args(["status", "--json", "acl-job"]));
    assert_code(&out, HELD);
    assert!(
        stdout(&out).contains(r#""command":"sh""#),
        "{}",
        stdout(&out)
    );
    signal(child.id(), "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 0);
    for output in [stdout(&out), stderr(&out)] {
        assert!(!output.contains("s3cret-pass"), "{output}");
    }
    let log = acl_log(&server);
    assert!(log.is_empty(), "Redis refused something: {log:?}");
}

#[test]
fn a_holder_cut_off_from_redis_stops_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["run", "--lease", "1s", "cut-off", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    // Redis stops answering: the renewal times out (its command timeout is a
    // quarter of the lease), and the holder must give up on its own.
    let paused = server.pause_guard();
    let out = finish(child, RUN_TIMEOUT);
    drop(paused);
    assert_code(&out, LEASE_LOST);
    assert_eq!(
        read(&mark).trim(),
        "got-term",
        "--on-lost term sends SIGTERM"
    );
    assert!(stderr(&out).contains("lost the lease"), "{}", stderr(&out));
}

#[test]
fn on_lost_term_escalates_to_sigkill_after_kill_after() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let ready = scratch.path("ready");
    // Ignores SIGTERM; ends by itself after ~10 s at most.
    let script = format!(
        "trap '' TERM; echo ready > {}; i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
        ready.display()
    );
    let child = redlease(&server)
        .args([
            "run",
            "--lease",
            "1s",
            "--kill-after",
            "200ms",
            "stubborn",
            "--",
            "sh",
            "-c",
        ])
        .arg(script)
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let _: u64 = redis::cmd("DEL")
        .arg(lock_name("stubborn"))
        .query(&mut server.conn())
        .unwrap();
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    assert!(stderr(&out).contains("sending SIGKILL"), "{}", stderr(&out));
}

#[test]
fn on_lost_kill_and_ignore() {
    let server = RedisServer::start();
    let scratch = Scratch::new();

    // kill: SIGKILL at once, so the TERM trap never runs.
    let (ready, mark) = (scratch.path("ready-kill"), scratch.path("mark-kill"));
    let child = redlease(&server)
        .args([
            "run",
            "--lease",
            "1s",
            "--on-lost",
            "kill",
            "lost-kill",
            "--",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let _: u64 = redis::cmd("DEL")
        .arg(lock_name("lost-kill"))
        .query(&mut server.conn())
        .unwrap();
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    assert!(!mark.exists(), "SIGKILL, not SIGTERM");

    // ignore: the loss is reported, the command finishes, its status is
    // redlease's.
    let (ready, go) = (scratch.path("ready-ignore"), scratch.path("go"));
    let err_path = scratch.path("stderr");
    let script = format!(
        "echo ready > {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; exit 3",
        ready = ready.display(),
        go = go.display()
    );
    let child = redlease(&server)
        .args([
            "run",
            "--lease",
            "1s",
            "--on-lost",
            "ignore",
            "lost-ignore",
            "--",
            "sh",
            "-c",
        ])
        .arg(script)
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let _: u64 = redis::cmd("DEL")
        .arg(lock_name("lost-ignore"))
        .query(&mut server.conn())
        .unwrap();
    wait_until(FILE_TIMEOUT, "the loss to be reported", || {
        read(&err_path).contains("lost the lease")
    });
    fs::write(&go, "").unwrap();
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 3);
}

#[test]
fn waiting_is_silent_on_a_pipe_unless_verbose() {
    let server = RedisServer::start();
    for verbose in [false, true] {
        // Someone else's lease that runs out by itself.
        let _: () = redis::cmd("SET")
            .arg(lock_name("short"))
            .arg("someone-else:1")
            .arg("PX")
            .arg(300)
            .query(&mut server.conn())
            .unwrap();
        let mut cmd = redlease(&server);
        if verbose {
            cmd.arg("--verbose");
        }
        let out = run(cmd.args(["run", "--wait", "20s", "short", "--", "true"]));
        assert_code(&out, 0);
        if verbose {
            let err = stderr(&out);
            assert!(err.contains("waiting up to"), "{err}");
            assert!(err.contains("acquired the lease (fence"), "{err}");
        } else {
            assert_eq!(stderr(&out), "", "stderr is not a terminal");
        }
    }
}

/// A server that may evict keys (maxmemory-policy other than noeviction)
/// can break mutual exclusion: `run` says so by default, once, not only
/// with -v; -q keeps it quiet.
#[test]
fn the_eviction_warning_is_shown_once_by_default() {
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "allkeys-lru"])
        .start();
    for (flag, times) in [(None, 1), (Some("-v"), 1), (Some("-q"), 0)] {
        let mut cmd = redlease(&server);
        cmd.args(flag);
        let out = run(cmd.args(["run", "evictable", "--also", "other", "--", "true"]));
        assert_code(&out, 0);
        let err = stderr(&out);
        assert_eq!(
            err.matches("REDIS_EVICTION_UNSAFE").count(),
            times,
            "{flag:?}: {err}"
        );
        if times > 0 {
            assert!(err.contains("maxmemory-policy is allkeys-lru"), "{err}");
        }
    }
    let server = RedisServer::start();
    let out = run(redlease(&server).args(["run", "safe", "--", "true"]));
    assert_eq!(stderr(&out), "", "noeviction: nothing to say");
}

/// A connect failure names the target the user gave (`host:port`) and says
/// why in words, but never the credentials in the URL (the crate docs' "Deployments").
#[test]
fn a_connect_failure_names_the_target_and_never_its_credentials() {
    let url = closed_port_url();
    let target = url
        .trim_start_matches("redis://")
        .trim_end_matches("/0")
        .to_owned();
    let with_secret = url.replace("redis://", "redis://locker-user:pa55-s3cret@");
    for args in [
        vec![
            "--url",
            &with_secret,
            "--namespace",
            NS,
            "run",
            "k",
            "--",
            "true",
        ],
        vec!["--url", &with_secret, "--namespace", NS, "status", "k"],
    ] {
        let out = run(bare().args(&args));
        let err = stderr(&out);
        assert_ne!(code(&out), 0, "{err}");
        assert!(
            err.contains(&format!("at {target}: connection refused")),
            "{err}"
        );
        assert!(
            !err.contains("pa55-s3cret") && !err.contains("locker-user"),
            "{err}"
        );
    }
}

/// `rediss://` with `--tls-ca-cert` (the CA that signed the server's
/// certificate) runs the command under the lease; without it the server is
/// not trusted and the error says the TLS handshake failed.
#[test]
fn a_tls_server_is_reached_with_its_ca_certificate() {
    let server = RedisServer::builder().tls().start();
    let scratch = Scratch::new();
    let ca = scratch.path("ca.pem");
    fs::write(&ca, server.ca_pem()).unwrap();
    let url = server.tls_url();
    let ca_arg = ca.display().to_string();
    let out = run(bare().args([
        "--url",
        &url,
        "--tls-ca-cert",
        &ca_arg,
        "--namespace",
        NS,
        "run",
        "k",
        "--",
        "true",
    ]));
    assert_code(&out, 0);
    let out = run(bare().args(["--url", &url, "--namespace", NS, "run", "k", "--", "true"]));
    assert_ne!(code(&out), 0);
    assert!(
        stderr(&out).contains("TLS handshake failed"),
        "{}",
        stderr(&out)
    );
}

/// Every build of the tool (feature `cli`) understands `rediss://`: a TLS
/// URL is tried (here: refused by a closed port), never rejected as not
/// being a Redis URL.
#[test]
fn every_build_of_the_tool_understands_rediss_urls() {
    let url = closed_port_url().replace("redis://", "rediss://");
    let out = run(bare().args(["--url", &url, "--namespace", NS, "status", "k"]));
    let err = stderr(&out);
    assert_code(&out, UNAVAILABLE);
    assert!(err.contains("connection refused"), "{err}");
    assert!(!err.contains("not a Redis URL"), "{err}");
}

/// A CA certificate with a plain `redis://` URL (say, REDLEASE_TLS_CA_CERT
/// set for every run) is not an error: the CA is not used. Given on the
/// command line, a note says so; from the environment, nothing is said.
#[test]
fn a_ca_certificate_with_a_plain_url_is_unused_not_an_error() {
    let server = RedisServer::builder().tls().start();
    let scratch = Scratch::new();
    let ca = scratch.path("ca.pem");
    fs::write(&ca, server.ca_pem()).unwrap();
    let out = run(redlease(&server)
        .arg("--tls-ca-cert")
        .arg(&ca)
        .args(["run", "k", "--", "true"]));
    assert_code(&out, 0);
    let err = stderr(&out);
    assert!(
        err.contains("--tls-ca-cert is not used") && err.contains("rediss://"),
        "{err}"
    );
    let out = run(redlease(&server)
        .env("REDLEASE_TLS_CA_CERT", &ca)
        .args(["run", "k", "--", "true"]));
    assert_code(&out, 0);
    assert_eq!(stderr(&out), "");
}

/// A CA file that holds no PEM certificate (DER, text, a broken PEM) is a
/// usage error that names the file, instead of an empty set of trusted
/// roots and a failed handshake later; so is a file that cannot be read.
#[test]
fn a_ca_file_that_is_not_pem_is_reported() {
    let server = RedisServer::builder().tls().start();
    let scratch = Scratch::new();
    let url = server.tls_url();
    let broken_pem = "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n";
    for (name, contents) in [
        ("ca.der", &b"\x30\x82\x01\x0a\x02\x82\x01\x01\x00"[..]),
        ("ca.txt", &b"just some text\n"[..]),
        ("broken.pem", broken_pem.as_bytes()),
    ] {
        let path = scratch.path(name);
        fs::write(&path, contents).unwrap();
        let out = run(bare()
            .args(["--url", &url, "--namespace", NS, "--tls-ca-cert"])
            .arg(&path)
            .args(["run", "k", "--", "true"]));
        let err = stderr(&out);
        assert_eq!(code(&out), USAGE, "{name}: {err}");
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
        assert!(err.contains("PEM"), "{name}: {err}");
        assert!(!err.contains("not a Redis URL"), "{name}: {err}");
    }
    let missing = scratch.path("missing.pem");
    let out = run(bare()
        .args(["--url", &url, "--namespace", NS, "--tls-ca-cert"])
        .arg(&missing)
        .args(["status", "k"]));
    let err = stderr(&out);
    assert_code(&out, USAGE);
    assert!(
        err.contains("cannot read") && err.contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(lock_keys(&server).is_empty());
}

/// The command follows KEY with or without `--`; durations take bare
/// seconds, fractions and compound forms; `-n` tries once and `-E` sets the
/// busy code, like flock.
#[test]
fn flock_style_flags_durations_and_a_command_without_dashes() {
    let server = RedisServer::start();
    let out = run(redlease(&server).args([
        "run",
        "-w",
        "1.5",
        "-l",
        "1m30s",
        "plain",
        "sh",
        "-c",
        "echo $REDLEASE_LEASE_MS",
    ]));
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "90000");
    let out =
        run(redlease(&server).args(["run", "--lease", "1d", "plain", "--", "echo", "-n", "x"]));
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "x", "arguments after the command are its own");
    let out = run(redlease(&server).args(["run", "plain", "echo", "-n", "--wait", "y"]));
    assert_code(&out, 0);
    assert_eq!(
        stdout(&out),
        "--wait y",
        "options after the command are its own"
    );

    hold_elsewhere(&server, "plain", "someone-else");
    let out = run(redlease(&server).args(["run", "-n", "plain", "echo", "ran"]));
    assert_code(&out, BUSY);
    let out = run(redlease(&server).args(["run", "-n", "-E", "3", "plain", "echo", "ran"]));
    assert_code(&out, 3);
    let out = run(redlease(&server).args(["run", "-w", "0.2", "-E", "0", "plain", "echo", "ran"]));
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "", "the command must not run");
    let out = run(redlease(&server).args(["run", "-l", "99ms", "plain", "echo", "ran"]));
    assert_code(&out, USAGE);
    assert!(
        stderr(&out).contains("shorter than the shortest lease, 100ms"),
        "{}",
        stderr(&out)
    );
}

/// Every exit code of `redlease --help` that a test can reach, with its
/// meaning (70, an internal error such as failing to set up signal
/// handling, cannot be provoked from outside).
#[test]
fn every_documented_exit_code() {
    let server = RedisServer::start();
    let help = run(bare().args(["run", "--help"]));
    assert_code(&help, 0);
    let help = stdout(&help);
    for line in [
        "  2      usage error",
        "  69     Redis unavailable",
        "  70     internal error",
        "  75     the lock is held by someone else",
        "  122    the lease was lost",
        "  126    the command could not be started",
        "  127    the command was not found",
        "Exit codes of status: 0 held, 1 free",
    ] {
        assert!(help.contains(line), "--help lacks {line:?}:\n{help}");
    }
    assert!(!help.contains(" 124 ") && !help.contains(" 125 "), "{help}");

    let out = run(redlease(&server).args(["run", "codes", "sh", "-c", "exit 5"]));
    assert_code(&out, 5);
    let out = run(redlease(&server).args(["run", "codes", "sh", "-c", "kill -TERM $$"]));
    assert_code(&out, 128 + 15);
    let out = run(redlease(&server).args(["run", "--lease", "1x", "codes", "true"]));
    assert_code(&out, USAGE);
    let out = run(bare().args([
        "--url",
        &closed_port_url(),
        "--namespace",
        NS,
        "run",
        "codes",
        "true",
    ]));
    assert_code(&out, UNAVAILABLE);
    let scratch = Scratch::new();
    let not_executable = scratch.path("data.txt");
    fs::write(&not_executable, "not a program").unwrap();
    let out = run(redlease(&server)
        .args(["run", "codes"])
        .arg(&not_executable));
    assert_code(&out, CANNOT_EXECUTE);
    let out = run(redlease(&server).args(["run", "codes", "/nonexistent/redlease-test"]));
    assert_code(&out, NOT_FOUND);
    hold_elsewhere(&server, "codes", "someone-else");
    let out = run(redlease(&server).args(["run", "codes", "true"]));
    assert_code(&out, BUSY);
    let out = run(redlease(&server).args(["run", "-w", "200ms", "codes", "true"]));
    assert_code(&out, BUSY);
    // 122 (lease lost) is covered by a_lease_deleted_behind_the_childs_back_terminates_it.
}

/// `--on-lost term` and `kill` stop the command and exit with the code the
/// exit-code table gives a lost lease, in `run --help` and `elect --help`
/// alike (124 and 125 are timeout(1)'s, never redlease's).
#[test]
fn the_on_lost_help_gives_the_exit_code_of_a_lost_lease() {
    for sub in ["run", "elect"] {
        let help = run(bare().args([sub, "--help"]));
        assert_code(&help, 0);
        let help = stdout(&help);
        assert!(
            help.contains(&format!("  {LEASE_LOST}    the lease was lost")),
            "{sub} --help:\n{help}"
        );
        for action in ["term:", "kill:"] {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("- {action}")))
                .unwrap_or_else(|| panic!("{sub} --help has no {action} line:\n{help}"));
            assert!(line.contains(&format!("exit {LEASE_LOST}")), "{line}");
        }
        assert!(!help.contains("124") && !help.contains("125"), "{help}");
    }
}

/// A passed-on SIGTERM that the command ignores is followed by SIGKILL
/// after --kill-after, instead of waiting forever.
#[test]
fn kill_after_applies_to_a_forwarded_signal() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let ready = scratch.path("ready");
    let script = format!(
        "trap '' TERM; echo ready > {}; i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 4",
        ready.display()
    );
    let child = redlease(&server)
        .args(["run", "--kill-after", "300ms", "stubborn-term", "sh", "-c"])
        .arg(script)
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    signal(child.id(), "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 128 + 9);
    assert!(
        stderr(&out).contains("still running 300ms after SIGTERM; sending SIGKILL"),
        "{}",
        stderr(&out)
    );
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

/// SIGUSR1, SIGUSR2 and SIGQUIT sent to redlease while the command runs
/// reach the command, as SIGTERM does, instead of killing redlease with
/// the lease held until its TTL; the lease is released when the command
/// exits. (That the user signals start no --kill-after countdown is
/// signals.rs's unit test: a wait for its absence would be timed.)
#[test]
fn sigusr1_sigusr2_and_sigquit_are_passed_on_to_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, marks) = (scratch.path("ready"), scratch.path("marks"));
    let script = format!(
        "trap 'echo usr1 >> {m}' USR1; trap 'echo usr2 >> {m}' USR2; \
         trap 'echo quit >> {m}; exit 0' QUIT; echo ready > {r}; \
         i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 9",
        m = marks.display(),
        r = ready.display()
    );
    let child = redlease(&server)
        .args(["run", "user-signals", "sh", "-c"])
        .arg(script)
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    signal(pid, "USR1");
    wait_until(FILE_TIMEOUT, "the child to get SIGUSR1", || {
        read(&marks).contains("usr1")
    });
    signal(pid, "USR2");
    wait_until(FILE_TIMEOUT, "the child to get SIGUSR2", || {
        read(&marks).contains("usr2")
    });
    assert!(!is_dead(pid), "redlease survives the user signals");
    assert_eq!(
        lock_keys(&server),
        [lock_name("user-signals")],
        "still held"
    );
    signal(pid, "QUIT");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 0); // the command's own status after its QUIT trap
    assert_eq!(read(&marks), "usr1\nusr2\nquit\n");
    assert!(!stderr(&out).contains("SIGKILL"), "{}", stderr(&out));
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

/// A SIGQUIT while waiting for the lock ends the wait as SIGTERM does (exit
/// 128 + 3, the command not run); a SIGUSR1 there has no command to reach
/// and does not end the wait.
#[test]
fn sigquit_ends_a_wait_and_sigusr1_does_not() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (child, err_path) = run_waiting_behind_another_holder(&server, &scratch);
    let pid = child.id();
    signal(pid, "USR1");
    wait_until(FILE_TIMEOUT, "redlease to note SIGUSR1", || {
        read(&err_path).contains("SIGUSR1")
    });
    assert!(!is_dead(pid), "still waiting");
    signal(pid, "QUIT");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 128 + 3);
    assert_eq!(stdout(&out), "", "the command must not run");
}

/// After a loss, one clear line and nothing else (no library log lines
/// such as LOCK_CLEANUP_FAILED unless -v).
#[test]
fn a_loss_is_reported_in_one_line() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["run", "--lease", "1s", "one-line", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let _: u64 = redis::cmd("DEL")
        .arg(lock_name("one-line"))
        .query(&mut server.conn())
        .unwrap();
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("redlease: lost the lease: "), "{err}");
    assert!(!err.contains("LOCK_"), "{err}");
}

/// A renewal that Redis refuses (here: the ACL user loses `PEXPIRE` for a
/// while, so the renew script fails with NOPERM) is sent again while the
/// lease has time left; once Redis accepts it again the command goes on
/// and exits with its own status (`with_lock`'s docs).
#[test]
fn a_refused_renewal_is_sent_again_while_the_lease_has_time() {
    let server = RedisServer::start();
    let setuser = |rules: &str| {
        let mut acl = redis::cmd("ACL");
        acl.arg("SETUSER").arg("renewer");
        for rule in rules.split_whitespace() {
            acl.arg(rule);
        }
        let _: () = acl.query(&mut server.conn()).unwrap();
    };
    setuser("on >pw ~* &* +@all");
    let url = server.url().replace("redis://", "redis://renewer:pw@");
    let scratch = Scratch::new();
    let (ready, go) = (scratch.path("ready"), scratch.path("go"));
    let err_path = scratch.path("stderr");
    let script = format!(
        "echo ready > {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; exit 6",
        ready = ready.display(),
        go = go.display()
    );
    let child = bare()
        .args(["--url", &url, "--namespace", NS])
        .args(["--verbose", "run", "--lease", "3s", "refused", "sh", "-c"])
        .arg(script)
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    setuser("-pexpire");
    wait_until(FILE_TIMEOUT, "a refused renewal", || {
        read(&err_path).contains("LOCK_RENEW_RETRY")
    });
    setuser("+pexpire");
    wait_until(FILE_TIMEOUT, "a renewal after the refusal", || {
        let err = read(&err_path);
        err.rfind("renewed the lease") > err.find("LOCK_RENEW_RETRY")
    });
    fs::write(&go, "").unwrap();
    let out = finish(child, RUN_TIMEOUT);
    let err = read(&err_path);
    assert_eq!(code(&out), 6, "{err}");
    assert!(!err.contains("lost the lease"), "{err}");
}

/// A renewal that times out (outcome unknown: the server is stopped with
/// SIGSTOP for longer than the command timeout, but shorter than what is
/// left of the lease) is sent again; the command runs on and exits with
/// its own status, 0 (`with_lock`'s docs). Before, the unknown outcome ended the job.
#[test]
fn a_renewal_that_times_out_once_does_not_end_the_job() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, go) = (scratch.path("ready"), scratch.path("go"));
    let err_path = scratch.path("stderr");
    let script = format!(
        "echo ready > {ready}; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e {go} ]",
        ready = ready.display(),
        go = go.display()
    );
    // Lease 6 s: each command is bounded by 1.5 s; the first renewal is
    // sent at 3 s and times out at 4.5 s, 1.5 s before the lease ends.
    let child = redlease(&server)
        .args([
            "--verbose",
            "run",
            "--lease",
            "6s",
            "slow-renewal",
            "sh",
            "-c",
        ])
        .arg(script)
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    {
        let _paused = server.pause_guard();
        wait_until(FILE_TIMEOUT, "a renewal that timed out", || {
            read(&err_path).contains("LOCK_RENEW_RETRY")
        });
    }
    wait_until(FILE_TIMEOUT, "a renewal after the timeout", || {
        let err = read(&err_path);
        err.rfind("renewed the lease") > err.find("LOCK_RENEW_RETRY")
    });
    fs::write(&go, "").unwrap();
    let out = finish(child, RUN_TIMEOUT);
    let err = read(&err_path);
    assert_eq!(code(&out), 0, "{err}");
    assert!(
        err.contains("timed out") || err.contains("OUTCOME_UNKNOWN"),
        "{err}"
    );
    assert!(!err.contains("lost the lease"), "{err}");
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

/// Connecting is bounded like every command, by min(2 s, lease / 4): a
/// server that accepts connections but never answers fails the run.
#[test]
fn a_server_that_never_answers_fails_the_connect() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let url = format!(
        "redis://127.0.0.1:{}/0",
        listener.local_addr().unwrap().port()
    );
    let out = run(bare().args([
        "--url",
        &url,
        "--namespace",
        NS,
        "run",
        "--lease",
        "1s",
        "k",
        "true",
    ]));
    drop(listener);
    assert_code(&out, UNAVAILABLE);
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
}

/// `s` in single quotes for `sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The process group and the terminal's foreground process group of
/// `pid` (fields 5 and 8 of /proc/<pid>/stat).
fn pgrp_and_foreground(pid: u32) -> (i64, i64) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // After "pid (comm) ": state ppid pgrp session tty_nr tpgid ...
    (fields[2].parse().unwrap(), fields[5].parse().unwrap())
}

/// On a terminal (a pty made by `script`, redlease in its foreground
/// process group), Ctrl-C reaches the command once, from the terminal, and
/// is not passed on a second time; `kill -INT <redlease pid>` reaches only
/// redlease and is passed on (told apart by the
/// signal's origin, not by the foreground group, which is the same).
#[test]
fn on_a_terminal_kill_int_is_passed_on_and_ctrl_c_is_not_doubled() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, go, mark, ppid) = (
        scratch.path("ready"),
        scratch.path("go"),
        scratch.path("mark"),
        scratch.path("ppid"),
    );
    let script = format!(
        "trap 'echo int >> {mark}' INT; echo $PPID > {ppid}; echo ready > {ready}; \
         i=0; while [ ! -e {go} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e {go} ]",
        mark = mark.display(),
        ppid = ppid.display(),
        ready = ready.display(),
        go = go.display()
    );
    let inner = format!(
        "exec {} --url {} --namespace {NS} --verbose run tty-sigint sh -c {}",
        sh_quote(BIN),
        sh_quote(&server.url()),
        sh_quote(&script)
    );
    let mut child = Command::new("script")
        .args(["-q", "-e", "-f", "-c", &inner, "/dev/null"])
        .env_remove("REDIS_URL")
        .env_remove("REDLEASE_NAMESPACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script(1)");
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let pid: u32 = read(&ppid).trim().parse().unwrap();
    assert_eq!(
        fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "redlease"
    );
    let (pgrp, foreground) = pgrp_and_foreground(pid);
    assert_eq!(
        pgrp, foreground,
        "redlease runs in the terminal's foreground group"
    );

    // Ctrl-C typed on the terminal: the line discipline signals the group.
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        stdin.write_all(b"\x03").unwrap();
        stdin.flush().unwrap();
    }
    wait_until(FILE_TIMEOUT, "Ctrl-C to reach the command", || {
        read(&mark).lines().count() >= 1
    });
    let after_ctrl_c = read(&mark).lines().count();
    signal(pid, "INT");
    wait_until(FILE_TIMEOUT, "kill -INT to be passed on", || {
        read(&mark).lines().count() > after_ctrl_c
    });
    fs::write(&go, "").unwrap();
    let out = finish(child, RUN_TIMEOUT);
    let text = stdout(&out);
    assert_code(&out, 0);
    assert_eq!(
        text.matches("passed SIGINT on to the command").count(),
        1,
        "{text}"
    );
    assert_eq!(
        text.matches("SIGINT came from the terminal").count(),
        1,
        "{text}"
    );
    assert!(lock_keys(&server).is_empty(), "the lease is released");
}

/// Whether process `pid` is gone or a zombie (dead, not yet reaped by
/// whoever inherited it).
fn is_dead(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'),
    }
}

/// `kill -9` of `redlease run` (Linux): the command gets SIGKILL through
/// its parent-death signal instead of running on without a renewed lease,
/// and the lease stays until its TTL, so a second `run` of the key does
/// not start beside anything.
#[test]
#[cfg(target_os = "linux")]
fn kill_9_of_redlease_kills_the_command_and_the_lease_waits_for_its_ttl() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, pid_file) = (scratch.path("ready"), scratch.path("pid"));
    // Runs ~60 s unless killed; the test waits far less for its death.
    let script = format!(
        "echo $$ > {pid}; echo ready > {ready}; i=0; while [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        pid = pid_file.display(),
        ready = ready.display()
    );
    let child = redlease(&server)
        .args(["run", "--lease", "30s", "killed-9", "sh", "-c"])
        .arg(script)
        .spawn()
        .unwrap();
    let redlease_pid = child.id();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let command_pid: u32 = read(&pid_file).trim().parse().unwrap();
    let (parent, _) = parent_of(command_pid);
    assert_eq!(parent, redlease_pid, "the command is redlease's own child");

    signal(redlease_pid, "KILL");
    let out = finish(child, RUN_TIMEOUT);
    assert_eq!(out.status.code(), None, "redlease died of SIGKILL");
    wait_until(FILE_TIMEOUT, "the command to be killed", || {
        is_dead(command_pid)
    });

    // The lease was not released: it ends at its TTL, and until then a
    // second run does not start.
    assert_eq!(lock_keys(&server).len(), 1, "the lease is still held");
    let second = run(redlease(&server).args(["run", "-n", "killed-9", "true"]));
    assert_code(&second, BUSY);
}

/// The parent pid and the process group of `pid`.
fn parent_of(pid: u32) -> (u32, i64) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    (fields[1].parse().unwrap(), fields[2].parse().unwrap())
}

/// `run -s` takes a shared lease of the key's read-write lease (flock's
/// `-s`), `-x` its exclusive lease: two `-s` runs hold at once, `-x` is
/// busy beside them, and then gets a fence above their epoch; the command
/// sees `REDLEASE_EPOCH` (shared) or `REDLEASE_FENCE` (exclusive). A plain
/// `run` takes the key's lock, which is another thing.
#[test]
fn shared_runs_hold_together_and_exclusive_runs_alone() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (epoch_file, go) = (scratch.path("epoch"), scratch.path("go"));
    let script = format!(
        "echo \"$REDLEASE_EPOCH ${{REDLEASE_FENCE:-none}}\" > {}; while [ ! -e {} ]; do sleep 0.02; done",
        epoch_file.display(),
        go.display()
    );
    let first = redlease(&server)
        .args(["run", "-s", "--lease", "5s", "doc", "sh", "-c"])
        .arg(&script)
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the shared command to start", || {
        fs::read_to_string(&epoch_file).is_ok_and(|s| s.ends_with('\n'))
    });
    let seen = fs::read_to_string(&epoch_file).unwrap();
    let (epoch, fence) = seen.trim().split_once(' ').unwrap();
    let epoch: u64 = epoch
        .parse()
        .unwrap_or_else(|_| panic!("an epoch: {seen:?}"));
    assert_eq!(fence, "none", "a shared run gets no REDLEASE_FENCE");

    let second =
        run(redlease(&server).args(["run", "-s", "-n", "doc", "sh", "-c", "echo $REDLEASE_EPOCH"]));
    assert_code(&second, 0);
    assert_eq!(
        stdout(&second).trim(),
        epoch.to_string(),
        "shared beside shared"
    );
    let busy = run(redlease(&server).args(["run", "-x", "-n", "doc", "true"]));
    assert_code(&busy, 75);
    let lock = run(redlease(&server).args(["run", "-n", "doc", "true"]));
    assert_code(&lock, 0);

    fs::write(&go, "").unwrap();
    assert_code(&finish(first, RUN_TIMEOUT), 0);
    let exclusive = run(redlease(&server).args([
        "run",
        "-x",
        "-n",
        "doc",
        "sh",
        "-c",
        "echo \"$REDLEASE_FENCE ${REDLEASE_EPOCH:-none}\"",
    ]));
    assert_code(&exclusive, 0);
    let out = stdout(&exclusive);
    let (fence, epoch_var) = out.trim().split_once(' ').unwrap();
    assert!(fence.parse::<u64>().unwrap() > epoch, "{out}");
    assert_eq!(epoch_var, "none");
    let both = run(redlease(&server).args(["run", "-s", "-x", "doc", "true"]));
    assert_code(&both, 2);
}

// --- run --permits N / status --permits N -----------------------

fn sem_slot_name(key: &str, slot: u32) -> String {
    format!("{NS}:sem:{{{}}}:{slot}", sha_hex(key))
}

fn sem_fence_name(key: &str, slot: u32) -> String {
    format!("{NS}:sem-fence:{{{}}}:{slot}", sha_hex(key))
}

fn sem_slot_keys(server: &RedisServer) -> Vec<String> {
    server.keys(&format!("{NS}:sem:*"))
}

/// A child for `run --permits`: appends `start <slot> <fence>` to `log`,
/// waits (at most ~20 s, then exits 9) until `<go>-<slot>` exists, appends
/// `end <slot>` and exits 0. Both lines are single short appends.
fn permit_script(log: &Path, go: &Path) -> String {
    format!(
        "echo \"start $REDLEASE_SLOT $REDLEASE_FENCE\" >> {log}; i=0; \
         while [ ! -e {go}-$REDLEASE_SLOT ]; do \
           i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.02; \
         done; echo \"end $REDLEASE_SLOT\" >> {log}",
        log = log.display(),
        go = go.display()
    )
}

/// The `start` lines of `log`: (slot, fence).
fn permit_starts(log: &Path) -> Vec<(u32, u64)> {
    read(log)
        .lines()
        .filter_map(|line| line.strip_prefix("start "))
        .map(|rest| {
            let (slot, fence) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("a slot and a fence: {rest:?}"));
            (
                slot.parse().unwrap_or_else(|_| panic!("a slot: {rest:?}")),
                fence
                    .parse()
                    .unwrap_or_else(|_| panic!("a fence: {rest:?}")),
            )
        })
        .collect()
}

/// The most `start`s without their `end` at any point of `log`.
fn max_concurrency(log: &str) -> usize {
    let (mut running, mut max) = (0usize, 0usize);
    for line in log.lines() {
        if line.starts_with("start ") {
            running += 1;
            max = max.max(running);
        } else if line.starts_with("end ") {
            running = running.checked_sub(1).expect("an end without a start");
        }
    }
    max
}

/// Three `run --permits 2` at once: two run, the third waits until one of
/// them ends and then takes its slot; never more than two at once. Every
/// child sees REDLEASE_SLOT in 0..2 and its slot's fence; a `-n` run while
/// both permits are held exits 75 without running; `status --permits 2`
/// shows both slots and who holds them.
#[test]
fn permits_let_n_runs_hold_at_once_and_the_next_one_waits() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (log, go) = (scratch.path("log"), scratch.path("go"));
    let script = permit_script(&log, &go);
    let start = |extra: &[&str]| {
        redlease(&server)
            .args(["run", "--permits", "2", "--lease", "5s"])
            .args(extra)
            .args(["pool", "sh", "-c", &script])
            .spawn()
            .unwrap()
    };
    let (first, second) = (start(&[]), start(&[]));
    wait_until(FILE_TIMEOUT, "two commands to start", || {
        permit_starts(&log).len() == 2
    });
    let held = permit_starts(&log);
    let mut slots: Vec<u32> = held.iter().map(|&(slot, _)| slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1], "one run per slot; log:\n{}", read(&log));
    assert!(held.iter().all(|&(_, fence)| fence > 0), "{held:?}");
    let mut slot_keys = sem_slot_keys(&server);
    slot_keys.sort();
    assert_eq!(
        slot_keys,
        [sem_slot_name("pool", 0), sem_slot_name("pool", 1)]
    );

    // Both permits held: trying once is busy, and the command does not run.
    let busy = run(redlease(&server).args(["run", "--permits", "2", "-n", "pool", "echo", "ran"]));
    assert_code(&busy, BUSY);
    assert_eq!(stdout(&busy), "", "the command must not run");
    assert!(
        stderr(&busy).contains("all 2 permits are held by someone else"),
        "{}",
        stderr(&busy)
    );

    // Status: both slots, their fences and their holders (redlease's pids).
    let mut status = redlease(&server);
    let out = run(status.args(["status", "--permits", "2", "--json", "pool"]));
    assert_code(&out, HELD);
    let json = stdout(&out);
    assert!(
        json.starts_with(
            r#"{"held":true,"permits":2,"permits_in_use":2,"held_permits":2,"slots":["#
        ),
        "{json}"
    );
    // The start lines do not say which redlease started them: both pids
    // must be there, in either slot.
    for (slot, fence) in &held {
        assert!(
            json.contains(&format!(r#"{{"slot":{slot},"held":true,"remaining_ms":"#)),
            "{json}"
        );
        assert!(
            json.contains(&format!(r#""fence":{fence},"holder":{{"host":"#)),
            "{json}"
        );
    }
    for pid in [first.id(), second.id()] {
        assert!(
            json.contains(&format!(r#""pid":{pid},"command":"sh"}}"#)),
            "{json}"
        );
    }
    let out = run(redlease(&server).args(["status", "--permits", "2", "pool"]));
    assert_code(&out, HELD);
    let text = stdout(&out);
    assert!(text.starts_with("held:      2 of 2 permits\n"), "{text}");
    for (slot, fence) in &held {
        assert!(text.contains(&format!("slot {slot}:")), "{text}");
        assert!(text.contains(&format!("fence {fence}, pid ")), "{text}");
    }
    for pid in [first.id(), second.id()] {
        assert!(text.contains(&format!("pid {pid} on ")), "{text}");
    }
    assert!(!text.contains(" ms"), "human durations: {text}");

    // A third run waits (it says so with -v) ...
    let err_path = scratch.path("third-stderr");
    let third = redlease(&server)
        .args([
            "--verbose",
            "run",
            "--permits",
            "2",
            "--wait",
            "20s",
            "--lease",
            "5s",
        ])
        .args(["pool", "sh", "-c", &script])
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the third run to wait", || {
        read(&err_path).contains("waiting up to")
    });
    assert_eq!(permit_starts(&log).len(), 2, "the third must wait");
    // ... until slot 0 is released, which it then takes.
    let slot0_fence = held.iter().find(|&&(slot, _)| slot == 0).unwrap().1;
    fs::write(format!("{}-0", go.display()), "").unwrap();
    wait_until(FILE_TIMEOUT, "the third command to start", || {
        permit_starts(&log).len() == 3
    });
    let (slot, fence) = permit_starts(&log)[2];
    assert_eq!(slot, 0, "the free slot; log:\n{}", read(&log));
    assert!(
        fence > slot0_fence,
        "a slot's fences increase: {fence} after {slot0_fence}"
    );
    fs::write(format!("{}-1", go.display()), "").unwrap();
    for child in [first, second, third] {
        assert_code(&finish(child, RUN_TIMEOUT), 0);
    }
    let text = read(&log);
    assert_eq!(text.lines().count(), 6, "log:\n{text}");
    assert_eq!(
        max_concurrency(&text),
        2,
        "at most 2 at once, and 2 did; log:\n{text}"
    );
    assert!(
        sem_slot_keys(&server).is_empty(),
        "every permit is released"
    );
    let out = run(redlease(&server).args(["status", "--permits", "2", "--json", "pool"]));
    assert_code(&out, FREE);
    assert!(
        stdout(&out).starts_with(r#"{"held":false,"#),
        "{}",
        stdout(&out)
    );
    // The fence counter of slot 0 is the third run's fence.
    let counter: String = redis::cmd("GET")
        .arg(sem_fence_name("pool", 0))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(counter.parse::<u64>().unwrap(), fence);
}

/// The renewal, signal and loss handling of `run` hold for a permit too:
/// SIGTERM reaches the command and the permit is released; a slot deleted
/// behind the command's back stops it with 122.
#[test]
fn a_permit_run_forwards_signals_and_stops_the_command_when_its_slot_is_lost() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args([
            "run",
            "--permits",
            "3",
            "--lease",
            "5s",
            "sem-term",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    assert_eq!(sem_slot_keys(&server), [sem_slot_name("sem-term", 0)]);
    signal(child.id(), "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_eq!(read(&mark).trim(), "got-term", "the child got SIGTERM");
    assert_code(&out, 0);
    assert!(sem_slot_keys(&server).is_empty(), "the permit is released");

    let (ready, mark) = (scratch.path("ready2"), scratch.path("mark2"));
    let child = redlease(&server)
        .args([
            "run",
            "--permits",
            "3",
            "--lease",
            "1s",
            "sem-lost",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let deleted: u64 = redis::cmd("DEL")
        .arg(sem_slot_name("sem-lost", 0))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(deleted, 1);
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    assert_eq!(
        read(&mark).trim(),
        "got-term",
        "--on-lost term sends SIGTERM"
    );
    assert!(stderr(&out).contains("lost the lease"), "{}", stderr(&out));
}

/// `--permits` outside 1..=1024, or beside -s/-x, is a usage error before
/// anything is sent to Redis (the URL points at a closed port).
#[test]
fn bad_permits_are_usage_errors() {
    let scratch = Scratch::new();
    let mark = scratch.path("ran");
    let touch = format!("touch {}", mark.display());
    let url = closed_port_url();
    let base = ["--url", url.as_str(), "--namespace", NS];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "--permits", "0", "k", "sh", "-c", &touch],
            "from 1 to 1024",
        ),
        (
            vec!["run", "--permits", "1025", "k", "sh", "-c", &touch],
            "from 1 to 1024",
        ),
        (
            vec!["run", "--permits", "-1", "k", "sh", "-c", &touch],
            "from 1 to 1024",
        ),
        (
            vec!["run", "--permits", "two", "k", "sh", "-c", &touch],
            "from 1 to 1024",
        ),
        (
            vec![
                "run",
                "--permits",
                "99999999999999999999",
                "k",
                "sh",
                "-c",
                &touch,
            ],
            "from 1 to 1024",
        ),
        (
            vec!["run", "--permits", "k", "sh", "-c", &touch],
            "from 1 to 1024",
        ),
        (
            vec!["run", "-s", "--permits", "2", "k", "sh", "-c", &touch],
            "cannot be used with",
        ),
        (
            vec!["run", "--permits", "2", "-x", "k", "sh", "-c", &touch],
            "cannot be used with",
        ),
        (vec!["status", "--permits", "0", "k"], "from 1 to 1024"),
        (vec!["status", "--permits", "4096", "k"], "from 1 to 1024"),
    ];
    for (args, says) in cases {
        let out = run(bare().args(base).args(&args));
        assert_code(&out, USAGE);
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("--permits"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    assert!(!mark.exists(), "no command ran");
}

/// A run with another permit count than the one in use does not run, and
/// exits with the conflict code; status says which count is in use.
#[test]
fn a_semaphore_in_use_with_another_count_is_a_conflict() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args([
            "run",
            "--permits",
            "2",
            "--lease",
            "5s",
            "resized",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let out = run(redlease(&server).args(["run", "--permits", "3", "resized", "echo", "ran"]));
    assert_code(&out, BUSY);
    assert_eq!(stdout(&out), "", "the command must not run");
    assert!(
        stderr(&out).contains("in use with 2 permits"),
        "{}",
        stderr(&out)
    );
    let out = run(redlease(&server).args(["status", "--permits", "3", "resized"]));
    assert_code(&out, HELD);
    let text = stdout(&out);
    assert!(text.starts_with("held:      1 of 3 permits\n"), "{text}");
    assert!(text.contains("in use:    with 2 permits"), "{text}");
    signal(child.id(), "TERM");
    assert_code(&finish(child, RUN_TIMEOUT), 0);
    // Drained: the new count applies.
    let out = run(redlease(&server).args([
        "run",
        "--permits",
        "3",
        "resized",
        "sh",
        "-c",
        "echo $REDLEASE_SLOT",
    ]));
    assert_code(&out, 0);
    assert_eq!(stdout(&out).trim(), "0");
}

/// `run --permits` and `status --permits` as the README's least-privilege
/// user with the semaphore's rules and `~<ns>:sem-holder:{*`: nothing
/// refused. Without the holder rule, status still works, without holders.
#[test]
fn permits_run_and_status_work_as_the_least_privilege_acl_user() {
    let server = RedisServer::start();
    let url = least_privilege_user(&server, &format!("~{NS}:sem-holder:{{*"));
    let as_user = || {
        let mut cmd = bare();
        cmd.args(["--url", &url, "--namespace", NS]);
        cmd
    };
    let out = run(as_user().args(["status", "--permits", "2", "acl-pool"]));
    assert_code(&out, FREE);
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = as_user()
        .args([
            "run",
            "--permits",
            "2",
            "--lease",
            "2s",
            "acl-pool",
            "sh",
            "-c",
        ])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let out = run(as_user().args(["status", "--json", "--permits", "2", "acl-pool"]));
    assert_code(&out, HELD);
    let json = stdout(&out);
    assert!(
        json.contains(&format!(r#""pid":{},"command":"sh"}}"#, child.id())),
        "{json}"
    );
    let log = acl_log(&server);
    assert!(log.is_empty(), "Redis refused something: {log:?}");

    // A user without the holder rule: the rest of the status still shows.
    let url = least_privilege_user(&server, "");
    let out = run(bare().args(["--url", &url, "--namespace", NS]).args([
        "status",
        "--json",
        "--permits",
        "2",
        "acl-pool",
    ]));
    assert_code(&out, HELD);
    let json = stdout(&out);
    assert!(json.contains(r#""held_permits":1,"#), "{json}");
    assert!(json.contains(r#""holder":null"#), "{json}");
    assert!(!json.contains(r#""command":"sh""#), "{json}");

    signal(child.id(), "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 0);
    for output in [stdout(&out), stderr(&out)] {
        assert!(!output.contains("s3cret-pass"), "{output}");
    }
}

/// `redlease leader NAME`: the leader's value, term and time left (text
/// and JSON), exit 0; nobody leading, exit 1; Redis unreachable, exit 69;
/// `--watch` prints every change until SIGTERM, then exits 0.
#[test]
fn leader_shows_the_elections_leader_and_watches_its_changes() {
    use std::io::{BufRead, BufReader};

    let server = RedisServer::start();
    let out = run(redlease(&server).args(["leader", "jobs"]));
    assert_code(&out, FREE);
    assert_eq!(stdout(&out), "no leader (version 0.0)\n");

    let locker = redlease::blocking::Locker::connect(server.url(), redlease::Config::new(NS))
        .expect("connect the candidate");
    let election = locker.election("jobs").unwrap();
    let leadership = election.campaign(b"host-a:4242").unwrap();
    let term = leadership.term();
    let out = run(redlease(&server).args(["leader", "jobs"]));
    assert_code(&out, HELD);
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("leader term {term}, version {term}.0, "))
            && text.ends_with(": host-a:4242\n"),
        "{text}"
    );
    let out = run(redlease(&server).args(["leader", "--json", "jobs"]));
    assert_code(&out, HELD);
    let json = stdout(&out);
    assert!(
        json.starts_with(&format!(
            r#"{{"leader":true,"term":{term},"version":"{term}.0","remaining_ms":"#
        )) && json.ends_with(",\"value\":\"host-a:4242\"}\n"),
        "{json}"
    );
    assert!(!stderr(&out).contains("host-a"), "the value only on stdout");

    let mut child = redlease(&server)
        .args(["leader", "--watch", "--json", "jobs"])
        .spawn()
        .expect("spawn redlease leader --watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(
        first.contains(r#""value":"host-a:4242","resync":true"#),
        "{first}"
    );
    leadership.proclaim(b"host-a:4243").unwrap();
    let next = lines.next().unwrap().unwrap();
    assert!(
        next.contains(&format!(r#""version":"{term}.1""#))
            && next.contains(r#""value":"host-a:4243","resync":false"#),
        "{next}"
    );
    leadership.resign().unwrap();
    let vacant = lines.next().unwrap().unwrap();
    assert!(vacant.starts_with(r#"{"leader":false"#), "{vacant}");
    signal(child.id(), "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, 0);

    let out = run(bare().args([
        "--url",
        &closed_port_url(),
        "--namespace",
        NS,
        "leader",
        "jobs",
    ]));
    assert_code(&out, UNAVAILABLE);
}

/// For a vacancy, the one-shot `leader` shows the version the watch shows
/// (the log's: the end of the last term), not 0.0; in text and JSON.
#[test]
fn leader_shows_a_vacancys_version_as_the_watch_does() {
    let server = RedisServer::start();
    let locker = redlease::blocking::Locker::connect(server.url(), redlease::Config::new(NS))
        .expect("connect the candidate");
    let election = locker.election("vacated").unwrap();
    let leadership = election.campaign(b"host-a:1").unwrap();
    let term = leadership.term();
    leadership.proclaim(b"host-a:2").unwrap();
    leadership.resign().unwrap();
    // The end of the term: one more than its last proclaim.
    let version = format!("{term}.2");

    let out = run(redlease(&server).args(["leader", "vacated"]));
    assert_code(&out, FREE);
    assert_eq!(stdout(&out), format!("no leader (version {version})\n"));
    let out = run(redlease(&server).args(["leader", "--json", "vacated"]));
    assert_code(&out, FREE);
    let one_shot = stdout(&out);
    assert!(
        one_shot.contains(&format!(r#""version":"{version}""#)),
        "{one_shot}"
    );

    let mut watch = redlease(&server)
        .args(["leader", "--watch", "--json", "vacated"])
        .spawn()
        .unwrap();
    let first = next_line(&stdout_lines(&mut watch));
    signal(watch.id(), "TERM");
    assert_code(&finish(watch, RUN_TIMEOUT), 0);
    assert_eq!(
        first,
        one_shot.trim_end().replace('}', r#","resync":true}"#),
        "the watch's first line is the one-shot's state"
    );
}

/// `leader --watch` says once on standard error when Redis stops
/// answering (and who it is, never the credentials), and once when it is
/// back; the changes go on being shown on standard output.
#[test]
fn leader_watch_says_when_redis_is_unreachable_and_when_it_is_back() {
    let server = RedisServer::builder().password("w4tch-s3cret").start();
    let scratch = Scratch::new();
    let err_path = scratch.path("stderr");
    let mut watch = bare()
        .args(["--url", &server.url(), "--namespace", NS])
        .args(["leader", "--watch", "outage"])
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let lines = stdout_lines(&mut watch);
    let first = next_line(&lines);
    assert!(first.starts_with("no leader"), "{first}");
    assert_eq!(read(&err_path), "", "nothing to say while Redis answers");

    let address = format!("127.0.0.1:{}", server.port());
    {
        let _paused = server.pause_guard();
        wait_until(RUN_TIMEOUT, "the watch to say Redis is unreachable", || {
            read(&err_path).contains("cannot reach Redis")
        });
    }
    wait_until(RUN_TIMEOUT, "the watch to say Redis is back", || {
        read(&err_path).contains("answers again")
    });
    let locker = redlease::blocking::Locker::connect(server.url(), redlease::Config::new(NS))
        .expect("connect the candidate");
    let leadership = locker
        .election("outage")
        .unwrap()
        .campaign(b"after")
        .unwrap();
    let next = next_line(&lines);
    assert!(next.ends_with(": after"), "{next}");
    leadership.resign().unwrap();
    signal(watch.id(), "TERM");
    assert_code(&finish(watch, RUN_TIMEOUT), 0);

    let err = read(&err_path);
    assert_eq!(err.matches("cannot reach Redis").count(), 1, "{err}");
    assert_eq!(err.matches("answers again").count(), 1, "{err}");
    assert!(err.contains(&address), "{err}");
    assert!(!err.contains("w4tch-s3cret"), "{err}");
}

/// `redlease elect NAME -- COMMAND`: the command runs as the leader with
/// its term (REDLEASE_FENCE = REDLEASE_TERM) and the election's name; the
/// leader shows its value; a second `elect -n` is busy (75); a waiting
/// `elect` takes over in a larger term when the first resigns (its command
/// exited after SIGTERM), and nobody leads afterwards.
#[test]
fn elect_runs_the_command_as_leader_and_a_waiting_candidate_takes_over() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, _mark, env, script) = recording_script(
        &scratch,
        "$REDLEASE_FENCE $REDLEASE_TERM $REDLEASE_ELECTION",
    );
    let first = redlease(&server)
        .args([
            "elect", "--value", "host-a", "--lease", "5s", "jobs", "--", "sh", "-c",
        ])
        .arg(script)
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the leader's command to start", || {
        ready.exists()
    });
    let seen = read(&env);
    let fields: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{seen}");
    assert_eq!((fields[0], fields[2]), (fields[1], "jobs"), "{seen}");
    let term: u64 = fields[1].parse().unwrap();
    let out = run(redlease(&server).args(["leader", "jobs"]));
    assert_code(&out, HELD);
    assert!(
        stdout(&out).starts_with(&format!("leader term {term},"))
            && stdout(&out).ends_with(": host-a\n"),
        "{}",
        stdout(&out)
    );
    let out = run(redlease(&server).args(["elect", "-n", "jobs", "true"]));
    assert_code(&out, BUSY);

    let second_env = scratch.path("second-env");
    let second = redlease(&server)
        .args(["elect", "jobs", "--", "sh", "-c"])
        .arg(format!("echo $REDLEASE_TERM > {}", second_env.display()))
        .spawn()
        .unwrap();
    signal(first.id(), "TERM");
    let out = finish(first, RUN_TIMEOUT);
    assert_code(&out, 0); // the command's own status after its trap
    let out = finish(second, RUN_TIMEOUT);
    assert_code(&out, 0);
    let second_term: u64 = read(&second_env).trim().parse().unwrap();
    assert!(second_term > term, "{second_term} > {term}");
    let out = run(redlease(&server).args(["leader", "jobs"]));
    assert_code(&out, FREE);
}

/// A leadership lost while its command runs (its lease deleted behind its
/// back) stops the command with SIGTERM: exit 122, as `run`.
#[test]
fn a_lost_leadership_terminates_the_elected_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["elect", "--lease", "1s", "lost-job", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the leader's command to start", || {
        ready.exists()
    });
    let lease = format!("{NS}:elect:{{{}}}", sha_hex("lost-job"));
    let _: i64 = redis::cmd("DEL")
        .arg(&lease)
        .query(&mut server.conn())
        .unwrap();
    let out = finish(child, RUN_TIMEOUT);
    assert_eq!(read(&mark).trim(), "got-term", "the command got SIGTERM");
    assert_code(&out, LEASE_LOST);
}

/// `redlease leader` (also `--watch`) needs only the README's election
/// observer rules: read-only key rights on the election's lease and log;
/// `redlease elect` the candidate's rules. Nothing lands in `ACL LOG`.
#[test]
fn leader_and_elect_work_as_the_least_privilege_acl_users() {
    use std::io::{BufRead, BufReader};

    let server = RedisServer::start();
    let candidate = least_privilege_user(
        &server,
        &format!(
            "+xadd +xrange +xrevrange +evalsha_ro +eval_ro \
             ~{NS}:elect:{{* ~{NS}:elect-term:{{* ~{NS}:elect-log:{{*"
        ),
    );
    let observer_rules = format!(
        "on >obs-pass resetkeys resetchannels -@all +evalsha_ro +eval_ro +get +pttl \
         +xrange +xrevrange +subscribe +ping +config|get +info +set \
         %R~{NS}:elect:{{* %R~{NS}:elect-log:{{* ~{NS}:key-names &{NS}:lock-released"
    );
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("observer");
    for rule in observer_rules.split_whitespace() {
        acl.arg(rule);
    }
    let _: () = acl.query(&mut server.conn()).unwrap();
    let observer = server
        .url()
        .replace("redis://", "redis://observer:obs-pass@");
    let as_user = |url: &str| {
        let mut cmd = bare();
        cmd.args(["--url", url, "--namespace", NS]);
        cmd
    };
    let out = run(as_user(&observer).args(["leader", "acl-elect"]));
    assert_code(&out, FREE);

    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let leader = as_user(&candidate)
        .args(["elect", "--value", "host-a", "acl-elect", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the leader's command to start", || {
        ready.exists()
    });
    let out = run(as_user(&observer).args(["leader", "acl-elect"]));
    assert_code(&out, HELD);
    assert!(stdout(&out).ends_with(": host-a\n"), "{}", stdout(&out));
    let mut watch = as_user(&observer)
        .args(["leader", "--watch", "acl-elect"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.ends_with(": host-a"), "{first}");
    signal(leader.id(), "TERM");
    assert_code(&finish(leader, RUN_TIMEOUT), 0);
    let vacant = lines.next().unwrap().unwrap();
    assert!(vacant.starts_with("no leader"), "{vacant}");
    signal(watch.id(), "TERM");
    assert_code(&finish(watch, RUN_TIMEOUT), 0);
    let log = acl_log(&server);
    assert!(log.is_empty(), "Redis refused something: {log:?}");
}

/// The fence counter of `key` in Redis.
fn fence_of(server: &RedisServer, key: &str) -> u64 {
    let counter: String = redis::cmd("GET")
        .arg(fence_name(key))
        .query(&mut server.conn())
        .unwrap();
    counter.parse().unwrap()
}

/// `run --also b --also c a`: the three keys are held together while the
/// command runs, each with its own fence (REDLEASE_FENCES, KEY first;
/// REDLEASE_FENCE is KEY's), `status` names the run as each key's holder,
/// SIGTERM is passed on, and every key is released at the end.
#[test]
fn a_run_with_also_keys_holds_them_all_with_a_fence_each() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark, env, script) =
        recording_script(&scratch, "$REDLEASE_FENCE|$REDLEASE_FENCES|$REDLEASE_KEY");
    let child = redlease(&server)
        .args(["run", "--lease", "5s", "--also", "b", "--also", "c", "a"])
        .args(["--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let mut held = lock_keys(&server);
    held.sort();
    let mut all = vec![lock_name("a"), lock_name("b"), lock_name("c")];
    all.sort();
    assert_eq!(held, all, "every key is held while the command runs");
    let text = read(&env);
    let fields: Vec<&str> = text.trim().split('|').collect();
    let fences: Vec<u64> = fields[1].split(' ').map(|f| f.parse().unwrap()).collect();
    assert_eq!(
        fences,
        ["a", "b", "c"].map(|k| fence_of(&server, k)),
        "{text}"
    );
    assert_eq!(fields[0], fences[0].to_string(), "KEY's fence: {text}");
    assert_eq!(fields[2], "a", "{text}");
    for key in ["a", "c"] {
        let (code_held, json) = status_of(&server, key, true);
        assert_eq!(code_held, HELD, "{json}");
        assert!(json.contains(&format!(r#""pid":{pid},"#)), "{key}: {json}");
    }
    // A run of one of the keys alone is busy meanwhile.
    let out = run(redlease(&server).args(["run", "-n", "c", "--", "sh", "-c", "echo ran"]));
    assert_code(&out, BUSY);
    assert_eq!(stdout(&out), "");

    signal(pid, "TERM");
    let out = finish(child, RUN_TIMEOUT);
    assert_eq!(read(&mark).trim(), "got-term", "the child got SIGTERM");
    assert_code(&out, 0);
    assert!(lock_keys(&server).is_empty(), "every key is released");
}

/// A key held elsewhere: `-n` exits busy at once and takes none of the
/// keys; with `--wait` the run waits (saying so with `--verbose`) and runs
/// once the holder released it, with a higher fence for that key.
#[test]
fn an_also_run_takes_no_key_while_one_is_held_and_waits_for_all() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark, err_path) = (
        scratch.path("ready"),
        scratch.path("mark"),
        scratch.path("stderr"),
    );
    let holder = redlease(&server)
        .args(["run", "--lease", "5s", "b", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the holder to start", || ready.exists());
    let held_fence = fence_of(&server, "b");

    let cmd = ["--", "sh", "-c", "echo \"ran $REDLEASE_FENCES\""];
    let out = run(redlease(&server)
        .args(["run", "-n", "--also", "b", "a"])
        .args(cmd));
    assert_code(&out, BUSY);
    assert_eq!(stdout(&out), "", "the command must not run");
    assert!(
        stderr(&out).contains("held by someone else"),
        "{}",
        stderr(&out)
    );
    assert_eq!(lock_keys(&server), [lock_name("b")], "a is not taken");

    let waiter = redlease(&server)
        .args(["--verbose", "run", "--wait", "20s", "--also", "b", "a"])
        .args(cmd)
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the run to wait", || {
        read(&err_path).contains("waiting up to")
    });
    signal(holder.id(), "TERM");
    assert_code(&finish(holder, RUN_TIMEOUT), 0);
    let out = finish(waiter, RUN_TIMEOUT);
    assert_code(&out, 0);
    let ran = stdout(&out);
    let fences: Vec<u64> = ran
        .trim()
        .strip_prefix("ran ")
        .unwrap_or_else(|| panic!("{ran}"))
        .split(' ')
        .map(|f| f.parse().unwrap())
        .collect();
    assert!(fences[1] > held_fence, "b's next fence: {ran}");
    assert!(lock_keys(&server).is_empty(), "every key is released");
}

/// Runs taking `{a, b}` and `{b, a}` at the same time, in a loop: every
/// run gets both keys (no deadlock) and no two commands overlap.
#[test]
fn also_runs_in_opposite_orders_never_deadlock_or_overlap() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let log = scratch.path("log");
    let script = format!(
        "echo start >> {log}; sleep 0.1; echo end >> {log}",
        log = log.display()
    );
    const ROUNDS: usize = 3;
    thread::scope(|s| {
        for (key, also) in [("a", "b"), ("b", "a")] {
            let script = &script;
            let server = &server;
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let out = run(redlease(server)
                        .args(["run", "--wait", "20s", "--lease", "5s", "--also", also, key])
                        .args(["--", "sh", "-c", script]));
                    assert_code(&out, 0);
                }
            });
        }
    });
    let text = read(&log);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * 2 * ROUNDS, "log:\n{text}");
    for pair in lines.chunks(2) {
        assert_eq!(pair, ["start", "end"], "runs overlapped; log:\n{text}");
    }
    assert!(lock_keys(&server).is_empty(), "every run released its keys");
}

/// One of the keys deleted behind the command's back: the next renewal
/// finds the lease partial, gives up every key and stops the command
/// (exit 122), as for one key.
#[test]
fn losing_one_also_key_stops_the_command_and_frees_every_key() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (ready, mark) = (scratch.path("ready"), scratch.path("mark"));
    let child = redlease(&server)
        .args(["run", "--lease", "1s", "--also", "y", "x", "--", "sh", "-c"])
        .arg(trap_term_script(&ready, &mark))
        .spawn()
        .unwrap();
    wait_until(FILE_TIMEOUT, "the child to start", || ready.exists());
    let deleted: u64 = redis::cmd("DEL")
        .arg(lock_name("y"))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(deleted, 1);
    let out = finish(child, RUN_TIMEOUT);
    assert_code(&out, LEASE_LOST);
    assert_eq!(read(&mark).trim(), "got-term", "--on-lost term");
    assert!(stderr(&out).contains("lost the lease"), "{}", stderr(&out));
    assert!(lock_keys(&server).is_empty(), "x is given up too");
}

/// A waiting multi-key lease (the library's `acquire_all_with`, waiting
/// behind a held key of its set) reserves the set's free key: `status` of
/// that key says it is reserved, not held (exit 1 as for a free key; the
/// counter's fence, no holder although an earlier run's record is still
/// there), with the reservation's time left, in text and JSON, and never
/// the token. The held key shows as before; once the waiter is granted,
/// the reserved key shows as held with the lease's fence.
#[test]
fn status_shows_a_key_reserved_by_a_waiting_multi_key_lease_as_reserved() {
    use redlease::{blocking::Locker, AcquireOptions, Config};

    let server = RedisServer::start();
    // A grant by `run` leaves the key's fence and its holder record behind.
    assert_code(
        &run(redlease(&server).args(["run", "spare", "--", "true"])),
        0,
    );
    let fence = fence_of(&server, "spare");
    let holder = Locker::connect(server.url(), Config::new(NS)).expect("connect the holder");
    let held = holder.acquire("busy").expect("take the busy key");
    // A safety poll this long makes the reservation last 30 s (3 × the
    // interval, docs/PROTOCOL.md §6) without the waiter refreshing it.
    let config = Config::new(NS).notify_poll_interval(Duration::from_secs(10));
    let waiter = Locker::connect(server.url(), config).expect("connect the waiter");
    let lock_value = || -> Option<String> {
        redis::cmd("GET")
            .arg(lock_name("spare"))
            .query(&mut server.conn())
            .unwrap()
    };
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter.acquire_all_with(
                &["spare", "busy"],
                AcquireOptions::new().wait(Duration::from_secs(30)),
            )
        });
        wait_until(FILE_TIMEOUT, "the waiter to reserve the free key", || {
            lock_value().is_some()
        });
        let value = lock_value().unwrap_or_default();
        let token = value.split(':').next().unwrap_or_default().to_owned();
        assert!(
            !token.is_empty() && value.starts_with(&format!("{token}:r")),
            "a reservation: {value}"
        );

        let (code_json, json) = status_of(&server, "spare", true);
        assert_eq!(code_json, FREE, "{json}");
        let prefix = format!(
            r#"{{"held":false,"remaining_ms":null,"fence":{fence},"holder":null,"reserved":{{"remaining_ms":"#
        );
        let left: u64 = json
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix("}}\n"))
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("{json}"));
        assert!(left > 0 && left <= 30_000, "{json}");
        let (code_text, text) = status_of(&server, "spare", false);
        assert_eq!(code_text, FREE, "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], "held:      no", "{text}");
        assert!(
            lines[1].starts_with("reserved:  by a waiting multi-key lease, ")
                && lines[1].ends_with(" left unless renewed"),
            "{text}"
        );
        assert_eq!(
            lines[2..],
            ["remaining: -", &format!("fence:     {fence}")],
            "{text}"
        );
        for output in [&json, &text] {
            assert!(!output.contains(&token), "{output}");
        }

        let (code_busy, busy) = status_of(&server, "busy", true);
        assert_eq!(code_busy, HELD, "{busy}");
        assert!(
            busy.starts_with(r#"{"held":true,"remaining_ms":"#)
                && busy.ends_with("\"holder\":null}\n"),
            "{busy}"
        );

        held.release().expect("release the busy key");
        let lease = waiting
            .join()
            .expect("the waiter's thread")
            .expect("granted once the busy key is free");
        let granted = lease.fence_of("spare").expect("a fence for every key");
        let (code_held, json) = status_of(&server, "spare", true);
        assert_eq!(code_held, HELD, "{json}");
        assert!(
            json.starts_with(r#"{"held":true,"#)
                && json.contains(&format!(r#""fence":{granted},"holder":null}}"#)),
            "{json}"
        );
        lease.release().expect("release the multi-key lease");
    });
}

/// `--also` with `--permits`, `-s` or `-x`, an empty `--also` key: usage
/// errors before Redis is asked; a key given twice or more than 64 keys:
/// refused by the library before any lock is taken (exit 2).
#[test]
fn bad_also_keys_are_usage_errors() {
    let unreachable = closed_port_url();
    for args in [
        &["run", "--also", "b", "--permits", "2", "a", "true"][..],
        &["run", "--also", "b", "-s", "a", "true"],
        &["run", "--also", "b", "-x", "a", "true"],
        &["run", "--also", "", "a", "true"],
    ] {
        let out = run(bare()
            .args(["--url", &unreachable, "--namespace", NS])
            .args(args));
        assert_code(&out, USAGE);
    }
    let out = run(bare()
        .args(["--url", &unreachable, "--namespace", NS])
        .args(["run", "--also", "", "a", "true"]));
    assert!(
        stderr(&out).contains("invalid key 2: must not be empty"),
        "{}",
        stderr(&out)
    );

    let server = RedisServer::start();
    let out =
        run(redlease(&server).args(["run", "--also", "a", "a", "--", "sh", "-c", "echo ran"]));
    assert_code(&out, USAGE);
    assert_eq!(stdout(&out), "");
    assert!(
        stderr(&out).contains("keys 1 and 2 are the same"),
        "{}",
        stderr(&out)
    );
    let mut many = redlease(&server);
    many.arg("run");
    for i in 0..64 {
        many.args(["--also", &format!("k{i}")]);
    }
    let out = run(many.args(["k", "--", "sh", "-c", "echo ran"]));
    assert_code(&out, USAGE);
    assert!(
        stderr(&out).contains("1 to 64 keys, got 65"),
        "{}",
        stderr(&out)
    );
    assert!(lock_keys(&server).is_empty());
}

/// The CLI names keys without hash tags: in a namespace whose lockers
/// recorded `tagged` (docs/PROTOCOL.md §2), `run` is refused at connect
/// (exit 2, naming the setting) and the command does not run.
#[test]
fn a_run_in_a_namespace_of_tagged_lockers_is_refused() {
    let server = RedisServer::start();
    let _: () = redis::cmd("SET")
        .arg(format!("{NS}:key-names"))
        .arg("tagged")
        .query(&mut server.conn())
        .unwrap();
    let out = run(redlease(&server).args(["run", "k", "--", "sh", "-c", "echo ran"]));
    assert_code(&out, USAGE);
    assert_eq!(stdout(&out), "", "the command must not run");
    assert!(stderr(&out).contains("key_hash_tags"), "{}", stderr(&out));
    assert!(lock_keys(&server).is_empty());
}
