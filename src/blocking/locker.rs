//! `blocking::Locker` (`Locker<Blocking>`) and how it opens its
//! connections: the pooled sync connections, over which it sends the
//! connect-time checks (`src/driver/connect.rs`). The constructors
//! themselves are written once in `src/handle/connect.rs`.

use super::connection::Commands;
use crate::config::Config;
use crate::driver::connect::{prepare, Ask};
use crate::driver::target::Target;
use crate::error::Error;
use crate::front::Blocking;

/// A lease client for std threads: `Locker<Blocking>` (see
/// [`Locker`](crate::Locker) for what every locker and its examples do).
/// Each call runs on the caller's thread and returns its result; dropping
/// a held lease releases it at once.
pub type Locker = crate::Locker<Blocking>;

/// Opens a blocking locker's connections to `target` and runs the
/// connect-time checks (`Front::open`).
pub(super) fn open(target: Target, config: Config) -> Result<Locker, Error> {
    let (shared, mut checks) = prepare(target, config, Some(0), Commands::new)?;
    while let Some(ask) = checks.next() {
        let reply = match ask {
            Ask::One(cmd) => shared.commands.query_fresh(&cmd),
            Ask::EveryPrimary(cmd) => shared.commands.every_primary(&cmd),
        };
        checks.settle(&shared, reply)?;
    }
    Ok(Locker::from_shared(shared))
}
