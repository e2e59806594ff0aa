//! A fenced write to PostgreSQL: the lease's fence goes in a `BIGINT`
//! column, and a write is applied only if its fence is not below the
//! stored one, checked and written in one transaction. A holder that lost
//! its lease without knowing it (here: one that kept its fence after the
//! release) is refused once a newer holder wrote.
//!
//! ```text
//! REDLEASE_EXAMPLE_POSTGRES_URL="host=localhost user=postgres" cargo run --example postgres_fencing
//! ```
//!
//! Without `REDLEASE_EXAMPLE_POSTGRES_URL` it says so and exits. It creates
//! the table `redlease_example_reports` if missing. Uses
//! `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway
//! `redis-server` on a free loopback port (and stops it at the end).
#![allow(clippy::disallowed_methods)] // examples/common waits for the throwaway server

use std::error::Error;
use std::time::Duration;

use postgres::{Client, NoTls};
use redlease::{blocking::Locker, Config, Fence};

mod common;
use common::ThrowawayServer;

/// The database to write to (a `postgres` connection string or URL).
const DB_VAR: &str = "REDLEASE_EXAMPLE_POSTGRES_URL";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS redlease_example_reports (
    id    TEXT PRIMARY KEY,
    body  TEXT NOT NULL,
    fence BIGINT NOT NULL
)";

/// A fence as PostgreSQL stores it: `BIGINT` is signed, so a fence above
/// `i64::MAX` (none is near it: fences count microseconds since 1970) is
/// an error rather than a negative number that compares low.
fn sql_fence(fence: Fence) -> Result<i64, Box<dyn Error>> {
    Ok(i64::try_from(fence.get())?)
}

/// Writes report `id` if `fence` is not below the fence of the last write
/// to it; `false` when it is (stale: nothing written). An equal fence is
/// the same holder writing again.
fn fenced_write(
    db: &mut Client,
    id: &str,
    fence: Fence,
    body: &str,
) -> Result<bool, Box<dyn Error>> {
    let fence = sql_fence(fence)?;
    let mut tx = db.transaction()?;
    // The first write creates the row, so that there is a row to lock.
    tx.execute(
        "INSERT INTO redlease_example_reports (id, body, fence) VALUES ($1, '', 0)
         ON CONFLICT (id) DO NOTHING",
        &[&id],
    )?;
    // The lock on the row holds until the commit: no other write can slip
    // in between the check and the update.
    let stored: i64 = tx
        .query_one(
            "SELECT fence FROM redlease_example_reports WHERE id = $1 FOR UPDATE",
            &[&id],
        )?
        .get(0);
    if stored > fence {
        return Ok(false); // dropping `tx` rolls it back
    }
    tx.execute(
        "UPDATE redlease_example_reports SET body = $2, fence = $3 WHERE id = $1",
        &[&id, &body, &fence],
    )?;
    // Other writes of the same unit of work go here, in this transaction.
    tx.commit()?;
    Ok(true)
}

/// The same check in one statement, when the write is one row: an upsert
/// whose update applies only to a fence not below the stored one.
fn fenced_upsert(
    db: &mut Client,
    id: &str,
    fence: Fence,
    body: &str,
) -> Result<bool, Box<dyn Error>> {
    let rows = db.execute(
        "INSERT INTO redlease_example_reports AS r (id, body, fence) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, fence = EXCLUDED.fence
         WHERE r.fence <= EXCLUDED.fence",
        &[&id, &body, &sql_fence(fence)?],
    )?;
    Ok(rows == 1)
}

fn main() -> Result<(), Box<dyn Error>> {
    let Ok(db_url) = std::env::var(DB_VAR) else {
        println!("{DB_VAR} is not set: nothing to write to (see the example's header)");
        return Ok(());
    };
    let mut db = Client::connect(&db_url, NoTls)?;
    db.batch_execute(SCHEMA)?;
    let server = ThrowawayServer::start_unless_configured()?;
    let locker = Locker::connect(
        server.url().as_str(),
        Config::new("redlease-example").lease(Duration::from_secs(5)),
    )?;
    let id = format!("nightly-report-{}", std::process::id());

    let old = locker.acquire("nightly-report")?;
    let old_fence = old.fence();
    println!(
        "first holder, fence {old_fence}: written {}",
        fenced_upsert(&mut db, &id, old_fence, "draft")?
    );
    // It loses the lease (a pause past its lease would do the same)...
    old.release()?;
    // ... a newer holder writes with a higher fence ...
    let new = locker.acquire("nightly-report")?;
    println!(
        "second holder, fence {}: written {}",
        new.fence(),
        fenced_write(&mut db, &id, new.fence(), "final")?
    );
    // ... and the first holder's late write is refused.
    let late = fenced_write(&mut db, &id, old_fence, "late draft")?;
    println!("first holder again, fence {old_fence}: written {late}");
    assert!(!late, "a stale fence was accepted");
    new.release()?;
    db.execute("DELETE FROM redlease_example_reports WHERE id = $1", &[&id])?;
    locker.shutdown()?;
    Ok(())
}
