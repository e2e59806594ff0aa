//! Signal handling without `unsafe`: `signal-hook` turns the signals that
//! would otherwise kill redlease with the lease held (SIGINT, SIGTERM,
//! SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) and SIGCHLD, with their origin
//! (`siginfo_t`'s `si_code` and `si_pid`), into messages on a channel, read
//! by a thread; `nix` sends signals to the child.

use std::io;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redlease::CancelHandle;
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use signal_hook::iterator::exfiltrator::origin::WithOrigin;
use signal_hook::iterator::{Handle, SignalsInfo};
use signal_hook::low_level::siginfo::Cause;

use crate::cli::exit;
use crate::output::Out;

/// Stop requests: passed on to the command (which gets --kill-after to
/// exit), and before it runs they end the wait (exit 128 + N).
const STOP: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];
/// Meant for the command (reopen logs, dump state): passed on, with no
/// SIGKILL after them; before it runs there is nobody to tell.
const FOR_THE_COMMAND: [i32; 2] = [SIGUSR1, SIGUSR2];

/// What the supervising loop hears about.
#[derive(Debug)]
pub(crate) enum Event {
    /// A signal reached redlease (SIGCHLD included: the child changed state).
    Signal(Received),
    /// The renewer found the lease lost; the reason, for the report.
    Lost(String),
}

/// A signal and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) sig: i32,
    /// Sent by the kernel with no sending process: for SIGINT and SIGHUP,
    /// the terminal driver, which signals the whole foreground process
    /// group (the child included).
    pub(crate) by_kernel: bool,
}

/// The signal thread. The first stop request ([`is_stop`]) also cancels
/// an acquire in progress and is remembered, so that redlease can exit with
/// 128 + N when it arrives before the command started.
#[derive(Debug)]
pub(crate) struct SignalWatch {
    handle: Handle,
    first_stop: Arc<AtomicI32>,
    /// The command runs, or is about to: signals for it are queued for the
    /// supervising loop rather than noted as having nobody to reach.
    command_started: Arc<AtomicBool>,
}

impl SignalWatch {
    pub(crate) fn start(events: Sender<Event>, cancel: CancelHandle, out: Out) -> io::Result<Self> {
        let mut signals =
            SignalsInfo::<WithOrigin>::new([&STOP[..], &FOR_THE_COMMAND, &[SIGCHLD]].concat())?;
        let watch = SignalWatch {
            handle: signals.handle(),
            first_stop: Arc::default(),
            command_started: Arc::default(),
        };
        let (first, started) = (watch.first_stop.clone(), watch.command_started.clone());
        thread::Builder::new()
            .name("redlease-signals".to_owned())
            .spawn(move || {
                for origin in signals.forever() {
                    let sig = origin.signal;
                    let by_kernel = origin.cause == Cause::Kernel && origin.process.is_none();
                    let received = Received { sig, by_kernel };
                    if is_stop(sig) {
                        let _ = first.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                        cancel.cancel();
                    } else if FOR_THE_COMMAND.contains(&sig) && !started.load(Ordering::SeqCst) {
                        out.notice(format_args!(
                            "got {} before the command started; ignored (it is passed on to \
                             the command once that runs)",
                            name(sig)
                        ));
                        continue;
                    }
                    if events.send(Event::Signal(received)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(watch)
    }

    /// From now on, signals for the command are passed on to it (queued
    /// until it runs) instead of being ignored.
    pub(crate) fn command_starts(&self) {
        self.command_started.store(true, Ordering::SeqCst);
    }

    /// The first stop request received, if any.
    pub(crate) fn first_stop(&self) -> Option<i32> {
        Some(self.first_stop.load(Ordering::SeqCst)).filter(|&sig| sig != 0)
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// Reports that signal handling could not be set up; the exit code.
pub(crate) fn setup_failed(out: Out, e: &io::Error) -> u8 {
    out.fatal(format_args!("cannot set up signal handling: {e}"));
    exit::SOFTWARE
}

/// Whether `sig` asks redlease (and so the command) to stop: the command
/// still running --kill-after after it is sent SIGKILL.
pub(crate) fn is_stop(sig: i32) -> bool {
    STOP.contains(&sig)
}

/// A signal's name for messages, e.g. `SIGTERM`.
pub(crate) fn name(sig: i32) -> String {
    Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_owned())
}

/// Whether the terminal sent `received` to the whole foreground process
/// group: a SIGINT (Ctrl-C), SIGQUIT (`Ctrl-\`) or SIGHUP (hang-up) from the
/// kernel with no sending process (`si_code` `SI_KERNEL`). The child, in our group, got it
/// already, and forwarding would deliver it twice. The same signal sent by
/// a process (`kill -INT <pid>`: `SI_USER`, with its pid) reached only
/// redlease and is passed on.
pub(crate) fn terminal_sent_it(received: Received) -> bool {
    received.by_kernel && [SIGINT, SIGQUIT, SIGHUP].contains(&received.sig)
}

/// Sends `sig` to the child.
pub(crate) fn send(child: &Child, sig: i32) -> Result<(), String> {
    let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_owned())?;
    let signal = Signal::try_from(sig).map_err(|e| e.to_string())?;
    kill(Pid::from_raw(pid), signal).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_kernel_sent_sigint_or_sighup_counts_as_the_terminals() {
        let kernel = |sig| Received {
            sig,
            by_kernel: true,
        };
        let sent = |sig| Received {
            sig,
            by_kernel: false,
        };
        assert!(terminal_sent_it(kernel(SIGINT)));
        assert!(terminal_sent_it(kernel(SIGQUIT)));
        assert!(terminal_sent_it(kernel(SIGHUP)));
        assert!(!terminal_sent_it(kernel(SIGTERM)));
        assert!(!terminal_sent_it(kernel(SIGUSR1)));
        assert!(!terminal_sent_it(sent(SIGINT)));
        assert!(!terminal_sent_it(sent(SIGQUIT)));
        assert!(!terminal_sent_it(sent(SIGHUP)));
    }

    #[test]
    fn only_stop_requests_start_the_kill_after_countdown() {
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
            assert!(is_stop(sig), "{}", name(sig));
        }
        for sig in [SIGUSR1, SIGUSR2, SIGCHLD] {
            assert!(!is_stop(sig), "{}", name(sig));
        }
    }
}
