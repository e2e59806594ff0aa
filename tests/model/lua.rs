//! Scripts run as Redis 7.0 runs them, on Lua 5.1 (mlua, vendored), against
//! the emulated key space of [`super::emu`]: the globals a script sees
//! (`KEYS`, `ARGV`, `redis.call`, `redis.pcall`, `redis.error_reply`,
//! `redis.status_reply`, `redis.sha1hex`, `unpack`, globals protection) and Redis's
//! conversion rules both ways.
//!
//! Lua → Redis: a number is an integer reply (truncated), a string a bulk
//! reply, `true` the integer 1, `false` and `nil` a nil reply, a table with
//! `err` an error, with `ok` a status, else an array of its items up to the
//! first `nil`. Redis → Lua: nil is `false`, an integer a number, a bulk
//! reply a string, an array a table, a status `{ok = …}`, an error
//! `{err = …}` (which `redis.call` raises and `redis.pcall` returns).
//!
//! With a [`KeyCheck`] other than `Off`, every key argument of a command
//! (by the command's key positions) is compared with the script's `KEYS`:
//! an undeclared one is recorded, and with `Refuse` the command answers an
//! error instead of running.

use std::collections::HashMap;

use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};

use super::emu::{Db, Reply};

/// What to do with a key argument that is not one of the script's `KEYS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyCheck {
    Off,
    /// Record it and run the command.
    Record,
    /// Record it and answer an error (as Cluster would for a key of
    /// another slot, and as the audit requires).
    Refuse,
}

/// A key a command touched that the script did not declare.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Undeclared {
    pub(crate) script: String,
    pub(crate) command: String,
    pub(crate) key: String,
}

/// What one run sees: the key space (moved in for the run) and its
/// declared keys.
struct Run {
    db: Db,
    script: String,
    keys: Vec<String>,
    check: KeyCheck,
    undeclared: Vec<Undeclared>,
    trace: Option<Vec<Vec<String>>>,
}

const PRELUDE: &str = r#"
redis = {}
function redis.pcall(...)
  return __redis_raw(...)
end
function redis.call(...)
  local reply = __redis_raw(...)
  if type(reply) == 'table' and reply.err then
    error(reply, 0)
  end
  return reply
end
function redis.error_reply(e)
  return {err = e}
end
function redis.status_reply(s)
  return {ok = s}
end
function redis.sha1hex(s)
  return __sha1hex(s)
end
function __redis_run(f)
  return pcall(f)
end
"#;

/// Redis 7.0's globals protection, set after the prelude.
const PROTECT: &str = r#"
setmetatable(_G, {
  __newindex = function(_, name)
    error("Script attempted to create global variable '" .. tostring(name) .. "'", 2)
  end,
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
})
"#;

/// One Lua state running scripts against one key space.
pub(crate) struct Emulator {
    lua: Lua,
    compiled: HashMap<String, Function>,
    pub(crate) db: Db,
    pub(crate) check: KeyCheck,
    /// Every undeclared key met since the emulator was made.
    pub(crate) undeclared: Vec<Undeclared>,
    /// The commands of the last run, when tracing.
    pub(crate) trace: Option<Vec<Vec<String>>>,
}

impl std::fmt::Debug for Emulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulator").field("db", &self.db).finish()
    }
}

fn lua_to_arg(v: &LuaValue) -> Result<String, ()> {
    match v {
        LuaValue::String(s) => Ok(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        LuaValue::Integer(i) => Ok(i.to_string()),
        LuaValue::Number(n) => Ok(format_number(*n)),
        _ => Err(()),
    }
}

/// A Lua number as Redis passes it to a command (shortest round-trip form,
/// integers without a fraction).
fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

fn reply_to_lua(lua: &Lua, reply: Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(i) => LuaValue::Number(i as f64),
        Reply::Bulk(s) => LuaValue::String(lua.create_string(&s)?),
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, reply_to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            LuaValue::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", e)?;
            LuaValue::Table(t)
        }
    })
}

