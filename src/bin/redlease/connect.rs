//! From what the user gave (a URL, a CA file, a password file or
//! REDISCLI_AUTH) to a `redis::Client`, not yet connected, and the plain
//! connections the tool opens itself. Messages name the option, variable
//! or file at fault but never echo the URL (it may carry a password) or a
//! password.

use std::env::VarError;
use std::fmt::Display;
use std::path::Path;
use std::time::Duration;

use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::cli::Global;
use crate::output::Out;

/// The URL: `--url`, else REDLEASE_URL (both through clap), else
/// REDIS_URL, which other programs may use for a server of their own.
/// An empty value counts as unset. `Ok(None)`: none; else the URL and
/// where it came from, as messages name it.
pub(crate) fn url(global: &Global) -> Result<Option<(String, &'static str)>, String> {
    match global.url.as_deref().filter(|u| !u.is_empty()) {
        Some(url) if global.url_from_env => Ok(Some((url.to_owned(), "REDLEASE_URL"))),
        Some(url) => Ok(Some((url.to_owned(), "--url"))),
        None => Ok(var("REDIS_URL")?.map(|url| (url, "REDIS_URL"))),
    }
}

/// The variable `name`, unset when empty; `Err` when it is not UTF-8.
fn var(name: &str) -> Result<Option<String>, String> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value).filter(|v| !v.is_empty())),
        Err(VarError::NotPresent) => Ok(None),
        Err(VarError::NotUnicode(_)) => Err(format!("invalid {name}: not valid UTF-8")),
    }
}

/// The client for `url`, with the password from `--password-file` or
/// REDISCLI_AUTH and the CA of `--tls-ca-cert`; a CA given for a URL
/// without TLS is noted to the user.
pub(crate) fn client(global: &Global, url: &str, from: &str, out: Out) -> Result<Client, String> {
    let mut info = connection_info(url, from)?;
    if let Some(password) = password(global, info.redis_settings().password().is_some())? {
        let settings = info.redis_settings().clone().set_password(password);
        info = info.set_redis_settings(settings);
    }
    match &global.tls_ca_cert {
        Some(path) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
            let certs = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca_pem(path)?),
            };
            Client::build_with_tls(info, certs)
                .map_err(|_| format!("cannot use --tls-ca-cert {}", path.display()))
        }
        ca => {
            let client = Client::open(info).map_err(|_| invalid(from, "not a Redis URL"))?;
            if ca.is_some() {
                let note =
                    format!("--tls-ca-cert is not used: {from} is not a rediss:// (TLS) URL");
                if global.tls_ca_cert_from_env {
                    out.detail(note);
                } else {
                    out.notice(note);
                }
            }
            Ok(client)
        }
    }
}

fn invalid(from: &str, why: &str) -> String {
    format!(
        "invalid {from}: {why}; a Redis URL looks like redis://HOST:PORT/DB, \
         rediss://HOST:PORT/DB (TLS) or unix:///PATH"
    )
}

/// Connect and command timeout of `status` and `leader` (connect, each
/// read and write, the library's commands).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(2);

/// A connection of its own to `client`'s server, with `timeout` for the
/// connect and for each read and write.
pub(crate) fn open(client: &Client, timeout: Duration) -> RedisResult<Connection> {
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// The URL's connection info, or what is wrong with it in words that
/// quote no part of it but the scheme.
fn connection_info(url: &str, from: &str) -> Result<ConnectionInfo, String> {
    let parsed = url::Url::parse(url).map_err(|_| invalid(from, "not a URL"))?;
    let scheme = parsed.scheme();
    let tls = matches!(scheme, "rediss" | "valkeys");
    if !matches!(
        scheme,
        "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" | "valkey+unix"
    ) {
        return Err(invalid(from, &format!("{scheme}:// is not a Redis scheme")));
    }
    parsed.into_connection_info().map_err(|e| {
        if tls && e.to_string().contains("TLS") {
            format!(
                "{from} is a rediss:// (TLS) URL, and this redlease was built without TLS \
                 support: install it with `cargo install redlease --features cli`, \
                 which includes it"
            )
        } else {
            // The redis crate's reasons are fixed texts ("Missing hostname",
            // "Invalid database number"), never parts of the URL.
            let reason = e.to_string();
            let reason = reason.split(" - ").next().unwrap_or_default();
            invalid(from, &reason.to_lowercase())
        }
    })
}

/// The password to use instead of the URL's: `--password-file`'s (also
/// over a password in the URL), else REDISCLI_AUTH when the URL has none
/// (as redis-cli does). Empty values count as unset, except a password
/// file, which must hold one.
fn password(global: &Global, url_has_one: bool) -> Result<Option<String>, String> {
    if let Some(path) = &global.password_file {
        let shown = path.display();
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read --password-file {shown}: {e}"))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| format!("invalid --password-file {shown}: not UTF-8 text"))?;
        // Editors and `echo` end a file with a newline; a password does
        // not.
        let password = text
            .strip_suffix('\n')
            .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
        if password.is_empty() {
            return Err(format!("invalid --password-file {shown}: it is empty"));
        }
        return Ok(Some(password.to_owned()));
    }
    if url_has_one {
        return Ok(None);
    }
    var("REDISCLI_AUTH")
}

/// The CA file's contents, once checked to hold PEM certificates that
/// rustls takes as trust anchors (the redis crate would take a file with
/// none for an empty set of roots, and every handshake would fail).
fn ca_pem(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("cannot read --tls-ca-cert {shown}: {e}"))?;
    let invalid = |why: &dyn Display| format!("invalid --tls-ca-cert {shown}: {why}");
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid(&"a PEM certificate in it is malformed"))?;
    if certs.is_empty() {
        return Err(invalid(
            &"no PEM certificate in it (-----BEGIN CERTIFICATE-----); a DER file converts with \
              `openssl x509 -inform der -in FILE -out FILE.pem`",
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| invalid(&format!("a certificate in it is not usable as a CA ({e})")))?;
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_is_described_without_quoting_it() {
        for (url, why) in [
            ("not-a-url", "not a URL"),
            (
                "http://user:s3cret@host:1/0",
                "http:// is not a Redis scheme",
            ),
            ("redis://:s3cret@host:1/x", "invalid database number"),
            (
                "redis://:s3cret@0.0.0.0:1/0",
                "cannot connect to a wildcard address",
            ),
        ] {
            let e = connection_info(url, "REDIS_URL").unwrap_err();
            assert!(e.starts_with("invalid REDIS_URL: "), "{e}");
            assert!(e.contains(why), "{url}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        assert!(connection_info("rediss://h:1/0", "--url").is_ok());
        assert!(connection_info("unix:///tmp/redis.sock", "--url").is_ok());
    }
}
