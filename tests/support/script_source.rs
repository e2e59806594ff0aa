//! The crate's Lua scripts as Redis receives them, read from
//! src/core/script.rs and src/core/multi.rs at build time (tests and
//! benchmarks cannot see crate-private items): a script is either one raw
//! string, `const NAME: &str = r#"..."#;`, or shared fragments followed by
//! its own text, `concat!(fragment_lua!(), ..., r#"..."#)`, where each
//! fragment is `macro_rules! fragment_lua { () => { r#"..."# }; }` in
//! src/core/script.rs.

const SCRIPT_RS: &str = include_str!("../../src/core/script.rs");

/// The files a script may be defined in; fragments live in the first.
const SOURCES: [&str; 2] = [SCRIPT_RS, include_str!("../../src/core/multi.rs")];

/// The text of the raw string in `file` that begins right after `marker`.
fn raw_after(file: &'static str, marker: &str) -> Option<&'static str> {
    let start = file.find(marker)? + marker.len();
    let len = file[start..].find("\"#")?;
    Some(&file[start..start + len])
}

/// The whole source of the script `const <name>`.
pub fn script_source(name: &str) -> Result<String, String> {
    let missing = || format!("src/core has no script {name} of a known form");
    let raw = format!("const {name}: &str = r#\"");
    if let Some(source) = SOURCES.iter().find_map(|file| raw_after(file, &raw)) {
        return Ok(source.to_owned());
    }
    let marker = format!("const {name}: &str = concat!(\n");
    let (file, start) = SOURCES
        .iter()
        .find_map(|file| Some((*file, file.find(&marker)? + marker.len())))
        .ok_or_else(missing)?;
    let mut source = String::new();
    for line in file[start..].lines().map(str::trim) {
        if let Some(fragment) = line.strip_suffix("!(),") {
            let shared = raw_after(
                SCRIPT_RS,
                &format!("macro_rules! {fragment} {{\n    () => {{\n        r#\""),
            )
            .ok_or_else(|| format!("src/core/script.rs has no fragment {fragment}!"))?;
            source.push_str(shared);
        } else if line == "r#\"" {
            let after = &file[start..];
            let at = after.find("r#\"").ok_or_else(missing)? + 3;
            let len = after[at..].find("\"#").ok_or_else(missing)?;
            source.push_str(&after[at..at + len]);
            return Ok(source);
        } else {
            return Err(missing());
        }
    }
    Err(missing())
}
