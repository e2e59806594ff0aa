//! What `Locker::connect` takes: everything the redis crate's
//! `IntoConnectionInfo` takes, and `&String` too.

/// Where a locker connects: a URL (`&str`, `String`, `&String`,
/// `url::Url`), a `(host, port)` pair, or the redis crate's
/// [`ConnectionInfo`](redis::ConnectionInfo) or
/// [`ConnectionAddr`](redis::ConnectionAddr).
///
/// The same forms as [`redis::IntoConnectionInfo`], plus `&String`, so that
/// a URL read from the environment or a config file can be lent:
///
/// ```no_run
/// use redlease::{blocking::Locker, Config};
///
/// let url: String = std::env::var("REDIS_URL")?;
/// let locker = Locker::connect(&url, Config::new("my-service"))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// (The redis crate's own trait cannot be implemented for `&String` here,
/// and a blanket implementation over it would conflict; hence this trait.)
pub trait IntoConnectionInfo {
    /// Parses or converts `self`. The error may echo a URL (with its
    /// password): the lockers never show it, they report `INVALID_CONFIG`.
    ///
    /// # Errors
    ///
    /// As the redis crate's `IntoConnectionInfo`: a URL that does not parse
    /// or has a scheme other than `redis`, `rediss`, `valkey`, `valkeys`,
    /// `unix`, `redis+unix` or `valkey+unix`.
    fn into_connection_info(self) -> redis::RedisResult<redis::ConnectionInfo>;
}

macro_rules! by_redis {
    ($($ty:ty),* $(,)?) => {$(
        impl IntoConnectionInfo for $ty {
            fn into_connection_info(self) -> redis::RedisResult<redis::ConnectionInfo> {
                redis::IntoConnectionInfo::into_connection_info(self)
            }
        }
    )*};
}

by_redis!(
    &str,
    String,
    url::Url,
    redis::ConnectionInfo,
    redis::ConnectionAddr
);

impl IntoConnectionInfo for &String {
    fn into_connection_info(self) -> redis::RedisResult<redis::ConnectionInfo> {
        redis::IntoConnectionInfo::into_connection_info(self.as_str())
    }
}

impl IntoConnectionInfo for &redis::ConnectionInfo {
    fn into_connection_info(self) -> redis::RedisResult<redis::ConnectionInfo> {
        Ok(self.clone())
    }
}

impl<T: Into<String>> IntoConnectionInfo for (T, u16) {
    fn into_connection_info(self) -> redis::RedisResult<redis::ConnectionInfo> {
        redis::IntoConnectionInfo::into_connection_info(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(target: impl IntoConnectionInfo) -> String {
        target.into_connection_info().unwrap().addr().to_string()
    }

    #[test]
    fn every_form_names_the_same_server() {
        let url = "redis://127.0.0.1:6390/0".to_owned();
        let expected = addr(url.as_str());
        assert_eq!(addr(&url), expected);
        assert_eq!(addr(url.clone()), expected);
        assert_eq!(addr(url::Url::parse(&url).unwrap()), expected);
        assert_eq!(addr(("127.0.0.1", 6390)), expected);
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        assert_eq!(addr(&info), expected);
        assert_eq!(addr(info.addr().clone()), expected);
        assert_eq!(addr(info), expected);
    }

    #[test]
    fn a_bad_url_is_an_error_not_a_panic() {
        assert!("not a url".into_connection_info().is_err());
        assert!("http://example.com".into_connection_info().is_err());
    }
}
