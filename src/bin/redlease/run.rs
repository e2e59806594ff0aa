//! `redlease run KEY -- COMMAND`: acquire (the lock, a read-write lease's
//! side, a semaphore's permit or, with `--also`, several keys' locks as one
//! multi-key lease; `elect`: an election's leadership), run
//! the child under renewals, forward signals, act on a lost lease, release,
//! and pick the exit code.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::{Duration, Instant};

use redlease::blocking::Locker;
use redlease::{AcquireOptions, CancelHandle, Config, Error, Lost, LostCause, ReleaseOutcome};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};

use crate::child;
use crate::cli::{exit, OnLost, RunArgs};
use crate::connect::open;
use crate::duration::human;
use crate::held::Held;
use crate::holder::Holder;
use crate::output::{Out, Progress, Said, Wanted};
use crate::signals::{self, Event, SignalWatch};
use crate::{describe_error, describe_invalid, now, usage_error, Target};

/// Upper bound of the per-command timeout (connect and each command).
const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the supervising loop looks at the child even without SIGCHLD.
const SAFETY_POLL: Duration = Duration::from_millis(250);
/// How often the lease watcher looks for a renewal (to refresh the holder
/// record) and for the end of the command; a loss wakes it at once.
const WATCH_POLL: Duration = Duration::from_millis(50);
/// Connect and command timeout of the progress line's `PTTL` queries.
const PROGRESS_QUERY_TIMEOUT: Duration = Duration::from_millis(500);

/// Runs `args`; `Err` is the exit code of a failure already reported.
pub(crate) fn run(target: Target, args: &RunArgs, out: Out) -> Result<u8, u8> {
    // Each renew must fail well within the lease (it is sent at lease/2 and
    // must be answered by 3/4), so a holder cut off from Redis learns it in
    // time from its own clock.
    let command_timeout = (args.lease / 4)
        .min(MAX_COMMAND_TIMEOUT)
        .max(Duration::from_millis(1));
    let config = Config::new(target.namespace.clone())
        .lease(args.lease)
        .wait(args.wait)
        .command_timeout(command_timeout)
        .shutdown_timeout(command_timeout * 2);
    config
        .validate()
        .map_err(|e| usage_error("run", describe_invalid(&e)))?;

    let (events_tx, events) = mpsc::channel();
    let cancel = CancelHandle::new();
    let signals = SignalWatch::start(events_tx.clone(), cancel.clone(), out)
        .map_err(|e| signals::setup_failed(out, &e))?;
    let locker = Locker::new(target.client.clone(), config).map_err(|e| {
        // The library's words for a failed connect, after the address the
        // user gave (which the library never names).
        let shown = e.to_string();
        let cause = match shown.strip_prefix("could not connect to redis: ") {
            Some(cause) => format!("{cause} ({})", e.code()),
            None => describe_error(&e),
        };
        let at = target.address();
        out.fatal(format_args!(
            "cannot connect to Redis at {at}: {cause}; the command did not run"
        ));
        exit_code_of(&e)
    })?;
    let wanted = match (args.permits, &args.elect) {
        (_, Some(_)) => Wanted::Leadership,
        (Some(n), None) => Wanted::Permit(n),
        (None, None) if args.also.is_empty() => Wanted::Lock,
        (None, None) => Wanted::Keys(args.also.len() + 1),
    };
    let run = Run {
        target: &target,
        args,
        out,
        wanted,
        signals: &signals,
        events_tx,
        events,
        command_timeout,
    };
    let code = run.acquire_and_run(&locker, &cancel);
    if let Err(e) = locker.shutdown() {
        out.detail(format_args!("shutdown: {}", describe_error(&e)));
    }
    code
}

/// Everything one `run` needs.
struct Run<'a> {
    target: &'a Target,
    args: &'a RunArgs,
    out: Out,
    /// What the acquire waits for, in messages.
    wanted: Wanted,
    signals: &'a SignalWatch,
    events_tx: Sender<Event>,
    events: Receiver<Event>,
    command_timeout: Duration,
}

