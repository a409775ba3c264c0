//! [`HistoryConfig`]: how the history tier is reached and sized, and how
//! its URL may be shown.

use std::fmt;
use std::time::Duration;

/// How the history tier is reached and sized. `Debug` shows the URL with
/// its credentials redacted ([`HistoryConfig::redacted_url`]).
#[derive(Clone)]
pub struct HistoryConfig {
    /// The Redis URL (`redis://HOST:PORT[/DB]`, `unix:///path`); with
    /// [`cluster`](Self::cluster), the seed nodes, comma-separated
    /// ([`HistoryConfig::seeds`]).
    pub url: String,
    /// `false`: `url` is one Redis. `true` (`--redis-cluster`): `url` lists
    /// seed nodes of one Redis Cluster, each `redis://HOST[:PORT]` or each
    /// `rediss://HOST[:PORT]` (`gapless_server::ServerConfig::validate` checks it); the
    /// client learns the other nodes from them.
    pub cluster: bool,
    /// Deadline of every Redis call (default 2 s).
    pub timeout: Duration,
    /// Events kept per session in Redis at most: the server sets it to its
    /// ring's events.
    pub retention: usize,
    /// Payload bytes kept per session in Redis at most (never fewer than
    /// the newest event): the server sets it to its ring's bytes.
    pub retention_bytes: usize,
    /// A session's keys expire after this long without an append or a
    /// cursor update (the server's idle timeout).
    pub idle: Duration,
    /// With `rediss://`: a PEM file of the CA certificates that vouch for
    /// Redis's certificate, instead of the platform's roots (`None`: the
    /// platform's, or `SSL_CERT_FILE`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl HistoryConfig {
    /// The URL as it may be logged or shown: a password or user name in
    /// it (`redis://user:secret@host`) becomes `***`, and so does a
    /// `pass` / `password` query parameter (`redis+unix:///s?pass=secret`).
    pub fn redacted_url(&self) -> String {
        self.url
            .split(',')
            .map(redact_url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes to connect to: `url`, or with
    /// [`cluster`](Self::cluster) each of its comma-separated seeds.
    pub fn seeds(&self) -> Vec<&str> {
        if self.cluster {
            self.url.split(',').map(str::trim).collect()
        } else {
            vec![self.url.as_str()]
        }
    }
}

impl fmt::Debug for HistoryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HistoryConfig")
            .field("url", &self.redacted_url())
            .field("cluster", &self.cluster)
            .field("timeout", &self.timeout)
            .field("retention", &self.retention)
            .field("retention_bytes", &self.retention_bytes)
            .field("idle", &self.idle)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// `url` with its user information and password parameters replaced by
/// `***` (see [`HistoryConfig::redacted_url`]).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    // The authority ends at the first '/', and its user information at the
    // last '@' before that.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => format!("***{}", &rest[at..]),
        None => rest.to_owned(),
    };
    let query = query.map(|query| {
        query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _))
                    if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
                {
                    format!("{key}=***")
                }
                _ => pair.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("&")
    });
    let mut redacted = String::new();
    if let Some(scheme) = scheme {
        redacted.push_str(scheme);
        redacted.push_str("://");
    }
    redacted.push_str(&rest);
    if let Some(query) = query {
        redacted.push('?');
        redacted.push_str(&query);
    }
    redacted
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn credentials_in_a_redis_url_never_print() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@10.0.0.1:6379", "redis://***@10.0.0.1:6379"),
            (
                "rediss://app:p@ss@cache.example:6380/2",
                "rediss://***@cache.example:6380/2",
            ),
            (
                "redis+unix:///run/redis.sock?db=1&pass=s3cret",
                "redis+unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "unix:///run/redis.sock?password=s3cret",
                "unix:///run/redis.sock?password=***",
            ),
            ("redis://host/0?user=a", "redis://host/0?user=a"),
        ] {
            let redacted = redact_url(url);
            assert_eq!(redacted, shown, "{url}");
            assert!(!redacted.contains("s3cret") && !redacted.contains("p@ss"));
        }
    }
}
