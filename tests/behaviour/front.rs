//! The front-end trait the behaviour suite is written against, and its
//! blocking implementation.
//!
//! The trait mirrors the public API in blocking terms. An async front end
//! implements it by wrapping each call in a `block_on` (e.g.
//! `futures::executor::block_on(self.0.acquire(key))`); nothing here needs
//! more than that. Cancel handles are blocking-only, so no generic body
//! passes one in `AcquireOptions`.

use std::time::Duration;

use futures::executor::block_on;
use redlease::{
    AcquireOptions, Config, Error, Fence, Leader, Observation, ReleaseOutcome, RenewOutcome, Stats,
    Version,
};

/// An election's observer as a blocking iterator.
pub(crate) type Observations = Box<dyn Iterator<Item = Observation> + Send>;

/// A locker front end: its constructor, its acquire calls, shutdown and
/// statistics, plus its lease operations as associated functions.
pub(crate) trait Front: Send + Sync + 'static {
    /// The lease this front end hands out.
    type Lease: Send + 'static;

    /// A multi-key lease.
    type Multi: Send + 'static;
    /// `locker.acquire_all_with(keys, options)`.
    fn acquire_all_with(
        &self,
        keys: &[&str],
        options: AcquireOptions,
    ) -> Result<Self::Multi, Error>;
    /// `lease.fences()`.
    fn fences(lease: &Self::Multi) -> Vec<Fence>;
    /// `lease.fence_of(key)`.
    fn fence_of(lease: &Self::Multi, key: &str) -> Option<Fence>;
    /// `lease.is_valid()`.
    fn multi_is_valid(lease: &Self::Multi) -> bool;
    /// `lease.renew()`.
    fn renew_multi(lease: &Self::Multi) -> Result<RenewOutcome, Error>;
    /// `lease.release()`.
    fn release_multi(lease: Self::Multi) -> Result<ReleaseOutcome, Error>;
    /// `format!("{lease:?}")`.
    fn multi_debug(lease: &Self::Multi) -> String;

    /// `Locker::connect(url, config)`.
    fn connect(url: &str, config: Config) -> Result<Self, Error>
    where
        Self: Sized;
    /// `locker.acquire(key)`.
    fn acquire(&self, key: &str) -> Result<Self::Lease, Error>;
    /// `locker.acquire_with(key, options)`.
    fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Lease, Error>;
    /// `locker.shutdown()`.
    fn shutdown(&self) -> Result<(), Error>;
    /// `locker.stats()`.
    fn stats(&self) -> Stats;

    /// `lease.fence()`.
    fn fence(lease: &Self::Lease) -> Fence;
    /// `lease.is_valid()`.
    fn is_valid(lease: &Self::Lease) -> bool;
    /// `lease.remaining()`.
    fn remaining(lease: &Self::Lease) -> Duration;
    /// `lease.renew()`.
    fn renew(lease: &Self::Lease) -> Result<RenewOutcome, Error>;
    /// `lease.release()`.
    fn release(lease: Self::Lease) -> Result<ReleaseOutcome, Error>;
    /// `format!("{lease:?}")`.
    fn debug(lease: &Self::Lease) -> String;
    /// `lease.replicas()`.
    #[allow(dead_code, reason = "only tests/replication.rs asks")]
    fn replicas(lease: &Self::Lease) -> Option<u32>;

    /// A permit of a semaphore.
    type Permit: Send + 'static;
    /// `locker.semaphore(key, permits)?.acquire_with(options)`.
    fn acquire_permit(
        &self,
        key: &str,
        permits: u32,
        options: AcquireOptions,
    ) -> Result<Self::Permit, Error>;
    /// `permit.slot()`.
    fn slot(permit: &Self::Permit) -> u32;
    /// `permit.fence()`.
    fn permit_fence(permit: &Self::Permit) -> Fence;
    /// `permit.is_valid()`.
    fn permit_is_valid(permit: &Self::Permit) -> bool;
    /// `permit.renew()`.
    fn renew_permit(permit: &Self::Permit) -> Result<RenewOutcome, Error>;
    /// `permit.release()`.
    fn release_permit(permit: Self::Permit) -> Result<ReleaseOutcome, Error>;
    /// `format!("{permit:?}")`.
    fn permit_debug(permit: &Self::Permit) -> String;

    /// A read lease of a read-write lease.
    type Read: Send + 'static;
    /// A write lease of a read-write lease.
    type Write: Send + 'static;
    /// `locker.rw_lock(key)?.read_with(options)`.
    fn read_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Read, Error>;
    /// `locker.rw_lock(key)?.write_with(options)`.
    fn write_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Write, Error>;
    /// `read.epoch()`.
    fn epoch(read: &Self::Read) -> Fence;
    /// `read.remaining()`.
    fn read_remaining(read: &Self::Read) -> Duration;
    /// `write.fence()`.
    fn write_fence(write: &Self::Write) -> Fence;
    /// `read.renew()`.
    fn renew_read(read: &Self::Read) -> Result<RenewOutcome, Error>;
    /// `read.release()`.
    fn release_read(read: Self::Read) -> Result<ReleaseOutcome, Error>;
    /// `write.renew()`.
    fn renew_write(write: &Self::Write) -> Result<RenewOutcome, Error>;
    /// `write.release()`.
    fn release_write(write: Self::Write) -> Result<ReleaseOutcome, Error>;

    /// The leadership of an election.
    type Leadership: Send + 'static;
    /// `locker.election(name)?.campaign_with(value, options)`.
    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        options: AcquireOptions,
    ) -> Result<Self::Leadership, Error>;
    /// `locker.election(name)?.leader()`.
    fn leader(&self, name: &str) -> Result<Option<Leader>, Error>;
    /// `format!("{:?}", locker.election(name)?)`.
    fn election_debug(&self, name: &str) -> Result<String, Error>;
    /// `locker.election(name)?.observe()`, as a blocking iterator.
    fn observe(&self, name: &str) -> Result<Observations, Error>;
    /// `leadership.term()`.
    fn term(leadership: &Self::Leadership) -> Fence;
    /// `leadership.is_valid()`.
    fn leadership_is_valid(leadership: &Self::Leadership) -> bool;
    /// `leadership.lost().is_lost()`.
    fn leadership_is_lost(leadership: &Self::Leadership) -> bool;
    /// `leadership.proclaim(value)`.
    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<Version, Error>;
    /// `leadership.resign()`.
    fn resign(leadership: Self::Leadership) -> Result<ReleaseOutcome, Error>;
    /// `format!("{leadership:?}")`.
    fn leadership_debug(leadership: &Self::Leadership) -> String;

    /// Whether a test waits for the front end to report a server-side
    /// close of an idle command connection (`stats().connected`) before its
    /// next request: the async one, whose request may be written while
    /// its connection has not yet read the close. The blocking one looks
    /// at a pooled connection before it writes on it (its TLS connection
    /// sends a `PING` in front), so its next request at once is the test.
    const NOTICES_IDLE_CLOSE: bool = false;
}

