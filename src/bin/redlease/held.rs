//! What `run` holds while the command runs: the key's lock (the default),
//! a read (`--shared`) or write (`--exclusive`) lease of its read-write
//! lease, a permit of its semaphore (`--permits N`), several keys' locks
//! as one multi-key lease (`--also`), or (`elect`) the
//! leadership of an election, behind one small interface, so the acquire,
//! supervision and release are written once.

use std::time::Duration;

use redlease::blocking::{Leadership, Lease, MultiLease, Permit, ReadLease, WriteLease};
use redlease::{Error, Fence, Lost, ReleaseOutcome};

use crate::Target;

/// A lease of either kind, as `run` uses it.
pub(crate) trait Held: Sync {
    /// The variable that hands [`number`](Self::number) to the command.
    const VARIABLE: &'static str;
    /// What it is called in messages.
    const NAME: &'static str;
    /// The lease's fence, or a read lease's epoch.
    fn number(&self) -> Fence;
    /// A permit's slot (for REDLEASE_SLOT); `None` for the other kinds.
    fn slot(&self) -> Option<u32> {
        None
    }
    /// Variables of the kind beyond [`VARIABLE`](Self::VARIABLE), for the
    /// command run under it on `key`.
    fn more_variables(&self, _key: &str) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Where `run` records who holds it, for `status` (see `holder.rs`),
    /// each with the fence the record names: beside the lock (each key's,
    /// `keys` being KEY and the `--also` keys) or the permit's slot; none
    /// when `status` cannot show it (read-write leases: readers share).
    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)>;
    fn is_valid(&self) -> bool;
    fn remaining(&self) -> Duration;
    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T;
    fn release(self) -> Result<ReleaseOutcome, Error>;
}

impl Held for Lease {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "lease";

    fn number(&self) -> Fence {
        self.fence()
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        keys.iter()
            .take(1)
            .map(|key| (target.names(key).holder, self.fence()))
            .collect()
    }

    fn is_valid(&self) -> bool {
        Lease::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        Lease::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        Lease::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        Lease::release(self)
    }
}

impl Held for ReadLease {
    const VARIABLE: &'static str = "REDLEASE_EPOCH";
    const NAME: &'static str = "shared lease";

    fn number(&self) -> Fence {
        self.epoch()
    }

    fn records(&self, _: &Target, _: &[&str]) -> Vec<(String, Fence)> {
        Vec::new()
    }

    fn is_valid(&self) -> bool {
        ReadLease::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        ReadLease::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        ReadLease::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        ReadLease::release(self)
    }
}

impl Held for WriteLease {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "exclusive lease";

    fn number(&self) -> Fence {
        self.fence()
    }

    fn records(&self, _: &Target, _: &[&str]) -> Vec<(String, Fence)> {
        Vec::new()
    }

    fn is_valid(&self) -> bool {
        WriteLease::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        WriteLease::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        WriteLease::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        WriteLease::release(self)
    }
}

impl Held for Permit {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "permit";

    /// The slot's fence (fences count per slot).
    fn number(&self) -> Fence {
        self.fence()
    }

    fn slot(&self) -> Option<u32> {
        Some(Permit::slot(self))
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        keys.iter()
            .take(1)
            .map(|key| {
                (
                    target.sem_names(key).holder(Permit::slot(self)),
                    self.fence(),
                )
            })
            .collect()
    }

    fn is_valid(&self) -> bool {
        Permit::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        Permit::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        Permit::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        Permit::release(self)
    }
}

/// `elect`'s leadership: its term is its fence; its keeper renews it, so
/// keeping it alive is only watching its loss signal.
impl Held for Leadership {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "leadership";

    fn number(&self) -> Fence {
        self.term()
    }

    fn more_variables(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![
            ("REDLEASE_TERM", self.term().to_string()),
            ("REDLEASE_ELECTION", key.to_owned()),
        ]
    }

    fn records(&self, _: &Target, _: &[&str]) -> Vec<(String, Fence)> {
        Vec::new()
    }

    fn is_valid(&self) -> bool {
        Leadership::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        Leadership::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        f(self.lost())
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        Leadership::resign(self)
    }
}

/// `--also`: KEY's lock and every `--also` key's, as one multi-key lease.
/// Its number is KEY's fence; every key's comes as REDLEASE_FENCES.
impl Held for MultiLease {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "multi-key lease";

    /// KEY's fence: the first key's (a multi-key lease has at least one).
    fn number(&self) -> Fence {
        self.fences().first().copied().unwrap_or(Fence::new(0))
    }

    fn more_variables(&self, _key: &str) -> Vec<(&'static str, String)> {
        let fences: Vec<String> = self.fences().iter().map(Fence::to_string).collect();
        vec![("REDLEASE_FENCES", fences.join(" "))]
    }

    fn records(&self, target: &Target, keys: &[&str]) -> Vec<(String, Fence)> {
        keys.iter()
            .zip(self.fences())
            .map(|(key, fence)| (target.names(key).holder, *fence))
            .collect()
    }

    fn is_valid(&self) -> bool {
        MultiLease::is_valid(self)
    }

    fn remaining(&self) -> Duration {
        MultiLease::remaining(self)
    }

    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T {
        MultiLease::keep_alive(self, f)
    }

    fn release(self) -> Result<ReleaseOutcome, Error> {
        MultiLease::release(self)
    }
}
