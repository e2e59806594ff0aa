//! The command line: clap definitions, help texts and exit codes.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::duration::{self, parse_lease, parse_wait};

/// Exit codes of `redlease` itself. Everything else is the command's own
/// status (or 128 + N when it was killed by signal N).
pub(crate) mod exit {
    /// Usage error: a missing or malformed option or argument. Nothing was
    /// sent to Redis and the command did not run.
    pub(crate) const USAGE: u8 = 2;
    /// Redis was unreachable or failed (EX_UNAVAILABLE); the command did not
    /// run.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// An internal error (EX_SOFTWARE), e.g. signal handling could not be
    /// set up; the command did not run.
    pub(crate) const SOFTWARE: u8 = 70;
    /// The lock (with `--permits`, every permit) is held by someone else:
    /// at once with `--wait 0`, or when `--wait` ran out (EX_TEMPFAIL; as
    /// `flock -E`, one code for both); also a semaphore in use with another
    /// `--permits` count. Overridable with `--conflict-exit-code`.
    pub(crate) const BUSY: u8 = 75;
    /// The lease was lost while the command ran, and the command was
    /// stopped (`--on-lost term` or `kill`). Not 124 or 125, which
    /// `timeout(1)` uses for "killed at its deadline" and "timeout itself
    /// failed".
    pub(crate) const LEASE_LOST: u8 = 122;
    /// The command was found but could not be started.
    pub(crate) const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
    /// Base of "killed by signal N" (128 + N).
    pub(crate) const SIGNAL_BASE: u8 = 128;
}

const ABOUT: &str = "Run a command while holding a lease on a Redis key, with a fencing token";

const LONG_ABOUT: &str = "\
Run a command while holding a lease on a Redis key, with a fencing token.

A lease is a lock with a time limit. `redlease run` acquires the lease on KEY, \
runs the command, renews the lease while the command runs, and releases it when \
the command exits, so that at most one copy of the command runs at a time across \
every machine that uses the same Redis, namespace and key. If the lease is lost \
while the command runs (Redis unreachable, the lock deleted or taken over), the \
command is stopped; see `redlease run --help`.

With --permits N, `redlease run` takes one of N permits of KEY's fenced \
semaphore instead, so that at most N copies of the command run at once.