fn lua_to_reply(v: &LuaValue) -> Reply {
    match v {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(i) => Reply::Int(*i),
        LuaValue::Number(n) => Reply::Int(*n as i64),
        LuaValue::String(s) => Reply::Bulk(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Reply::Error(String::from_utf8_lossy(&e.as_bytes()).into_owned());
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Reply::Status(String::from_utf8_lossy(&s.as_bytes()).into_owned());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_reply(&item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

impl Emulator {
    pub(crate) fn new(db: Db) -> Emulator {
        let lua = Lua::new();
        let raw = lua
            .create_function(|lua, args: MultiValue| {
                let mut argv = Vec::with_capacity(args.len());
                for a in args.iter() {
                    match lua_to_arg(a) {
                        Ok(s) => argv.push(s),
                        Err(()) => return reply_to_lua(
                            lua,
                            Reply::Error(
                                "ERR Lua redis lib command arguments must be strings or integers"
                                    .to_owned(),
                            ),
                        ),
                    }
                }
                let reply = {
                    let mut run = lua
                        .app_data_mut::<Run>()
                        .expect("a script runs only inside Emulator::eval");
                    let run = &mut *run;
                    if let Some(trace) = run.trace.as_mut() {
                        trace.push(argv.clone());
                    }
                    let mut refused = None;
                    if run.check != KeyCheck::Off {
                        for key in Db::key_args(&argv) {
                            if !run.keys.iter().any(|k| k == key) {
                                run.undeclared.push(Undeclared {
                                    script: run.script.clone(),
                                    command: argv[0].to_ascii_uppercase(),
                                    key: key.to_owned(),
                                });
                                if run.check == KeyCheck::Refuse && refused.is_none() {
                                    refused = Some(Reply::Error(format!(
                                        "ERR key '{key}' is not declared in KEYS"
                                    )));
                                }
                            }
                        }
                    }
                    match refused {
                        Some(r) => r,
                        None => run.db.command(&argv),
                    }
                };
                reply_to_lua(lua, reply)
            })
            .expect("the raw command function");
        lua.globals().raw_set("__redis_raw", raw).expect("a global");
        let sha1hex = lua
            .create_function(|_, text: mlua::LuaString| {
                Ok(sha1_smol::Sha1::from(&text.as_bytes()[..])
                    .digest()
                    .to_string())
            })
            .expect("the sha1hex function");
        lua.globals()
            .raw_set("__sha1hex", sha1hex)
            .expect("a global");
        lua.load(PRELUDE).exec().expect("the prelude runs");
        lua.load(PROTECT).exec().expect("the protection runs");
        Emulator {
            lua,
            compiled: HashMap::new(),
            db,
            check: KeyCheck::Off,
            undeclared: Vec::new(),
            trace: None,
        }
    }

    fn function(&mut self, source: &str) -> Result<Function, Reply> {
        if let Some(f) = self.compiled.get(source) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(source)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| Reply::Error(format!("ERR Error compiling script: {e}")))?;
        self.compiled.insert(source.to_owned(), f.clone());
        Ok(f)
    }

    /// `EVAL source numkeys keys.. args..`; `name` labels undeclared keys.
    pub(crate) fn eval_named(
        &mut self,
        name: &str,
        source: &str,
        keys: &[String],
        args: &[String],
    ) -> Reply {
        let f = match self.function(source) {
            Ok(f) => f,
            Err(e) => return e,
        };
        let set = |lua: &Lua, name: &str, items: &[String]| -> mlua::Result<()> {
            let t: Table = lua.create_table()?;
            for (i, s) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(s)?)?;
            }
            lua.globals().raw_set(name, t)
        };
        set(&self.lua, "KEYS", keys).expect("KEYS");
        set(&self.lua, "ARGV", args).expect("ARGV");
        self.lua.set_app_data(Run {
            db: std::mem::take(&mut self.db),
            script: name.to_owned(),
            keys: keys.to_vec(),
            check: self.check,
            undeclared: Vec::new(),
            trace: self.trace.is_some().then(Vec::new),
        });
        let runner: Function = self
            .lua
            .globals()
            .raw_get("__redis_run")
            .expect("the runner");
        let result = runner.call::<(bool, LuaValue)>(f);
        let run = self.lua.remove_app_data::<Run>().expect("the run's state");
        self.db = run.db;
        self.undeclared.extend(run.undeclared);
        if run.trace.is_some() {
            self.trace = run.trace;
        }
        match result {
            Ok((true, v)) => lua_to_reply(&v),
            Ok((false, LuaValue::Table(t)))
                if t.raw_get::<LuaValue>("err").is_ok_and(|e| e.is_string()) =>
            {
                lua_to_reply(&LuaValue::Table(t))
            }
            Ok((false, v)) => Reply::Error(format!(
                "ERR user_script: {}",
                v.to_string().unwrap_or_else(|_| format!("{v:?}"))
            )),
            Err(e) => Reply::Error(format!("ERR {e}")),
        }
    }

    /// `EVAL` of an anonymous script.
    pub(crate) fn eval(&mut self, source: &str, keys: &[String], args: &[String]) -> Reply {
        self.eval_named("script", source, keys, args)
    }
}