// `Locker::acquire(self, ..)` and friends name the inherent methods, which
// take precedence over this trait's methods of the same name.
impl Front for redlease::blocking::Locker {
    type Lease = redlease::blocking::Lease;

    type Multi = redlease::blocking::MultiLease;

    fn acquire_all_with(
        &self,
        keys: &[&str],
        options: AcquireOptions,
    ) -> Result<Self::Multi, Error> {
        redlease::blocking::Locker::acquire_all_with(self, keys, options)
    }

    fn fences(lease: &Self::Multi) -> Vec<Fence> {
        lease.fences().to_vec()
    }

    fn fence_of(lease: &Self::Multi, key: &str) -> Option<Fence> {
        lease.fence_of(key)
    }

    fn multi_is_valid(lease: &Self::Multi) -> bool {
        lease.is_valid()
    }

    fn renew_multi(lease: &Self::Multi) -> Result<RenewOutcome, Error> {
        lease.renew()
    }

    fn release_multi(lease: Self::Multi) -> Result<ReleaseOutcome, Error> {
        lease.release()
    }

    fn multi_debug(lease: &Self::Multi) -> String {
        format!("{lease:?}")
    }

    type Leadership = redlease::blocking::Leadership;

    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        options: AcquireOptions,
    ) -> Result<Self::Leadership, Error> {
        self.election(name)?.campaign_with(value, options)
    }

    fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        self.election(name)?.leader()
    }

    fn election_debug(&self, name: &str) -> Result<String, Error> {
        Ok(format!("{:?}", self.election(name)?))
    }

    fn observe(&self, name: &str) -> Result<Observations, Error> {
        Ok(Box::new(self.election(name)?.observe()))
    }

    fn term(leadership: &Self::Leadership) -> Fence {
        leadership.term()
    }

    fn leadership_is_valid(leadership: &Self::Leadership) -> bool {
        leadership.is_valid()
    }

    fn leadership_is_lost(leadership: &Self::Leadership) -> bool {
        leadership.lost().is_lost()
    }

    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<Version, Error> {
        leadership.proclaim(value)
    }

    fn resign(leadership: Self::Leadership) -> Result<ReleaseOutcome, Error> {
        leadership.resign()
    }

    fn leadership_debug(leadership: &Self::Leadership) -> String {
        format!("{leadership:?}")
    }

    type Read = redlease::blocking::ReadLease;
    type Write = redlease::blocking::WriteLease;

    fn read_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Read, Error> {
        self.rw_lock(key)?.read_with(options)
    }

    fn write_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Write, Error> {
        self.rw_lock(key)?.write_with(options)
    }

    fn epoch(read: &Self::Read) -> Fence {
        read.epoch()
    }

    fn read_remaining(read: &Self::Read) -> Duration {
        read.remaining()
    }

    fn write_fence(write: &Self::Write) -> Fence {
        write.fence()
    }

    fn renew_read(read: &Self::Read) -> Result<RenewOutcome, Error> {
        read.renew()
    }

    fn release_read(read: Self::Read) -> Result<ReleaseOutcome, Error> {
        read.release()
    }

    fn renew_write(write: &Self::Write) -> Result<RenewOutcome, Error> {
        write.renew()
    }

    fn release_write(write: Self::Write) -> Result<ReleaseOutcome, Error> {
        write.release()
    }

    type Permit = redlease::blocking::Permit;

    fn acquire_permit(
        &self,
        key: &str,
        permits: u32,
        options: AcquireOptions,
    ) -> Result<Self::Permit, Error> {
        self.semaphore(key, permits)?.acquire_with(options)
    }

    fn slot(permit: &Self::Permit) -> u32 {
        permit.slot()
    }

    fn permit_fence(permit: &Self::Permit) -> Fence {
        permit.fence()
    }

    fn permit_is_valid(permit: &Self::Permit) -> bool {
        permit.is_valid()
    }

    fn renew_permit(permit: &Self::Permit) -> Result<RenewOutcome, Error> {
        permit.renew()
    }

    fn release_permit(permit: Self::Permit) -> Result<ReleaseOutcome, Error> {
        permit.release()
    }

    fn permit_debug(permit: &Self::Permit) -> String {
        format!("{permit:?}")
    }

    fn connect(url: &str, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect(url, config)
    }

    fn acquire(&self, key: &str) -> Result<Self::Lease, Error> {
        redlease::blocking::Locker::acquire(self, key)
    }

    fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Lease, Error> {
        redlease::blocking::Locker::acquire_with(self, key, options)
    }

    fn shutdown(&self) -> Result<(), Error> {
        redlease::blocking::Locker::shutdown(self)
    }

    fn stats(&self) -> Stats {
        redlease::blocking::Locker::stats(self)
    }

    fn fence(lease: &Self::Lease) -> Fence {
        lease.fence()
    }

    fn is_valid(lease: &Self::Lease) -> bool {
        lease.is_valid()
    }

    fn remaining(lease: &Self::Lease) -> Duration {
        lease.remaining()
    }

    fn renew(lease: &Self::Lease) -> Result<RenewOutcome, Error> {
        lease.renew()
    }

    fn release(lease: Self::Lease) -> Result<ReleaseOutcome, Error> {
        lease.release()
    }

    fn debug(lease: &Self::Lease) -> String {
        format!("{lease:?}")
    }

    fn replicas(lease: &Self::Lease) -> Option<u32> {
        lease.replicas()
    }
}

