//! The scripts' `KEYS` and `ARGV` built as the crate builds them
//! (`ScriptCall` in src/core/script.rs, src/core/tracking.rs,
//! src/core/multi.rs, src/core/election.rs; names from src/core/names.rs),
//! for a standalone server (`PUBLISH` on `<ns>:lock-released`).

use std::collections::HashMap;

use crate::support::script_source::script_source;

/// One script invocation: the script's const name, its keys and arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Call {
    pub(crate) script: &'static str,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<String>,
}

/// The names of one key (`<sha>`: 64 hex digits) in namespace `ns`.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) ns: String,
    pub(crate) sha: String,
}

/// Which line a queue serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QKind {
    Lock,
    Sem,
    Rw,
}

impl QKind {
    fn word(self) -> &'static str {
        match self {
            QKind::Lock => "lock",
            QKind::Sem => "sem",
            QKind::Rw => "rw",
        }
    }
}

impl Names {
    pub(crate) fn new(ns: &str, n: u64) -> Names {
        Names {
            ns: ns.to_owned(),
            sha: format!("{n:064x}"),
        }
    }
    fn braced(&self) -> String {
        format!("{{{}}}", self.sha)
    }
    fn name(&self, what: &str) -> String {
        format!("{}:{what}:{}", self.ns, self.braced())
    }
    pub(crate) fn lock(&self) -> String {
        self.name("lock")
    }
    pub(crate) fn lock_fence(&self) -> String {
        self.name("lock-fence")
    }
    pub(crate) fn queue(&self, k: QKind) -> String {
        self.name(&format!("{}-queue", k.word()))
    }
    pub(crate) fn flag(&self, k: QKind) -> String {
        self.name(&format!("{}-queued", k.word()))
    }
    /// The registration key of queue entry `entry`.
    pub(crate) fn reg(&self, k: QKind, entry: &str) -> String {
        format!("{}:{entry}", self.name(&format!("{}-reg", k.word())))
    }
    pub(crate) fn sem_permits(&self) -> String {
        self.name("sem-permits")
    }
    pub(crate) fn sem_slot_prefix(&self) -> String {
        format!("{}:", self.name("sem"))
    }
    pub(crate) fn sem_fence_prefix(&self) -> String {
        format!("{}:", self.name("sem-fence"))
    }
    pub(crate) fn rw(&self, what: &str) -> String {
        self.name(&format!("rw-{what}"))
    }
    /// An election's lease, term counter and log.
    pub(crate) fn elect(&self) -> String {
        self.name("elect")
    }
    pub(crate) fn elect_term(&self) -> String {
        self.name("elect-term")
    }
    pub(crate) fn elect_log(&self) -> String {
        self.name("elect-log")
    }
    pub(crate) fn channel(&self) -> String {
        format!("{}:lock-released", self.ns)
    }
    /// The release message of the line (`Kind::message`).
    pub(crate) fn message(&self, k: QKind) -> String {
        match k {
            QKind::Lock => self.sha.clone(),
            QKind::Sem => format!("sem:{}", self.sha),
            QKind::Rw => format!("rw:{}", self.sha),
        }
    }
}

/// A token of 32 hex digits.
pub(crate) fn token(n: u64) -> String {
    format!("{n:032x}")
}

/// The hand-over part of an acquire (`AcquireHandover`).
#[derive(Debug, Clone)]
pub(crate) struct Hand {
    /// The queue entry id (`<reg>`, `r<reg>`, `w<reg>`).
    pub(crate) entry: String,
    pub(crate) reg_ms: u64,
    pub(crate) claim_ms: u64,
    /// The grant token.
    pub(crate) grant: String,
    /// Whether it registers if it waits.
    pub(crate) register: bool,
    /// Whether its registration is queued (as far as the replies told).
    pub(crate) registered: bool,
    /// `d`, `k` or `r`.
    pub(crate) keep: &'static str,
    /// The line's highest fence given (a lock's; `None`: empty, no floor).
    pub(crate) floor: Option<u128>,
}

