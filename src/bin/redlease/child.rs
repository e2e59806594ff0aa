//! Starting the command so that it does not outlive `redlease` (Linux).
//!
//! A `redlease` that is killed with SIGKILL (or crashes) can neither stop
//! the command nor renew its lease, so the command would run on while the
//! lease lapses and another holder starts. On Linux the command gets a
//! parent-death signal: `redlease` starts itself in a hidden mode
//! ([`EXEC_MODE`]), which sets `PR_SET_PDEATHSIG` to SIGKILL on itself
//! (nix's safe `prctl` wrapper) and then `exec`s the command, which keeps
//! the signal, the pid, the process group and the terminal. No `unsafe`
//! and no `pre_exec` in our code; the command stays our direct child.
//!
//! Limits: Linux only (elsewhere the command is started directly and runs
//! on after a SIGKILL of `redlease`; its lease then ends at its TTL); the
//! signal is cleared by the exec of a set-user-ID, set-group-ID or
//! file-capability program; only the command itself is killed, not
//! processes it started; and the signal follows the *thread* that started
//! the command, so the command is spawned from the main thread.

use std::ffi::{OsStr, OsString};
use std::process::Command;

use crate::cli::exit;

/// The hidden first argument of the exec mode:
/// `redlease __redlease-exec-child PARENT_PID PROGRAM [ARGS...]`.
pub(crate) const EXEC_MODE: &str = "__redlease-exec-child";

/// Where Linux shows this program; executable even if the file was
/// replaced or deleted since `redlease` started.
#[cfg(target_os = "linux")]
const SELF_EXE: &str = "/proc/self/exe";

/// The command to spawn for `program args`: on Linux, `redlease` in its
/// exec mode, which becomes the command.
pub(crate) fn command(program: &OsStr, args: &[OsString]) -> Command {
    #[cfg(target_os = "linux")]
    {
        let mut command = Command::new(SELF_EXE);
        command
            .arg(EXEC_MODE)
            .arg(std::process::id().to_string())
            .arg(program)
            .args(args);
        command
    }
    #[cfg(not(target_os = "linux"))]
    direct(program, args)
}

/// The command started directly, without a parent-death signal (when
/// `redlease` cannot start itself, e.g. without /proc).
pub(crate) fn direct(program: &OsStr, args: &[OsString]) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    command
}

/// Runs the exec mode if this process was started in it: returns the exit
/// code when the command could not be started (it never returns once the
/// command runs), `None` in every other case.
pub(crate) fn exec_if_asked() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    (args.next()? == EXEC_MODE).then(|| exec(args))
}

#[cfg(target_os = "linux")]
fn exec(mut args: impl Iterator<Item = OsString>) -> u8 {
    use std::os::unix::process::CommandExt;

    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::Signal;
    use nix::unistd::getppid;

    let parent: Option<i32> = args.next().and_then(|a| a.to_str()?.parse().ok());
    let Some(program) = args.next() else {
        eprintln!("redlease: internal error: exec mode without a command");
        return exit::SOFTWARE;
    };
    if let Err(e) = set_pdeathsig(Signal::SIGKILL) {
        eprintln!("redlease: cannot set the command's parent-death signal: {e}");
        return exit::SOFTWARE;
    }
    // `redlease` may have died before the signal was armed: then nobody
    // holds the lease for the command, and it must not start.
    if parent != Some(getppid().as_raw()) {
        return exit::SOFTWARE;
    }
    cannot_run(&program, &Command::new(&program).args(args).exec())
}

/// Reports that `program` could not be started; the exit code.
pub(crate) fn cannot_run(program: &OsStr, e: &std::io::Error) -> u8 {
    eprintln!("redlease: cannot run {}: {e}", program.to_string_lossy());
    match e.kind() {
        std::io::ErrorKind::NotFound => exit::NOT_FOUND,
        _ => exit::CANNOT_EXECUTE,
    }
}

#[cfg(not(target_os = "linux"))]
fn exec(_args: impl Iterator<Item = OsString>) -> u8 {
    eprintln!("redlease: internal error: exec mode is for Linux only");
    exit::SOFTWARE
}
