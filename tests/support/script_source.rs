//! The crate's Lua scripts as Redis receives them, read from
//! src/core/script.rs at build time (tests and benchmarks cannot see
//! crate-private items): a script is either one raw string,
//! `const NAME: &str = r#"..."#;`, or shared fragments followed by its own
//! text, `concat!(fragment_lua!(), ..., r#"..."#)`, where each fragment is
//! `macro_rules! fragment_lua { () => { r#"..."# }; }`.

const SCRIPT_RS: &str = include_str!("../../src/core/script.rs");

/// The text of the raw string that begins right after `marker`.
fn raw_after(marker: &str) -> Option<&'static str> {
    let start = SCRIPT_RS.find(marker)? + marker.len();
    let len = SCRIPT_RS[start..].find("\"#")?;
    Some(&SCRIPT_RS[start..start + len])
}

/// The whole source of the script `const <name>`.
pub fn script_source(name: &str) -> Result<String, String> {
    let missing = || format!("src/core/script.rs has no script {name} of a known form");
    if let Some(raw) = raw_after(&format!("const {name}: &str = r#\"")) {
        return Ok(raw.to_owned());
    }
    let marker = format!("const {name}: &str = concat!(\n");
    let start = SCRIPT_RS.find(&marker).ok_or_else(missing)? + marker.len();
    let mut source = String::new();
    for line in SCRIPT_RS[start..].lines().map(str::trim) {
        if let Some(fragment) = line.strip_suffix("!(),") {
            let shared = raw_after(&format!(
                "macro_rules! {fragment} {{\n    () => {{\n        r#\""
            ))
            .ok_or_else(|| format!("src/core/script.rs has no fragment {fragment}!"))?;
            source.push_str(shared);
        } else if line == "r#\"" {
            let after = &SCRIPT_RS[start..];
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