Every grant carries a fencing token: a number that strictly increases with every \
grant of the key (of a semaphore: of the permit's slot). The command gets it as REDLEASE_FENCE. A store that remembers \
the highest fence it accepted and refuses writes with a lower one turns a holder \
that lost its lease without noticing (a paused VM, a network partition) into a \
rejected write; without such a store, the lease is a best-effort guard.

The server (--url, else REDLEASE_URL, else REDIS_URL) and the namespace \
(--namespace or REDLEASE_NAMESPACE) have no defaults. The password can stay \
out of the URL (and out of `ps`): --password-file FILE, or REDISCLI_AUTH. \
For namespace NS and key KEY the lock is stored at NS:lock:{SHA} and the fence counter at NS:lock-fence:{SHA}, where SHA \
is the lowercase hex SHA-256 of KEY; it is compatible with the redlease library. \
A semaphore's slot I is NS:sem:{SHA}:I, with its fence counter at \
NS:sem-fence:{SHA}:I and the permit count in use at NS:sem-permits:{SHA}.";

/// Shown at the end of `--help` (top level and `run`).
pub(crate) const EXIT_CODES: &str = "\
Exit codes of run:
  N      the command ran and exited with status N
  128+N  the command was killed by signal N, or redlease got signal N
         (SIGINT, SIGTERM, SIGHUP, SIGQUIT) before the command started
  2      usage error (bad or missing option, no URL or namespace, bad
         duration, no command); nothing was sent to Redis
  69     Redis unavailable or failed; the command did not run
  70     internal error (e.g. signal handling could not be set up)
  75     the lock is held by someone else (with --permits: every
         permit, or the semaphore is in use with another count; with
         --also: any of the keys): at
         once (--wait 0, -n) or when --wait ran out; the command did
         not run (change it with -E/--conflict-exit-code, e.g. 0 for
         cron jobs)
  122    the lease was lost while the command ran, and the command was
         stopped (--on-lost term or kill)
  126    the command could not be started
  127    the command was not found
Exit codes of status: 0 held, 1 free (also when only reserved by a
waiting multi-key run; with --permits: 0 when any permit is held), 2
usage error, 69 Redis unavailable.
Exit codes of elect: as run (75: someone else leads; 122: the
leadership was lost). Exit codes of leader: 0 someone leads, 1 nobody
(--watch: 0 at SIGINT or SIGTERM), 2 usage error, 69 Redis unavailable.";

const RUN_LONG_ABOUT: &str = "\
Acquire the lease on KEY, run COMMAND while holding it, then release it.

The command runs with its standard input, output and error inherited, and with \
these variables added to its environment:
  REDLEASE_FENCE     this grant's fencing token (a decimal integer)
  REDLEASE_KEY       KEY
  REDLEASE_LEASE_MS  the lease length in milliseconds
  REDLEASE_SLOT      with --permits N: the permit's slot, 0 to N-1
                     (REDLEASE_FENCE is then that slot's fence)
  REDLEASE_FENCES    with --also: every key's fence, space-separated, in
                     the order KEY, then the --also keys (REDLEASE_FENCE
                     is KEY's)

With --permits N, run takes one of N permits of KEY's fenced semaphore: at \
most N runs of KEY hold one at once, each in a slot of its own whose fence \
increases with every grant of that slot (a store checks the pair slot and \
fence). Runs of one KEY must agree on N: while permits of another count are \
held, the run exits as if busy; the new count applies once all are released. \
The semaphore is not KEY's lock, nor its read-write lease: they do not \
exclude each other.

With --also KEY2 (repeatable), run takes KEY and every --also key as one \
multi-key lease: all of them at once or none, never some, and a run waiting \
for them holds none, so runs taking the same keys in other orders never \
deadlock. Each key is locked under its own name, with its own fence: a run \
of KEY2 alone (or the library's `acquire(KEY2)`) excludes it and the other \
way round. While it waits, the keys it found free are reserved for it \
(others see them held), so runs of single keys do not starve it.

While the command runs, the lease is renewed every half lease. SIGINT, SIGTERM, \
SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to redlease are passed on to the \
command (a SIGINT, SIGQUIT or SIGHUP that the terminal sends to the whole \
foreground job, such as Ctrl-C, reaches the command directly and is not sent \
twice; one sent with kill is passed on); a command still running --kill-after \
after a passed-on SIGINT, SIGTERM, SIGHUP or SIGQUIT is sent SIGKILL. Before \
the command starts, SIGINT, SIGTERM, SIGHUP and SIGQUIT end the wait (exit \
128+N) and SIGUSR1 and SIGUSR2 are ignored. When the command exits, the lease is \
released and redlease exits with the command's status. On Linux, if redlease \
itself is killed (SIGKILL) the command is killed too; the lease then ends at its \
TTL.

The command follows KEY, with or without `--` in between (use `--` when the \
command's first word starts with `-`).

The lease counts as lost when a renewal finds it expired or held by someone \
else, or when the lease's time runs out on the local clock without a confirmed \
renewal (so a holder cut off from Redis stops the command before another holder \
can start); a renewal that fails with a Redis error, a timeout included, is sent \
again while the lease has time left. The loss is reported on standard error and \
--on-lost decides what happens to the command.

Durations are seconds when bare (5, 1.5, as timeout(1) and flock -w), or \
numbers with units ms, s, m, h, d, also combined: 500ms, 1.5s, 1m30s, 1d.

Examples:
  # Run at most one report at a time; skip silently when another runs.
  redlease --namespace billing run -q -n -E 0 nightly-report ./report.sh

  # Wait up to 2 minutes for the lock, with a 1 minute lease.
  redlease --namespace deploy run -w 2m -l 1m prod ./deploy.sh --all

  # At most 3 backups at once across every host; wait for a permit.
  redlease --namespace ops run --permits 3 -w forever backup ./backup.sh

  # Move money between two accounts, both locked at once.
  redlease --namespace bank run -w 10s --also account:9 account:7 ./transfer.sh";

const STATUS_LONG_ABOUT: &str = "\
Show whether KEY is held, how long its lease has left, the current value of \
its fence counter (the fence of the last grant; the next grant gets a higher \
one) and, when the holder is a `redlease run` that recorded it, who holds it \
(host, pid and program name). The owner token is never shown.

With --permits N, it shows KEY's fenced semaphore (as `run --permits N` \
takes it) instead: how many of its permits are held and, for each held slot, \
its time left, its fence and its holder; a note when the semaphore is in use \
with another count. The JSON lists every slot, free ones with their fence \
counters.

A key reserved by a waiting multi-key run (`run --also`, the library's \
`acquire_all`), which keeps the keys it found free while it waits for the \
others, is shown as reserved, not held: it has no fence and no holder of \
its own. A `reserved:` line says so, with the reservation's time left (the \
waiter renews it while it waits); the JSON adds \"reserved\": \
{\"remaining_ms\": N}, a field only a reserved key has.

Exits 0 when KEY is held (with --permits, when any permit is) and 1 when it \
is free or only reserved (so `redlease status KEY` can be tested like \
`flock -n`; a reserved key is still busy for `run` until the multi-key run \
is granted and done, or its reservation lapses), 2 on a usage error and 69 \
when Redis cannot be asked. It needs only GET, MGET and \
PTTL on the lock's (or the semaphore's) names (no MULTI/EXEC).";

/// `redlease`'s command line.
#[derive(Debug, Parser)]
#[command(
    name = "redlease",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_long_help = EXIT_CODES,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    #[command(flatten, next_help_heading = "Redis")]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Redis server URL, e.g. redis://127.0.0.1:6379/0,
    /// redis://USER@host:6379/0 or rediss://host:6380/0 (TLS); required, no
    /// default. Taken from --url, else REDLEASE_URL, else REDIS_URL (which
    /// other programs may use for a server of their own)
    #[arg(long, env = "REDLEASE_URL", hide_env_values = true, global = true)]
    pub(crate) url: Option<String>,

    /// Read the Redis password from this file (a trailing newline is not
    /// part of it) instead of the URL, where `ps` would show it; it wins
    /// over a password in the URL. Without it and without a password in
    /// the URL, the password is taken from REDISCLI_AUTH (as redis-cli)
    #[arg(
        long,
        env = "REDLEASE_PASSWORD_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub(crate) password_file: Option<std::path::PathBuf>,

    /// PEM file of the certificate authority that signed the server's TLS
    /// certificate, for rediss:// URLs (default: the system's trusted
    /// roots); not used with another URL
    #[arg(long, env = "REDLEASE_TLS_CA_CERT", global = true, value_name = "FILE")]
    pub(crate) tls_ca_cert: Option<std::path::PathBuf>,

    /// The URL came from REDLEASE_URL, not --url (set from clap's matches).
    #[arg(skip)]
    pub(crate) url_from_env: bool,

    /// --tls-ca-cert came from REDLEASE_TLS_CA_CERT (set from clap's
    /// matches): a CA set for every run is not worth a note when unused.
    #[arg(skip)]
    pub(crate) tls_ca_cert_from_env: bool,

    /// Prefix of every name stored in Redis; processes must use the same
    /// namespace to share a lock (required; no default; no '{' or '}')
    #[arg(
        long,
        env = "REDLEASE_NAMESPACE",
        hide_env_values = true,
        global = true
    )]
    pub(crate) namespace: Option<String>,

    /// Say more on standard error: when a wait starts and ends (also when
    /// standard error is not a terminal), the fence, renewals, the release
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "quiet",
        help_heading = "Output"
    )]
    pub(crate) verbose: bool,

    /// Print nothing on standard error but fatal errors (not "busy" or
    /// "gave up waiting"; usage errors, Redis failures and a lost lease are
    /// still reported)
    #[arg(short, long, global = true, help_heading = "Output")]
    pub(crate) quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding the lease on KEY
    #[command(long_about = RUN_LONG_ABOUT, after_long_help = EXIT_CODES)]
    Run(RunArgs),
    /// Show whether KEY is held, its remaining time and its fence counter
    /// (with --permits, its semaphore's slots)
    #[command(long_about = STATUS_LONG_ABOUT)]
    Status(StatusArgs),
    /// Show the leader of the election NAME: its value, term and time left
    /// (with --watch, every change)
    #[command(long_about = LEADER_LONG_ABOUT)]
    Leader(LeaderArgs),
    /// Campaign in the election NAME and run a command while leading
    #[command(long_about = ELECT_LONG_ABOUT, after_long_help = EXIT_CODES)]
    Elect(ElectArgs),
}