/// The async front end, each call driven to completion with
/// `futures::executor::block_on` on the calling thread.
#[allow(
    dead_code,
    reason = "each test binary instantiates the suite for one front end"
)]
pub(crate) struct Async(redlease::aio::Locker);

impl Async {
    /// Wraps an async locker made some other way (e.g. on a cluster).
    #[allow(dead_code, reason = "used by the cluster tests only")]
    pub(crate) fn from_locker(locker: redlease::aio::Locker) -> Self {
        Async(locker)
    }
}

impl Front for Async {
    type Lease = redlease::aio::Lease;

    type Multi = redlease::aio::MultiLease;

    fn acquire_all_with(
        &self,
        keys: &[&str],
        options: AcquireOptions,
    ) -> Result<Self::Multi, Error> {
        block_on(self.0.acquire_all_with(keys, options))
    }

    fn fences(lease: &Self::Multi) -> Vec<Fence> {
        lease.fences().to_vec()
    }

    fn fence_of(lease: &Self::Multi, key: &str) -> Option<Fence> {
        lease.fence_of(key)
    }

    fn multi_is_valid(lease: &Self::Multi) -> bool {
        lease.is_valid()
    }

    fn renew_multi(lease: &Self::Multi) -> Result<RenewOutcome, Error> {
        block_on(lease.renew())
    }

