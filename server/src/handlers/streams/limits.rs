//! Caps on what a request names that the server would hold or send back,
//! checked before anything else: the stream's path (held as the stream's
//! key, sent in `Location`), and the append headers a stream keeps
//! (`Stream-Seq`, sent again in every guard and kept as the stream's last
//! seq; `Producer-Id`, kept per producer). A header may be as large as the
//! whole request head (about 400 KB): without a cap, one append makes a
//! stream hold that, and every later guard carry it.
//!
//! And one refusal that is not about size: an encoded slash in the path.
//! The path is decoded before it names a stream, so `a%2Fb` would be the
//! stream `a/b`, and a proxy rule on the prefix `/v1/stream/a/` (which sees
//! the raw path) would not apply to it.
//!
//! A refusal is the answer itself, as in `http`: built once, on the error
//! path, so its size does not matter.
#![allow(clippy::result_large_err)]

use super::answer;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, Response};

/// The longest stream path, in bytes, after `/v1/stream/` and decoded.
pub(crate) const MAX_PATH: usize = 1024;

/// The longest `Stream-Seq` and `Producer-Id` value, in bytes.
pub(crate) const MAX_HELD_HEADER: usize = 256;

/// The headers a stream keeps, capped at [`MAX_HELD_HEADER`]: each one's
/// name and its name as a refusal shows it.
pub(super) const HELD_HEADERS: [(&str, &str); 2] =
    [("stream-seq", "Stream-Seq"), ("producer-id", "Producer-Id")];

/// Checks `request` to the stream at `path` (decoded) before its method's
/// handler: [`check_path`], not on `OPTIONS` (a preflight is answered,
/// the request it clears is refused readably). An append's held headers
/// are checked first thing by its handler ([`super::append`]).
pub(super) fn check(path: &str, request: &Request) -> Result<(), Response<Body>> {
    if request.method() == Method::OPTIONS {
        return Ok(());
    }
    check_path(path, request.uri().path())
}

/// `400 bad_request` for a stream path (`path`, decoded from `raw_path`)
/// over [`MAX_PATH`] bytes or with an encoded slash.
pub(crate) fn check_path(path: &str, raw_path: &str) -> Result<(), Response<Body>> {
    if path.len() > MAX_PATH {
        return Err(answer::bad_request(&format!(
            "a stream path is at most {MAX_PATH} bytes"
        )));
    }
    if encoded_slash(raw_path) {
        return Err(answer::bad_request(
            "a stream path must not hold an encoded slash (%2F): write / itself",
        ));
    }
    Ok(())
}

/// `400 bad_request` for a held header (`shown`, from [`HELD_HEADERS`])
/// over [`MAX_HELD_HEADER`] bytes.
pub(super) fn held_header_too_long(shown: &str) -> Response<Body> {
    answer::bad_request(&format!("{shown} is at most {MAX_HELD_HEADER} bytes"))
}

/// Whether the raw (undecoded) request path holds `%2F` in either case.
fn encoded_slash(raw: &str) -> bool {
    raw.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'f'))
}

#[cfg(test)]
mod tests {
    use super::encoded_slash;

    /// Fails if either case of the hex digit is missed, or a `%2` not
    /// followed by `F` is taken for one.
    #[test]
    fn encoded_slash_in_either_case() {
        for raw in [
            "/v1/stream/a%2Fb",
            "/v1/stream/a%2fb",
            "/v1/stream/%2F",
            "/v1/stream/a/%2f",
        ] {
            assert!(encoded_slash(raw), "{raw}");
        }
        for raw in [
            "/v1/stream/a/b",
            "/v1/stream/a%20b",
            "/v1/stream/a%252Fb",
            "/v1/stream/%2",
            "/v1/stream/2F",
        ] {
            assert!(!encoded_slash(raw), "{raw}");
        }
    }
}
