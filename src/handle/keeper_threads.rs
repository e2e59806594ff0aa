//! The threads keepers run on (docs/PROTOCOL.md): a thread whose
//! leadership ended waits [`IDLE`] for the next one before it exits, and a
//! campaign makes sure one waits, so a campaign's return hands its keeper
//! to a thread already running instead of starting one (about 35 µs, and a
//! thread start competing for the CPU, on the path a new leader takes).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use parking_lot::Mutex;

/// What a keeper thread runs: one leadership's renewals and resign.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// How long a thread with nothing to keep waits for the next leadership.
const IDLE: Duration = Duration::from_secs(1);

/// The waiting threads, each by its id and the sender of its channel.
static WAITING: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Runs `job` on a waiting thread, or on a new one when none waits.
///
/// # Errors
///
/// The thread start's error; `job` did not run.
pub(super) fn run(mut job: Job) -> io::Result<()> {
    loop {
        let Some((_, waiting)) = WAITING.lock().pop() else {
            return spawn(Some(job));
        };
        // A waiting thread's receiver lives while its sender is listed, so
        // this fails only for a thread that panicked in a job: try the next.
        match waiting.send(job) {
            Ok(()) => return Ok(()),
            Err(unsent) => job = unsent.0,
        }
    }
}

/// Makes sure a thread waits for the next leadership (a campaign calls it
/// before it sends anything, so a grant finds the thread started).
pub(super) fn warm() {
    if WAITING.lock().is_empty() {
        // No thread: the campaign's keeper starts its own when it needs one.
        drop(spawn(None));
    }
}

/// Starts a thread that runs `first` (if any) and then waits for jobs. A
/// thread started without a job is listed as waiting before this returns.
fn spawn(first: Option<Job>) -> io::Result<()> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let (sender, receiver) = channel();
    let listed = first.is_none();
    if listed {
        WAITING.lock().push((id, sender.clone()));
    }
    let started = std::thread::Builder::new()
        .name("redlease-keeper".into())
        .spawn(move || serve(id, first, &sender, &receiver));
    if started.is_err() && listed {
        WAITING.lock().retain(|(listed_id, _)| *listed_id != id);
    }
    started.map(drop)
}

/// Runs `first` (if any), then each job handed to this thread, listing
/// it as waiting after each.
fn serve(id: u64, first: Option<Job>, sender: &Sender<Job>, receiver: &Receiver<Job>) {
    let next = std::iter::from_fn(|| next_job(id, receiver));
    for job in first.into_iter().chain(next) {
        job();
        WAITING.lock().push((id, sender.clone()));
    }
}

/// The next job of waiting thread `id`; `None` once it waited [`IDLE`]
/// and took itself off the list.
fn next_job(id: u64, receiver: &Receiver<Job>) -> Option<Job> {
    if let Ok(job) = receiver.recv_timeout(IDLE) {
        return Some(job);
    }
    let mut waiting = WAITING.lock();
    let listed = waiting.len();
    waiting.retain(|(listed_id, _)| *listed_id != id);
    if waiting.len() < listed {
        return None;
    }
    drop(waiting);
    // `run` took this thread off the list after the timeout: its job is on
    // the way (or here already).
    receiver.recv().ok()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::{run, warm, WAITING};

    #[test]
    fn a_job_runs_on_the_thread_a_campaign_warmed() {
        warm();
        let waiting = WAITING.lock().len();
        assert!(
            waiting >= 1,
            "warm lists a waiting thread before it returns"
        );
        let (go, until_checked) = channel::<()>();
        let (done, finished) = channel();
        run(Box::new(move || {
            // Held until the list is checked: a finished job lists its
            // thread again.
            let _ = until_checked.recv_timeout(Duration::from_secs(10));
            drop(done.send(std::thread::current().name().map(str::to_owned)));
        }))
        .unwrap();
        assert!(
            WAITING.lock().len() < waiting,
            "the job took a waiting thread"
        );
        go.send(()).unwrap();
        let name = finished.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(name.as_deref(), Some("redlease-keeper"));
    }
}