const ELECT_LONG_ABOUT: &str = "\
Campaign in the election NAME (as the redlease library's \
`locker.election(NAME)`), run COMMAND while leading, then resign.

It is `redlease run` with an election's leadership instead of a lock: the \
same renewal, signals, --on-lost, --kill-after and exit codes (a lost \
leadership stops the command: exit 122; someone else leading at once with \
-n, or when --wait ran out: exit 75). The difference: it waits without a \
deadline by default (-w forever), and while it leads, `redlease leader NAME` \
(and the library's `leader()` and `observe()`) show its value.

The command gets these variables:
  REDLEASE_FENCE     the leadership's term: its fencing token
  REDLEASE_TERM      the same
  REDLEASE_ELECTION  NAME (also as REDLEASE_KEY)
  REDLEASE_LEASE_MS  the lease length in milliseconds

Examples:
  # One scheduler across hosts; the others wait to take over.
  redlease --namespace billing elect scheduler ./scheduler

  # Publish an address for clients to find the leader.
  redlease --namespace api elect --value 10.0.0.7:8080 primary ./serve";

/// `redlease elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name: any non-empty UTF-8 string up to 1024 bytes
    pub(crate) name: String,

    /// The leader's value others read (`redlease leader`), at most 4 KiB;
    /// default: HOSTNAME:PID
    #[arg(long, value_name = "TEXT", conflicts_with = "value_file")]
    pub(crate) value: Option<String>,

    /// Read the leader's value from this file (at most 4 KiB)
    #[arg(long, value_name = "PATH")]
    pub(crate) value_file: Option<std::path::PathBuf>,

    /// How long to campaign while someone else leads: 'forever' (the
    /// default) waits without a deadline, 0 tries once; bare seconds (5,
    /// 1.5) or units ms, s, m, h, d (1m30s)
    #[arg(short, long, value_name = "DURATION", default_value = "forever")]
    #[arg(value_parser = parse_wait, default_value_if("nonblock", "true", "0"))]
    pub(crate) wait: Duration,

    /// Try once and do not wait; the same as --wait 0
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub(crate) nonblock: bool,

    /// Length of the leadership's lease (at least 100ms); it is renewed
    /// every half lease while the command runs, so this bounds how long a
    /// crashed leader blocks the election
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease)]
    pub(crate) lease: Duration,

    /// What to do with the command when the leadership is lost
    #[arg(long, value_name = "ACTION", value_enum, default_value_t = OnLost::Term)]
    pub(crate) on_lost: OnLost,

    /// How long the command gets to exit after a SIGTERM (--on-lost term)
    /// or a passed-on SIGINT, SIGTERM, SIGHUP or SIGQUIT before it is sent
    /// SIGKILL
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub(crate) kill_after: Duration,

    /// Exit code when someone else leads, at once (-n) or when --wait ran
    /// out
    #[arg(short = 'E', long, visible_alias = "busy-exit-code", value_name = "N")]
    #[arg(default_value_t = exit::BUSY)]
    pub(crate) conflict_exit_code: u8,

    /// The command to run and its arguments (`--` before it is optional)
    #[arg(required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,
}