    fn release_multi(lease: Self::Multi) -> Result<ReleaseOutcome, Error> {
        block_on(lease.release())
    }

    fn multi_debug(lease: &Self::Multi) -> String {
        format!("{lease:?}")
    }

    type Leadership = redlease::aio::Leadership;

    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        options: AcquireOptions,
    ) -> Result<Self::Leadership, Error> {
        block_on(self.0.election(name)?.campaign_with(value, options))
    }

    fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        block_on(self.0.election(name)?.leader())
    }

    fn election_debug(&self, name: &str) -> Result<String, Error> {
        Ok(format!("{:?}", self.0.election(name)?))
    }

    fn observe(&self, name: &str) -> Result<Observations, Error> {
        Ok(Box::new(futures::executor::block_on_stream(
            self.0.election(name)?.observe(),
        )))
    }

    fn term(leadership: &Self::Leadership) -> Fence {
        leadership.term()
    }

    fn leadership_is_valid(leadership: &Self::Leadership) -> bool {
        leadership.is_valid()
    }

    fn leadership_is_lost(leadership: &Self::Leadership) -> bool {
        leadership.lost().is_lost()
    }

    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<Version, Error> {
        block_on(leadership.proclaim(value))
    }

    fn resign(leadership: Self::Leadership) -> Result<ReleaseOutcome, Error> {
        block_on(leadership.resign())
    }

    fn leadership_debug(leadership: &Self::Leadership) -> String {
        format!("{leadership:?}")
    }

    type Read = redlease::aio::ReadLease;
    type Write = redlease::aio::WriteLease;

    fn read_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Read, Error> {
        block_on(self.0.rw_lock(key)?.read_with(options))
    }

    fn write_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Write, Error> {
        block_on(self.0.rw_lock(key)?.write_with(options))
    }

    fn epoch(read: &Self::Read) -> Fence {
        read.epoch()
    }

    fn read_remaining(read: &Self::Read) -> Duration {
        read.remaining()
    }

    fn write_fence(write: &Self::Write) -> Fence {
        write.fence()
    }

    fn renew_read(read: &Self::Read) -> Result<RenewOutcome, Error> {
        block_on(read.renew())
    }

    fn release_read(read: Self::Read) -> Result<ReleaseOutcome, Error> {
        block_on(read.release())
    }

    fn renew_write(write: &Self::Write) -> Result<RenewOutcome, Error> {
        block_on(write.renew())
    }

    fn release_write(write: Self::Write) -> Result<ReleaseOutcome, Error> {
        block_on(write.release())
    }

    type Permit = redlease::aio::Permit;

    fn acquire_permit(
        &self,
        key: &str,
        permits: u32,
        options: AcquireOptions,
    ) -> Result<Self::Permit, Error> {
        block_on(self.0.semaphore(key, permits)?.acquire_with(options))
    }

    fn slot(permit: &Self::Permit) -> u32 {
        permit.slot()
    }

    fn permit_fence(permit: &Self::Permit) -> Fence {
        permit.fence()
    }

    fn permit_is_valid(permit: &Self::Permit) -> bool {
        permit.is_valid()
    }

    fn renew_permit(permit: &Self::Permit) -> Result<RenewOutcome, Error> {
        block_on(permit.renew())
    }

    fn release_permit(permit: Self::Permit) -> Result<ReleaseOutcome, Error> {
        block_on(permit.release())
    }

    fn permit_debug(permit: &Self::Permit) -> String {
        format!("{permit:?}")
    }

    const NOTICES_IDLE_CLOSE: bool = true;

    fn connect(url: &str, config: Config) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::connect(url, config)).map(Async)
    }

    fn acquire(&self, key: &str) -> Result<Self::Lease, Error> {
        block_on(self.0.acquire(key))
    }

    fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Self::Lease, Error> {
        block_on(self.0.acquire_with(key, options))
    }

    fn shutdown(&self) -> Result<(), Error> {
        block_on(self.0.shutdown())
    }

    fn stats(&self) -> Stats {
        self.0.stats()
    }

    fn fence(lease: &Self::Lease) -> Fence {
        lease.fence()
    }

    fn is_valid(lease: &Self::Lease) -> bool {
        lease.is_valid()
    }

    fn remaining(lease: &Self::Lease) -> Duration {
        lease.remaining()
    }

    fn renew(lease: &Self::Lease) -> Result<RenewOutcome, Error> {
        block_on(lease.renew())
    }

    fn release(lease: Self::Lease) -> Result<ReleaseOutcome, Error> {
        block_on(lease.release())
    }

    fn debug(lease: &Self::Lease) -> String {
        format!("{lease:?}")
    }

    fn replicas(lease: &Self::Lease) -> Option<u32> {
        lease.replicas()
    }
}

/// A front end that can also connect to a Redis Cluster.
#[allow(
    dead_code,
    reason = "only the cluster test binaries connect to a cluster"
)]
pub(crate) trait ClusterFront: Front + Sized {
    /// `Locker::connect_cluster(nodes, config)`.
    fn connect_cluster(nodes: &[String], config: Config) -> Result<Self, Error>;
}

impl ClusterFront for redlease::blocking::Locker {
    fn connect_cluster(nodes: &[String], config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_cluster(nodes.iter().map(String::as_str), config)
    }
}

impl ClusterFront for Async {
    fn connect_cluster(nodes: &[String], config: Config) -> Result<Self, Error> {
        block_on(redlease::aio::Locker::connect_cluster(
            nodes.iter().map(String::as_str),
            config,
        ))
        .map(Async)
    }
}
