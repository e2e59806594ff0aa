//! The crate's Lua scripts as Redis receives them (tests and benchmarks
//! cannot see crate-private items). A script is a line `Variant "name" =
//! ["fragment", ..., "file"];` of the `scripts!` table in
//! `src/core/script.rs`, named here `VARIANT_LUA` (`SemAcquire`:
//! `SEM_ACQUIRE_LUA`), or a `const NAME_LUA: &str = lua!("file");` of
//! another module: the concatenation of `src/scripts/<name>.lua` for each
//! file, as the crate's `lua!` composes it at build time.

/// The `scripts!` table, and the modules with a `const … = lua!(…)`.
const TABLE: &str = include_str!("../../src/core/script.rs");
const SOURCES: [&str; 1] = [include_str!("../../src/fenced.rs")];

/// `SemAcquire` → `SEM_ACQUIRE_LUA`.
fn const_name(variant: &str) -> String {
    let mut name = String::new();
    for (i, c) in variant.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name + "_LUA"
}

/// Every script: its name and the list of files inside `[...]` or `lua!(...)`.
fn scripts() -> Vec<(String, &'static str)> {
    let table = TABLE.lines().filter_map(|line| {
        let (head, rest) = line.trim().split_once(" = [")?;
        let (variant, quoted) = head.split_once(' ')?;
        let named = variant.chars().all(|c| c.is_ascii_alphanumeric()) && quoted.starts_with('"');
        let list = rest.strip_suffix("];").filter(|_| named)?;
        Some((const_name(variant), list))
    });
    let consts = SOURCES.iter().flat_map(|file| {
        file.lines().filter_map(|line| {
            let rest = line.trim().strip_prefix("const ")?;
            let (name, rest) = rest.split_once(": &str = lua!(")?;
            Some((name.to_owned(), rest.strip_suffix(");")?))
        })
    });
    table.chain(consts).collect()
}

/// The file names the script `name` is composed of.
fn parts(name: &str) -> Option<Vec<&'static str>> {
    let (_, list) = scripts().into_iter().find(|(n, _)| n == name)?;
    Some(
        list.split(',')
            .map(|part| part.trim().trim_matches('"'))
            .filter(|part| !part.is_empty())
            .collect(),
    )
}

/// The whole source of the script `const <name>`.
pub fn script_source(name: &str) -> Result<String, String> {
    let parts = parts(name).ok_or_else(|| format!("the crate defines no script {name}"))?;
    let mut source = String::new();
    for part in parts {
        let path = format!("{}/src/scripts/{part}.lua", env!("CARGO_MANIFEST_DIR"));
        source.push_str(&std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?);
    }
    Ok(source)
}

/// The name of every script the crate composes with `lua!`.
#[allow(
    dead_code,
    reason = "the benchmarks include this file and ask by name only"
)]
pub fn script_names() -> Vec<String> {
    scripts().into_iter().map(|(name, _)| name).collect()
}