impl ElectArgs {
    /// The `run` this is: the same supervision, campaigning with `value`.
    pub(crate) fn to_run(&self, value: Vec<u8>) -> RunArgs {
        RunArgs {
            key: self.name.clone(),
            wait: self.wait,
            nonblock: self.nonblock,
            lease: self.lease,
            shared: false,
            exclusive: false,
            permits: None,
            also: Vec::new(),
            on_lost: self.on_lost,
            kill_after: self.kill_after,
            conflict_exit_code: self.conflict_exit_code,
            command: self.command.clone(),
            elect: Some(value),
        }
    }
}

const LEADER_LONG_ABOUT: &str = "\
Show the leader of the election NAME (as the redlease library's \
`locker.election(NAME)` elects it): its value, its term (the fence a store \
checks) and its time left. The value is printed as is on standard output, \
never on standard error or in logs.

With --watch, print one line (with --json: one JSON object) per change of \
the election, in order, until SIGINT or SIGTERM (exit 0): the current state \
first, then every new leader, new value and vacancy; `resync` marks a state \
printed instead of changes that were skipped (more than 64 between two \
reads, or a log that lost entries). While Redis does not answer, a line on \
standard error says so, and another when it is back.

A vacancy shows the version of the election's state (the end of the last \
term), as --watch shows it, or 0.0 for an election that never had a leader.