impl Hand {
    fn args(&self, n: &Names, k: QKind) -> Vec<String> {
        vec![
            self.entry.clone(),
            self.reg_ms.to_string(),
            self.claim_ms.to_string(),
            "PUBLISH".to_owned(),
            n.channel(),
            n.message(k),
            if self.registered {
                self.grant.clone()
            } else {
                String::new()
            },
            self.keep.to_owned(),
            if self.register {
                self.grant.clone()
            } else {
                String::new()
            },
            self.floor.map(|f| f.to_string()).unwrap_or_default(),
        ]
    }
}

impl Call {
    fn new(script: &'static str, keys: Vec<String>, args: Vec<String>) -> Call {
        Call { script, keys, args }
    }

    fn add_hand(&mut self, n: &Names, k: QKind, hand: Option<&Hand>) {
        if let Some(h) = hand {
            self.keys
                .extend([n.queue(k), n.flag(k), n.reg(k, &h.entry)]);
            self.args.extend(h.args(n, k));
        }
    }

    pub(crate) fn acquire(n: &Names, tok: &str, lease: u64, ttl: u64, hand: Option<&Hand>) -> Call {
        let mut c = Call::new(
            "ACQUIRE_LUA",
            vec![n.lock(), n.lock_fence()],
            vec![tok.to_owned(), lease.to_string(), ttl.to_string()],
        );
        c.add_hand(n, QKind::Lock, hand);
        c
    }

    /// `ScriptCall::release` of lease key `key` of line kind `k`.
    pub(crate) fn release(n: &Names, key: &str, k: QKind, tok: &str) -> Call {
        Call::new(
            "RELEASE_LUA",
            vec![key.to_owned()],
            vec![
                tok.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                n.message(k),
            ],
        )
    }

    /// `.handing_over(counter, queue, ttl)`.
    pub(crate) fn handing_over(mut self, n: &Names, k: QKind, counter: String, ttl: u64) -> Call {
        self.keys.extend([counter, n.queue(k), n.flag(k)]);
        self.args.push(ttl.to_string());
        self
    }

    /// `.skipping(reg)`: a lingering registration.
    pub(crate) fn skipping(mut self, reg: &str) -> Call {
        self.args.push(reg.to_owned());
        self
    }

    /// `.serving_slot(slot)`: a permit's slot.
    pub(crate) fn serving_slot(mut self, slot: u32) -> Call {
        self.args.extend([String::new(), slot.to_string()]);
        self
    }

    /// `.with_rw_key(key)`.
    pub(crate) fn with_rw_key(mut self, key: String) -> Call {
        self.keys.push(key);
        self
    }

    /// The release of a held lock with the hand-over, as tracking.rs builds
    /// it (`lingering`: the locker's own registration, never granted).
    pub(crate) fn lock_release(n: &Names, tok: &str, ttl: u64, lingering: Option<&str>) -> Call {
        let c = Call::release(n, &n.lock(), QKind::Lock, tok).handing_over(
            n,
            QKind::Lock,
            n.lock_fence(),
            ttl,
        );
        match lingering {
            Some(reg) => c.skipping(reg),
            None => c,
        }
    }

    pub(crate) fn renew(key: &str, tok: &str, lease: u64) -> Call {
        Call::new(
            "RENEW_LUA",
            vec![key.to_owned()],
            vec![tok.to_owned(), lease.to_string()],
        )
    }

    /// The removal of registration `entry`, the one that names `owner`
    /// (empty: whichever is there).
    pub(crate) fn deregister(n: &Names, k: QKind, entry: &str, owner: &str) -> Call {
        Call::new(
            "DEREGISTER_LUA",
            vec![n.queue(k), n.reg(k, entry)],
            vec![owner.to_owned()],
        )
    }

    pub(crate) fn sem_acquire(
        n: &Names,
        permits: u32,
        tok: &str,
        lease: u64,
        ttl: u64,
        hand: Option<&Hand>,
    ) -> Call {
        let mut c = Call::new(
            "SEM_ACQUIRE_LUA",
            std::iter::once(n.sem_permits())
                .chain((0..permits).map(|i| format!("{}{i}", n.sem_slot_prefix())))
                .chain((0..permits).map(|i| format!("{}{i}", n.sem_fence_prefix())))
                .collect(),
            vec![
                tok.to_owned(),
                lease.to_string(),
                ttl.to_string(),
                permits.to_string(),
            ],
        );
        c.add_hand(n, QKind::Sem, hand);
        c
    }

