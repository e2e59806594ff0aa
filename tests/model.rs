//! The crate's real Lua, run in-process on Lua 5.1 (Redis's) against an
//! emulated Redis key space (`model/emu.rs`, `model/lua.rs`):
//!
//! - `crosscheck`: the emulator against a real `redis-server`;
//! - `declared`: every key a script touches is one of its `KEYS`;
//! - `explore`: the lock protocol's interleavings explored exhaustively;
//! - `explore_rw`: the read-write lease's, likewise;
//! - `explore_sem`: the semaphore's, likewise;
//! - `explore_elect`: the leader election's, likewise;
//! - `explore_locker`: the hand-over without the claim with lockers of
//!   two waiters, for the lock and the semaphore (by kind), and the lock's
//!   runs, lingering registrations among them;
//! - `explore_sem_locker`: its semaphore runs;
//! - `explore_multi`: the multi-key lease's, likewise.

mod support;

mod model {
    pub(crate) mod calls;
    mod crosscheck;
    mod declared;
    pub(crate) mod emu;
    pub(crate) mod explore;
    mod explore_elect;
    mod explore_locker;
    mod explore_multi;
    mod explore_rw;
    mod explore_sem;
    mod explore_sem_locker;
    pub(crate) mod lua;
    pub(crate) mod scenarios;
    mod search;
    mod smoke;
}