impl Run<'_> {
    /// Acquires what `args` asks for and runs the command under it; `Err`
    /// is the exit code of a failure already reported.
    fn acquire_and_run(&self, locker: &Locker, cancel: &CancelHandle) -> Result<u8, u8> {
        let (key, args) = (&self.args.key, self.args);
        let failed = |e: Error| self.cannot_acquire(&e);
        Ok(if let Some(value) = &args.elect {
            let election = locker.election(key).map_err(failed)?;
            self.hold_and_run(self.acquire(cancel, |o| election.campaign_with(value, o))?)
        } else if let Some(permits) = args.permits {
            let semaphore = locker.semaphore(key, permits).map_err(failed)?;
            self.hold_and_run(self.acquire(cancel, |o| semaphore.acquire_with(o))?)
        } else if args.shared {
            let rw = locker.rw_lock(key).map_err(failed)?;
            self.hold_and_run(self.acquire(cancel, |o| rw.read_with(o))?)
        } else if args.exclusive {
            let rw = locker.rw_lock(key).map_err(failed)?;
            self.hold_and_run(self.acquire(cancel, |o| rw.write_with(o))?)
        } else if !args.also.is_empty() {
            let keys = args.keys();
            self.hold_and_run(self.acquire(cancel, |o| locker.acquire_all_with(&keys, o))?)
        } else {
            self.hold_and_run(self.acquire(cancel, |o| locker.acquire_with(key, o))?)
        })
    }

    /// Runs the command under `lease`; the exit code.
    fn hold_and_run<H: Held>(&self, lease: H) -> u8 {
        // Signals seen so far are either of no interest (SIGCHLD of nobody)
        // or recorded as the first stop signal. Drain first, check next: a
        // signal arriving in between is either seen here or stays queued and
        // is passed on to the command once it runs.
        while self.events.try_recv().is_ok() {}
        self.signals.command_starts();
        // A stop request that arrived while the acquire was being answered:
        // do not start the command.
        if let Some(sig) = self.signals.first_stop() {
            self.out.notice(format_args!(
                "got {} before the command started; not running it",
                signals::name(sig)
            ));
            self.release(lease, false);
            return signal_exit(sig);
        }

        let mut record = self.holder_record(&lease);
        record();
        let child = match self.spawn(&lease) {
            Ok(child) => child,
            Err(code) => {
                self.release(lease, false);
                return code;
            }
        };
        // The library's with_lock renewer keeps the lease alive (`with_lock`'s docs: a
        // renewal that errs is sent again while the lease has time left);
        // the watcher passes a loss on to the supervising loop and refreshes
        // the holder record after each renewal.
        let done = AtomicBool::new(false);
        let (status, mut lost, loss) = lease.keep_alive(|loss| {
            thread::scope(|scope| {
                let (lease, done_ref) = (&lease, &done);
                let events = self.events_tx.clone();
                let (out, lease_len) = (self.out, self.args.lease);
                scope.spawn(move || watch(lease, lease_len, loss, done_ref, events, out, record));
                let (status, lost) = self.supervise(child, lease);
                done.store(true, Ordering::SeqCst);
                (status, lost, loss.clone())
            })
        });
        // A renewal that was under way when the command exited may have
        // found the lease gone.
        while self.events.try_recv().is_ok() {}
        if !lost && loss.is_lost() {
            lost = true;
            let why = loss_reason(&loss);
            self.out
                .fatal(format_args!("lost the lease as the command exited: {why}"));
        }
        let lost = self.release(lease, lost);
        match status {
            _ if lost && self.args.on_lost != OnLost::Ignore => exit::LEASE_LOST,
            Some(status) => status_exit(status),
            None => exit::SOFTWARE,
        }
    }

    /// Acquires the lease, showing progress while it waits. `Err` is the
    /// exit code.
    fn acquire<H: Held>(
        &self,
        cancel: &CancelHandle,
        get: impl Fn(AcquireOptions) -> Result<H, Error>,
    ) -> Result<H, u8> {
        let args = self.args;
        let out = self.out;
        let started = now();
        let options = |wait: Duration| AcquireOptions::new().wait(wait).cancel(cancel.clone());
        let show_progress = out.live_progress() || out.is_verbose();
        let result = if args.wait.is_zero() || !show_progress {
            get(options(args.wait))
        } else {
            // Try once first: a free lock needs no progress line, and a busy
            // one tells the holder's remaining time.
            match get(options(Duration::ZERO)) {
                Err(Error::Busy { remaining }) => self.wait_with_progress(
                    &get,
                    started,
                    remaining,
                    options(wait_left(args.wait, started)),
                ),
                other => other,
            }
        };
        let waited = now().saturating_duration_since(started);
        let (why, code) = match result {
            Ok(lease) => {
                let slot = lease
                    .slot()
                    .map_or_else(String::new, |s| format!("slot {s}, "));
                let (fence, length, waited) = (lease.number(), human(args.lease), human(waited));
                out.detail(format_args!(
                    "acquired the {} ({slot}fence {fence}, lease {length}) after {waited}",
                    H::NAME
                ));
                return Ok(lease);
            }
            Err(Error::Busy { remaining }) => {
                (self.wanted.busy(remaining), args.conflict_exit_code)
            }
            Err(Error::WaitTimeout { remaining, .. }) => {
                let (thing, waited) = (self.wanted.thing(), human(waited));
                let holder = self.wanted.holder(Said::GaveUp, remaining);
                let why = format!("gave up waiting for {thing} after {waited}{holder}");
                (why, args.conflict_exit_code)
            }
            // The semaphore is in use with another count: held by others,
            // who must all release before this count applies.
            Err(Error::InvalidConfig {
                option: "permits",
                reason,
            }) if self.args.permits.is_some() => {
                let why = format!("{reason} (runs of one key must agree on --permits)");
                (why, args.conflict_exit_code)
            }
            Err(Error::Cancelled) => {
                let sig = self.signals.first_stop().unwrap_or(SIGINT);
                let (name, thing) = (signals::name(sig), self.wanted.thing());
                let why = format!("got {name} while waiting for {thing}");
                (why, signal_exit(sig))
            }
            Err(e) => return Err(self.cannot_acquire(&e)),
        };
        out.notice(format_args!("{why}; the command did not run"));
        Err(code)
    }

    /// Reports an acquire that failed; the exit code.
    fn cannot_acquire(&self, e: &Error) -> u8 {
        let why = describe_error(e);
        self.out.fatal(format_args!(
            "cannot acquire the lease: {why}; the command did not run"
        ));
        exit_code_of(e)
    }

    /// The waiting acquire after a busy first try, with the progress line
    /// on a terminal (or one line each way with `--verbose`).
    fn wait_with_progress<H: Held>(
        &self,
        get: &impl Fn(AcquireOptions) -> Result<H, Error>,
        started: Instant,
        remaining: Option<Duration>,
        options: AcquireOptions,
    ) -> Result<H, Error> {
        let out = self.out;
        let wait = self.args.wait;
        if wait_left(wait, started).is_zero() {
            return Err(Error::WaitTimeout {
                waited: now().saturating_duration_since(started),
                remaining,
            });
        }
        let busy = self.wanted.busy(remaining);
        let limit = match wait {
            Duration::MAX => "without a deadline".to_owned(),
            wait => format!("up to {}", human(wait)),
        };
        out.detail(format_args!("{busy}; waiting {limit}"));
        let progress = out.live_progress().then(|| {
            let ends = remaining.and_then(|remaining| now().checked_add(remaining));
            Progress::start(self.wanted, started, wait, ends, self.pttl_probe())
        });
        let result = get(options);
        if let Some(progress) = progress {
            progress.finish();
        }
        result
    }

    /// Asks Redis for the holder's remaining time (a semaphore's: the
    /// least of its slots'; with --also, the most of the held keys') on a
    /// connection of its own (opened lazily, kept while it answers), for
    /// the progress line.
    fn pttl_probe(&self) -> impl FnMut() -> Option<Duration> + Send + 'static {
        let (target, keys) = (self.target, self.args.keys());
        let key = keys[0];
        let names: Vec<String> = match self.wanted {
            Wanted::Leadership => vec![target.name("elect", key)],
            Wanted::Permit(n) => (0..n).map(|i| target.slot_name("sem", key, i)).collect(),
            Wanted::Lock | Wanted::Keys(_) => keys.iter().map(|k| target.name("lock", k)).collect(),
        };
        let client = target.client.clone();
        let mut probe = redis::pipe();
        for name in names {
            probe.cmd("PTTL").arg(name);
        }
        // Every key must be free, but only one permit.
        let all = matches!(self.wanted, Wanted::Keys(_));
        let mut conn: Option<redis::Connection> = None;
        move || {
            let mut c = conn
                .take()
                .or_else(|| open(&client, PROGRESS_QUERY_TIMEOUT).ok())?;
            // PTTL: -2 no such key, -1 no expiry, else milliseconds.
            let ms: Vec<i64> = probe.query(&mut c).ok()?;
            conn = Some(c);
            let left = ms.into_iter().filter_map(|ms| u64::try_from(ms).ok());
            if all { left.max() } else { left.min() }.map(Duration::from_millis)
        }
    }

    /// Starts the command with the lease's variables, on Linux with a
    /// parent-death signal (see child.rs; called on the main thread, whose
    /// end the signal follows). `Err` is the exit code.
    fn spawn<H: Held>(&self, lease: &H) -> Result<Child, u8> {
        let args = self.args;
        let program = &args.command[0];
        let with_env = |mut command: std::process::Command| {
            command
                .env(H::VARIABLE, lease.number().to_string())
                .env("REDLEASE_KEY", &args.key)
                .env("REDLEASE_LEASE_MS", args.lease.as_millis().to_string());
            if let Some(slot) = lease.slot() {
                command.env("REDLEASE_SLOT", slot.to_string());
            }
            command.envs(lease.more_variables(&args.key));
            command
        };
        let spawned = with_env(child::command(program, &args.command[1..]))
            .spawn()
            .or_else(|e| {
                if cfg!(target_os = "linux") {
                    self.out.notice(format_args!(
                        "cannot start the command through redlease itself ({e}); starting it \
                         directly: it will not be stopped if redlease is killed"
                    ));
                    with_env(child::direct(program, &args.command[1..])).spawn()
                } else {
                    Err(e)
                }
            });
        spawned.map_err(|e| child::cannot_run(program, &e))
    }

    /// Waits for the child while forwarding signals, watching the lease and
    /// acting on its loss. Returns the child's status (`None` if it could
    /// not be waited for) and whether the lease was lost.
    fn supervise<H: Held>(&self, mut child: Child, lease: &H) -> (Option<ExitStatus>, bool) {
        let out = self.out;
        let mut lost = false;
        // When to send SIGKILL, and the signal whose countdown that ends.
        let mut kill_at: Option<(Instant, i32)> = None;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return (Some(status), lost),
                Ok(None) => {}
                Err(e) => {
                    out.fatal(format_args!("cannot wait for the command: {e}"));
                    let _ = child.kill();
                    return (child.wait().ok(), lost);
                }
            }
            let t = now();
            if !lost && !lease.is_valid() {
                lost = true;
                kill_at = self.on_lost(&mut child, TIME_RAN_OUT).or(kill_at);
            }
            if let Some((_, sig)) = kill_at.filter(|&(at, _)| t >= at) {
                kill_at = None;
                let (after, sig) = (human(self.args.kill_after), signals::name(sig));
                out.fatal(format_args!(
                    "the command is still running {after} after {sig}; sending SIGKILL"
                ));
                let _ = child.kill();
            }
            // Look again at the next poll, the SIGKILL or the lease's end.
            let lease_ends = t.checked_add(lease.remaining()).filter(|_| !lost);
            let next = [kill_at.map(|(at, _)| at), lease_ends]
                .into_iter()
                .flatten()
                .fold(t + SAFETY_POLL, Instant::min);
            match self.events.recv_timeout(next.saturating_duration_since(t)) {
                // The child is not reaped yet (this loop owns its `Child`
                // and only reaps through it), so its pid cannot have been
                // reused.
                Ok(Event::Signal(received)) if received.sig != SIGCHLD => {
                    let sig = signals::name(received.sig);
                    if signals::terminal_sent_it(received) {
                        out.detail(format_args!(
                            "{sig} came from the terminal, which sent it to the command too"
                        ));
                    } else if let Err(e) = signals::send(&child, received.sig) {
                        out.notice(format_args!("could not pass {sig} on to the command: {e}"));
                    } else {
                        out.detail(format_args!("passed {sig} on to the command"));
                        // A command that ignores a stop request is killed
                        // after --kill-after, as after a lost lease.
                        if kill_at.is_none() && signals::is_stop(received.sig) {
                            let at = now().checked_add(self.args.kill_after);
                            kill_at = at.map(|at| (at, received.sig));
                        }
                    }
                }
                Ok(Event::Lost(reason)) if !lost => {
                    lost = true;
                    kill_at = self.on_lost(&mut child, &reason).or(kill_at);
                }
                // SIGCHLD (the child is looked at first thing), a loss
                // already acted on, or time to look again.
                _ => {}
            }
        }
    }

    /// Reports the loss and applies `--on-lost`; returns when to send
    /// SIGKILL after SIGTERM, if that is still to come.
    fn on_lost(&self, child: &mut Child, reason: &str) -> Option<(Instant, i32)> {
        let (out, kill_after) = (self.out, self.args.kill_after);
        let action = match self.args.on_lost {
            OnLost::Term => format!(
                "sending SIGTERM to the command (SIGKILL in {})",
                human(kill_after)
            ),
            OnLost::Kill => "sending SIGKILL to the command".to_owned(),
            OnLost::Ignore => "letting the command finish (--on-lost ignore)".to_owned(),
        };
        out.fatal(format_args!("lost the lease: {reason}; {action}"));
        match self.args.on_lost {
            OnLost::Ignore => return None,
            OnLost::Term => match signals::send(child, SIGTERM) {
                Ok(()) => return now().checked_add(kill_after).map(|at| (at, SIGTERM)),
                Err(e) => out.fatal(format_args!("could not send SIGTERM: {e}; sending SIGKILL")),
            },
            OnLost::Kill => {}
        }
        // --on-lost kill, or a SIGTERM that could not be sent.
        let _ = child.kill();
        None
    }

    /// Writes the records of who holds `lease` beside its locks or its
    /// permit's slot (best effort: a refusal, e.g. an ACL without
    /// `~<ns>:lock-holder:{*`, only costs `status` the "who"), with the
    /// lease's expiry, on a connection of its own; again at each call.
    /// Nothing for a read-write lease: readers share.
    fn holder_record<H: Held>(&self, lease: &H) -> impl FnMut() + Send + 'static {
        let program = &self.args.command[0];
        let px = u64::try_from(self.args.lease.as_millis()).unwrap_or(u64::MAX);
        let mut pipe = redis::pipe();
        for (name, fence) in lease.records(self.target, &self.args.keys()) {
            let value = Holder::this_process(fence.get(), program).encode();
            pipe.cmd("SET").arg((name, value, "PX", px)).ignore();
        }
        let none = pipe.cmd_iter().next().is_none();
        let (client, timeout, out) = (self.target.client.clone(), self.command_timeout, self.out);
        let mut conn = None;
        move || {
            if none {
                return;
            }
            let Some(mut c) = conn.take().or_else(|| open(&client, timeout).ok()) else {
                out.detail("could not record the holder: no connection");
                return;
            };
            match pipe.query::<()>(&mut c) {
                Ok(()) => conn = Some(c),
                Err(e) => {
                    let why = crate::describe_redis(&e);
                    out.detail(format_args!("could not record the holder: {why}"));
                }
            }
        }
    }

    /// Releases the lease; returns whether it was lost (already known, or
    /// found ended by the release).
    fn release<H: Held>(&self, lease: H, lost: bool) -> bool {
        let out = self.out;
        match lease.release() {
            Ok(ReleaseOutcome::Released) => {
                out.detail("released the lease");
                lost
            }
            Ok(_) if lost => true,
            Ok(outcome) => {
                let why = match outcome {
                    ReleaseOutcome::Conflict => "someone else holds the lock",
                    _ => "the lock had expired or been deleted",
                };
                out.fatal(format_args!(
                    "lost the lease: at release, {why}; the command may not have \
                     run alone"
                ));
                true
            }
            // Once a renewal found the lease gone, the library forgets it and
            // its release fails (as `ShuttingDown`); nothing is left to say.
            Err(e) if lost => {
                let why = describe_error(&e);
                out.detail(format_args!("release after the loss: {why}"));
                true
            }
            Err(e) => {
                let (why, lease) = (describe_error(&e), human(self.args.lease));
                out.notice(format_args!(
                    "could not confirm the release: {why}; the lease ends by itself within {lease}"
                ));
                lost
            }
        }
    }
}