    /// The release of a permit's slot with the hand-over.
    pub(crate) fn slot_release(n: &Names, slot: u32, tok: &str, ttl: u64) -> Call {
        Call::release(
            n,
            &format!("{}{slot}", n.sem_slot_prefix()),
            QKind::Sem,
            tok,
        )
        .handing_over(
            n,
            QKind::Sem,
            format!("{}{slot}", n.sem_fence_prefix()),
            ttl,
        )
        .serving_slot(slot)
    }

    pub(crate) fn sem_release_any(n: &Names, permits: u32, tok: &str) -> Call {
        Call::new(
            "SEM_RELEASE_ANY_LUA",
            (0..permits)
                .map(|i| format!("{}{i}", n.sem_slot_prefix()))
                .collect(),
            vec![
                tok.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                n.message(QKind::Sem),
            ],
        )
    }

    /// `rw_acquire` of a read (`intent` is `None`) or a write.
    pub(crate) fn rw_acquire(
        n: &Names,
        tok: &str,
        lease: u64,
        ttl: u64,
        intent: Option<u64>,
        hand: Option<&Hand>,
    ) -> Call {
        let mut args = vec![tok.to_owned(), lease.to_string(), ttl.to_string()];
        if let Some(i) = intent {
            args.push(i.to_string());
        }
        let mut c = Call::new(
            if intent.is_some() {
                "RW_WRITE_LUA"
            } else {
                "RW_READ_LUA"
            },
            vec![n.rw("write"), n.rw("read"), n.rw("intent"), n.rw("fence")],
            args,
        );
        c.add_hand(n, QKind::Rw, hand);
        c
    }

    /// A writer's release with the hand-over.
    pub(crate) fn write_release(n: &Names, tok: &str, ttl: u64) -> Call {
        Call::release(n, &n.rw("write"), QKind::Rw, tok)
            .handing_over(n, QKind::Rw, n.rw("fence"), ttl)
            .with_rw_key(n.rw("read"))
    }

    /// A reader's release (`ttl`: with the hand-over).
    pub(crate) fn read_release(n: &Names, tok: &str, ttl: Option<u64>) -> Call {
        let c = Call::new(
            "RW_READ_RELEASE_LUA",
            vec![n.rw("read")],
            vec![
                tok.to_owned(),
                "PUBLISH".to_owned(),
                n.channel(),
                n.message(QKind::Rw),
            ],
        );
        match ttl {
            Some(ttl) => c
                .handing_over(n, QKind::Rw, n.rw("fence"), ttl)
                .with_rw_key(n.rw("write")),
            None => c,
        }
    }

    pub(crate) fn read_renew(n: &Names, tok: &str, lease: u64) -> Call {
        Call::new(
            "RW_READ_RENEW_LUA",
            vec![n.rw("read")],
            vec![tok.to_owned(), lease.to_string()],
        )
    }

    /// `multi_acquire_call`; `register`: the entry id and its bound.
    pub(crate) fn multi_acquire(
        names: &[Names],
        tok: &str,
        lease: u64,
        ttl: u64,
        since: u64,
        reserve: u64,
        register: Option<(&str, u64)>,
    ) -> Call {
        let mut keys: Vec<String> = names.iter().map(Names::lock).collect();
        keys.extend(names.iter().map(Names::lock_fence));
        let mut args = vec![
            tok.to_owned(),
            lease.to_string(),
            ttl.to_string(),
            since.to_string(),
            reserve.to_string(),
        ];
        if let Some((reg, reg_ms)) = register {
            keys.extend(names.iter().map(|n| n.queue(QKind::Lock)));
            keys.extend(names.iter().map(|n| n.flag(QKind::Lock)));
            keys.extend(names.iter().map(|n| n.reg(QKind::Lock, reg)));
            args.push(reg.to_owned());
            args.push(reg_ms.to_string());
        }
        Call::new("MULTI_ACQUIRE_LUA", keys, args)
    }

