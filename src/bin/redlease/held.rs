//! What `run` holds while the command runs: the key's lock (the default),
//! or a read (`--shared`) or write (`--exclusive`) lease of its read-write
//! lease, behind one small interface, so the acquire, supervision and
//! release are written once.

use std::time::Duration;

use redlease::blocking::{Lease, ReadLease, WriteLease};
use redlease::{Error, Fence, Lost, ReleaseOutcome};

/// A lease of either kind, as `run` uses it.
pub(crate) trait Held: Sync {
    /// The variable that hands [`number`](Self::number) to the command.
    const VARIABLE: &'static str;
    /// What it is called in messages.
    const NAME: &'static str;
    /// Whether `status` can show it: the holder record is the lock's.
    const RECORDED: bool;
    /// The lease's fence, or a read lease's epoch.
    fn number(&self) -> Fence;
    fn is_valid(&self) -> bool;
    fn remaining(&self) -> Duration;
    fn keep_alive<T>(&self, f: impl FnOnce(&Lost) -> T) -> T;
    fn release(self) -> Result<ReleaseOutcome, Error>;
}

impl Held for Lease {
    const VARIABLE: &'static str = "REDLEASE_FENCE";
    const NAME: &'static str = "lease";
    const RECORDED: bool = true;

    fn number(&self) -> Fence {
        self.fence()
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
    const RECORDED: bool = false;

    fn number(&self) -> Fence {
        self.epoch()
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
    const RECORDED: bool = false;

    fn number(&self) -> Fence {
        self.fence()
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