Exits 0 when someone leads and 1 when nobody does, 2 on a usage error and \
69 when Redis cannot be asked. It needs only the read-only rights of the \
README's election observer (EVALSHA_RO on the election's lease and log; \
SUBSCRIBE to the release channel with --watch, and for a vacancy's version \
also without it).";

/// `redlease leader`.
#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    /// The election's name
    pub(crate) name: String,

    /// Print JSON: {"leader": bool, "term": int|null, "version": "T.S",
    /// "remaining_ms": int|null, "value": str|null} ("value_base64"
    /// instead of "value" for a value that is not UTF-8); with --watch,
    /// one object per line, with "resync": bool
    #[arg(long)]
    pub(crate) json: bool,

    /// Print every change until SIGINT or SIGTERM
    #[arg(long)]
    pub(crate) watch: bool,
}

/// What to do with the command when the lease is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnLost {
    /// Send SIGTERM, then SIGKILL after --kill-after; exit 122
    Term,
    /// Send SIGKILL at once; exit 122
    Kill,
    /// Let the command finish and exit with its status (the loss is still
    /// reported)
    Ignore,
}

/// `redlease run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The key to lock: any non-empty UTF-8 string up to 1024 bytes
    pub(crate) key: String,

    /// How long to wait for a lock held by someone else (like `flock -w`):
    /// 0 tries once, 'forever' waits without a deadline; bare seconds (5,
    /// 1.5) or units ms, s, m, h, d (1m30s)
    #[arg(short, long, value_name = "DURATION", default_value = "0", value_parser = parse_wait)]
    #[arg(default_value_if("nonblock", "true", "0"))]
    pub(crate) wait: Duration,

    /// Try once and do not wait (like `flock -n`); the same as --wait 0,
    /// which is the default
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub(crate) nonblock: bool,

    /// Length of the lease (at least 100ms); it is renewed every half lease
    /// while the command runs, so this bounds how long a crashed holder
    /// blocks the key
    #[arg(short, long, value_name = "DURATION", default_value = "30s", value_parser = parse_lease)]
    pub(crate) lease: Duration,

    /// Take a shared lease of KEY's read-write lease (like `flock -s`): any
    /// number of --shared holders at once, never beside an --exclusive one,
    /// and a waiting --exclusive holder goes first. The command gets the
    /// read's epoch as REDLEASE_EPOCH instead of REDLEASE_FENCE
    #[arg(short, long, conflicts_with = "exclusive")]
    pub(crate) shared: bool,

    /// Take the exclusive lease of KEY's read-write lease (like `flock -x`),
    /// the counterpart of --shared. Without -s, -x or --permits, run takes
    /// KEY's plain lock (the library's `acquire(KEY)`), which does not
    /// exclude -s/-x holders
    #[arg(short = 'x', long)]
    pub(crate) exclusive: bool,

    /// Take one of N permits of KEY's fenced semaphore (N from 1 to 1024):
    /// at most N runs of KEY at once. The command gets its permit's slot
    /// (0 to N-1) as REDLEASE_SLOT and the slot's fence as REDLEASE_FENCE.
    /// Runs of one KEY must agree on N; not with -s or -x
    #[arg(long, value_name = "N", value_parser = permits, allow_negative_numbers = true)]
    #[arg(conflicts_with_all = ["shared", "exclusive"])]
    pub(crate) permits: Option<u32>,

    /// Also lock this key, with KEY, as one multi-key lease (repeatable, up
    /// to 63 times): every key at once or none, each with a fence of its
    /// own. The command gets KEY's fence as REDLEASE_FENCE and every key's
    /// as REDLEASE_FENCES (space-separated: KEY's, then the --also keys' in
    /// order). Not with -s, -x or --permits
    #[arg(long, value_name = "KEY", conflicts_with_all = ["shared", "exclusive", "permits"])]
    pub(crate) also: Vec<String>,

    /// What to do with the command when the lease is lost
    #[arg(long, value_name = "ACTION", value_enum, default_value_t = OnLost::Term)]
    pub(crate) on_lost: OnLost,

    /// How long the command gets to exit after a SIGTERM (--on-lost term)
    /// or a passed-on SIGINT, SIGTERM, SIGHUP or SIGQUIT before it is sent
    /// SIGKILL
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::parse)]
    pub(crate) kill_after: Duration,

    /// Exit code when the lock (with --permits, every permit; with --also,
    /// any of the keys) is held by someone else, at once or when --wait ran
    /// out (like `flock -E`)
    #[arg(short = 'E', long, visible_alias = "busy-exit-code", value_name = "N")]
    #[arg(default_value_t = exit::BUSY)]
    pub(crate) conflict_exit_code: u8,

    /// The command to run and its arguments (`--` before it is optional)
    #[arg(required = true, trailing_var_arg = true)]
    pub(crate) command: Vec<OsString>,

    /// `redlease elect`: campaign with this value instead of locking.
    #[arg(skip)]
    pub(crate) elect: Option<Vec<u8>>,
}