    /// The publish arguments of the election scripts: command, channel and
    /// the name's digest.
    fn elect_publish(n: &Names) -> [String; 3] {
        ["PUBLISH".to_owned(), n.channel(), n.sha.clone()]
    }

    /// `campaign_call` of `tok` with the value `value_hex`.
    pub(crate) fn campaign(n: &Names, tok: &str, lease: u64, value_hex: &str) -> Call {
        let mut args = vec![tok.to_owned(), lease.to_string(), value_hex.to_owned()];
        args.extend(Call::elect_publish(n));
        Call::new(
            "CAMPAIGN_LUA",
            vec![n.elect(), n.elect_term(), n.elect_log()],
            args,
        )
    }

    /// `proclaim_call` of `value_hex` by `tok`, whose last entry is `last`.
    pub(crate) fn proclaim(n: &Names, tok: &str, value_hex: &str, last: &str) -> Call {
        let mut args = vec![tok.to_owned(), value_hex.to_owned(), last.to_owned()];
        args.extend(Call::elect_publish(n));
        Call::new("PROCLAIM_LUA", vec![n.elect(), n.elect_log()], args)
    }

    /// `resign_call` of `tok`.
    pub(crate) fn resign(n: &Names, tok: &str) -> Call {
        let mut args = vec![tok.to_owned()];
        args.extend(Call::elect_publish(n));
        Call::new("RESIGN_LUA", vec![n.elect(), n.elect_log()], args)
    }

    /// `read_call`, listing the entries after `after` (`''`: none).
    pub(crate) fn elect_read(n: &Names, after: &str) -> Call {
        Call::new(
            "ELECT_READ_LUA",
            vec![n.elect(), n.elect_log()],
            vec![after.to_owned()],
        )
    }

    pub(crate) fn multi_renew(names: &[Names], tok: &str, lease: u64) -> Call {
        Call::new(
            "MULTI_RENEW_LUA",
            names.iter().map(Names::lock).collect(),
            vec![tok.to_owned(), lease.to_string()],
        )
    }

    /// `multi_release_call` (standalone: one shared channel).
    pub(crate) fn multi_release(names: &[Names], tok: &str, ttl: Option<u64>) -> Call {
        let mut keys: Vec<String> = names.iter().map(Names::lock).collect();
        if ttl.is_some() {
            keys.extend(names.iter().map(|n| n.flag(QKind::Lock)));
            keys.extend(names.iter().map(Names::lock_fence));
            keys.extend(names.iter().map(|n| n.queue(QKind::Lock)));
        }
        Call::new(
            "MULTI_RELEASE_LUA",
            keys,
            vec![
                tok.to_owned(),
                "PUBLISH".to_owned(),
                ttl.map_or_else(String::new, |t| t.to_string()),
                names[0].channel(),
            ],
        )
    }
}

/// Script texts by const name, read once through `script_source`, with
/// optional test-time mutations (string replacements).
#[derive(Debug, Default)]
pub(crate) struct Sources {
    texts: HashMap<&'static str, String>,
}

impl Sources {
    /// Every script's text as the crate ships it.
    pub(crate) fn real() -> Sources {
        Sources::default()
    }

    /// The text of `name` (mutated, if a mutation was applied).
    pub(crate) fn get(&mut self, name: &'static str) -> &str {
        self.texts
            .entry(name)
            .or_insert_with(|| script_source(name).unwrap_or_else(|e| panic!("script {name}: {e}")))
    }

    /// Replaces `from` by `to` in script `name`; panics unless `from`
    /// occurs exactly `count` times (a mutation that no longer applies
    /// must be noticed, not silently tested as a no-op).
    pub(crate) fn mutate(&mut self, name: &'static str, from: &str, to: &str, count: usize) {
        let text = self.get(name).to_owned();
        let found = text.matches(from).count();
        assert_eq!(
            found, count,
            "mutation of {name}: `{from}` occurs {found} times, expected {count}"
        );
        self.texts.insert(name, text.replace(from, to));
    }
}
