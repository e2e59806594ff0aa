//! `script-floor`: what a script costs Redis by itself, and per call inside
//! it, next to what the crate's lock scripts cost.
//!
//! Each row runs one script `--calls-per-row` times (pipelined 16 deep on
//! one connection, so the client's speed does not matter) and reads
//! `INFO commandstats` around it: the `EVALSHA`'s server time per call,
//! which includes the calls inside. Rows: an empty script; scripts of 1,
//! 2, 4 and 7 `GET`s (a read's own time is small, so the growth is the
//! cost of a `redis.call`); the unfenced baseline's compare-and-delete; the
//! crate's acquire on a held key (busy), acquire + release of a free key
//! (the uncontended cycle), and the release alone of a key not held.

use crate::json::J;
use crate::util::{self, loadavg, CommandStats};
use crate::{Args, BoxResult};

/// Server µs per `EVALSHA` of `script`, each of `calls` (keys, args) sent
/// `n` times.
fn evalsha_us(
    conn: &mut redis::Connection,
    script: &str,
    calls: &[(Vec<String>, Vec<String>)],
    n: usize,
) -> BoxResult<f64> {
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(script).query(conn)?;
    CommandStats::reset(conn)?;
    let mut sent = 0;
    while sent < n {
        let mut pipe = redis::pipe();
        for _ in 0..16.min(n - sent) {
            for (keys, args) in calls {
                pipe.cmd("EVALSHA")
                    .arg(&sha)
                    .arg(keys.len())
                    .arg(keys)
                    .arg(args)
                    .ignore();
            }
            sent += 1;
        }
        pipe.query::<()>(conn)?;
    }
    let stats = CommandStats::read(conn)?;
    let calls_made = stats.calls("evalsha").max(1);
    Ok(stats.usec("evalsha") as f64 / calls_made as f64)
}

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let n: usize = args.num("calls-per-row", 20_000)?;
    let load_before = loadavg();
    let mut conn = util::connect(&url)?;
    let ns = util::fresh_namespace("script-floor");
    let (lock, counter) = (format!("{{{ns}}}:lock"), format!("{{{ns}}}:fence"));
    let (held, held_counter) = (format!("{{{ns}}}:held"), format!("{{{ns}}}:held-fence"));
    redis::cmd("SET")
        .arg(&held)
        .arg("someone-else:1")
        .arg("PX")
        .arg(600_000)
        .query::<()>(&mut conn)?;
    let gets = |k: usize| {
        let mut body: String = (0..k)
            .map(|_| "redis.call('GET', KEYS[1])\n".to_owned())
            .collect();
        body.push_str("return 1");
        body
    };
    let key = |k: &str| vec![k.to_owned()];
    let acquire = util::crate_script("ACQUIRE_LUA")?;
    let release = util::crate_script("RELEASE_LUA")?;
    let token = "0123456789abcdef0123456789abcdef".to_owned();
    let acquire_args = vec![token.clone(), "30000".to_owned(), "0".to_owned()];
    let release_args = vec![
        token.clone(),
        "PUBLISH".to_owned(),
        format!("{ns}:released"),
        "message".to_owned(),
    ];
    let mut rows = Vec::new();
    let mut row = |name: &str, us: f64| {
        eprintln!("script-floor {name:>58}: {us:6.2} µs of server time per EVALSHA");
        rows.push(J::obj([
            ("script", J::from(name)),
            ("server_us_per_evalsha", J::round(us, 2)),
        ]));
    };
    row(
        "empty (return 1)",
        evalsha_us(&mut conn, "return 1", &[(key(&lock), vec![])], n)?,
    );
    for k in [1, 2, 4, 7] {
        let us = evalsha_us(&mut conn, &gets(k), &[(key(&lock), vec![])], n)?;
        row(&format!("{k} GET of a missing key"), us);
    }
    let cad = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
    row(
        "baseline compare-and-delete of a key not held",
        evalsha_us(&mut conn, cad, &[(key(&lock), vec![token.clone()])], n)?,
    );
    row(
        "acquire of a held key (busy: MGET, PTTL)",
        evalsha_us(
            &mut conn,
            &acquire,
            &[(
                vec![held.clone(), held_counter.clone()],
                acquire_args.clone(),
            )],
            n,
        )?,
    );
    // Acquire and release alternate in one pipeline; the two scripts'
    // EVALSHAs are averaged, so the cycle is twice the figure.
    let cycle = {
        let sha_a: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&acquire)
            .query(&mut conn)?;
        let sha_r: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&release)
            .query(&mut conn)?;
        CommandStats::reset(&mut conn)?;
        let mut sent = 0;
        while sent < n {
            let mut pipe = redis::pipe();
            for _ in 0..16.min(n - sent) {
                pipe.cmd("EVALSHA")
                    .arg(&sha_a)
                    .arg(2)
                    .arg(&lock)
                    .arg(&counter)
                    .arg(&acquire_args)
                    .ignore();
                pipe.cmd("EVALSHA")
                    .arg(&sha_r)
                    .arg(1)
                    .arg(&lock)
                    .arg(&release_args)
                    .ignore();
                sent += 1;
            }
            pipe.query::<()>(&mut conn)?;
        }
        let stats = CommandStats::read(&mut conn)?;
        stats.usec("evalsha") as f64 / sent.max(1) as f64
    };
    row(
        "acquire + release of a free key (one cycle, both scripts)",
        cycle,
    );
    row(
        "release of a key not held (GET)",
        evalsha_us(
            &mut conn,
            &release,
            &[(key(&lock), release_args.clone())],
            n,
        )?,
    );
    redis::cmd("DEL")
        .arg(&held)
        .arg(&counter)
        .query::<()>(&mut conn)?;
    Ok(J::obj([
        ("calls_per_row", J::from(n)),
        ("rows", J::Arr(rows)),
        ("load_before", J::from(load_before.as_str())),
        ("load_after", J::from(loadavg().as_str())),
    ]))
}