impl RunArgs {
    /// The keys `run` locks: KEY, then every `--also` key.
    pub(crate) fn keys(&self) -> Vec<&str> {
        std::iter::once(self.key.as_str())
            .chain(self.also.iter().map(String::as_str))
            .collect()
    }
}

/// `redlease status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The key to look at
    pub(crate) key: String,

    /// Print one JSON object: {"held": bool, "remaining_ms": int|null,
    /// "fence": int|null, "holder": {"host": str, "pid": int, "command":
    /// str}|null}, and for a key reserved by a waiting multi-key run (held
    /// false) also "reserved": {"remaining_ms": int|null}; with --permits,
    /// {"held": bool, "permits": int,
    /// "permits_in_use": int|null, "held_permits": int, "slots": [{"slot":
    /// int, "held": bool, "remaining_ms": int|null, "fence": int|null,
    /// "holder": {...}|null}, ...]}
    #[arg(long)]
    pub(crate) json: bool,

    /// Show KEY's fenced semaphore of N permits (as `run --permits N`)
    /// instead of its lock: every slot held, its time left, its fence and
    /// its holder
    #[arg(long, value_name = "N", value_parser = permits, allow_negative_numbers = true)]
    pub(crate) permits: Option<u32>,
}

/// The largest permit count (the library's bound).
const MAX_PERMITS: u32 = 1024;

/// Parses `--permits` (and the count a semaphore is in use with, as
/// `status` reads it): a whole number from 1 to [`MAX_PERMITS`].
pub(crate) fn permits(s: &str) -> Result<u32, String> {
    (s.trim().parse().ok())
        .filter(|n| (1..=MAX_PERMITS).contains(n))
        .ok_or_else(|| format!("must be a whole number from 1 to {MAX_PERMITS}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn permits_are_whole_numbers_from_1_to_1024() {
        assert_eq!(permits("1"), Ok(1));
        assert_eq!(permits("1024"), Ok(1024));
        for bad in ["0", "1025", "-1", "", "2.5", "x", "99999999999999999999999"] {
            assert!(permits(bad).is_err(), "{bad:?}");
        }
    }
}