/// Watches the lease that `keep_alive` renews until the command is done:
/// sends [`Event::Lost`] when the library's loss signal fires, and after
/// each renewal (the local deadline moved on) says so with `--verbose` and
/// refreshes the holder record.
fn watch<H: Held>(
    lease: &H,
    lease_len: Duration,
    loss: &Lost,
    done: &AtomicBool,
    events: Sender<Event>,
    out: Out,
    mut record: impl FnMut(),
) {
    let until = |lease: &H| now().checked_add(lease.remaining());
    let mut last = until(lease);
    loop {
        if loss.wait_timeout(WATCH_POLL) {
            let _ = events.send(Event::Lost(loss_reason(loss)));
            return;
        }
        if done.load(Ordering::SeqCst) {
            return;
        }
        let now_until = until(lease);
        // A renewal moves the deadline by about half a lease; reading the
        // clock twice moves it by microseconds.
        if now_until
            .zip(last)
            .is_some_and(|(new, old)| new > old + lease_len / 8)
        {
            last = now_until;
            out.detail(format_args!(
                "renewed the lease ({} left)",
                human(lease.remaining())
            ));
            record();
        }
    }
}

/// A loss found by the local clock, in the words of the report.
const TIME_RAN_OUT: &str = "its time ran out on the local clock without a confirmed renewal";

