//! The crate's Lua scripts as Redis receives them (tests and benchmarks
//! cannot see crate-private items): a script is `const NAME: &str =
//! lua!("fragment", ..., "file");` in one of the crate's modules, the
//! concatenation of `src/scripts/<name>.lua` for each name, as the crate's
//! `lua!` composes it at build time.

/// The modules that define scripts with `lua!`.
const SOURCES: [&str; 4] = [
    include_str!("../../src/core/script.rs"),
    include_str!("../../src/core/multi.rs"),
    include_str!("../../src/core/election.rs"),
    include_str!("../../src/fenced.rs"),
];

/// The file names `const <name>` is composed of.
fn parts(name: &str) -> Option<Vec<&'static str>> {
    let marker = format!("const {name}: &str =");
    let (file, at) = SOURCES
        .iter()
        .find_map(|file| Some((*file, file.find(&marker)? + marker.len())))?;
    let start = at + file[at..].find("lua!(")? + "lua!(".len();
    let list = &file[start..start + file[start..].find(')')?];
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
pub fn script_names() -> Vec<&'static str> {
    SOURCES
        .iter()
        .flat_map(|file| {
            file.match_indices("_LUA: &str =")
                .map(move |(at, _)| (file, at))
        })
        .filter_map(|(file, at)| {
            let start = file[..at].rfind("const ")? + "const ".len();
            Some(&file[start..at + "_LUA".len()])
        })
        .collect()
}