/// Why the loss signal fired, in the words of the report.
fn loss_reason(loss: &Lost) -> String {
    let Some(Error::LockLost { cause }) = loss.cause() else {
        return TIME_RAN_OUT.to_owned();
    };
    match cause {
        LostCause::Expired => "the lock had expired or been deleted".to_owned(),
        LostCause::Conflict => "someone else holds the lock".to_owned(),
        LostCause::RenewFailed(e)
            if matches!(*e, Error::ProviderFailed { .. }) || e.is_outcome_unknown() =>
        {
            format!("{TIME_RAN_OUT} (the last renewal: {})", describe_error(&e))
        }
        LostCause::RenewFailed(e) => format!("renewing it failed: {}", describe_error(&e)),
        _ => TIME_RAN_OUT.to_owned(),
    }
}

/// What is left of `wait` after the time since `started`.
fn wait_left(wait: Duration, started: Instant) -> Duration {
    if wait == Duration::MAX {
        return wait;
    }
    wait.saturating_sub(now().saturating_duration_since(started))
}

/// The exit code for a library error that stopped the command from running.
fn exit_code_of(e: &Error) -> u8 {
    match e {
        Error::InvalidConfig { .. } | Error::InvalidKey { .. } => exit::USAGE,
        Error::ProviderFailed { .. } | Error::OutcomeUnknown { .. } => exit::UNAVAILABLE,
        _ if e.is_outcome_unknown() => exit::UNAVAILABLE,
        _ => exit::SOFTWARE,
    }
}

/// The child's status as an exit code: its own, or 128 + N for signal N.
fn status_exit(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        // Exit statuses are 0..=255 on Unix.
        return u8::try_from(code).unwrap_or(1);
    }
    status.signal().map_or(1, signal_exit)
}

fn signal_exit(sig: i32) -> u8 {
    u8::try_from(sig)
        .ok()
        .and_then(|s| exit::SIGNAL_BASE.checked_add(s))
        .unwrap_or(u8::MAX)
}
