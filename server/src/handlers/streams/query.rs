//! What a `GET` of a stream asks for: its query (`offset`, `live`,
//! `cursor`), parsed once by the route and read by the live reads.
#![allow(clippy::result_large_err)]

use super::answer;
use crate::streams::offset::Start;
use axum::body::Body;
use axum::http::Response;

/// What a `GET`'s query asks for.
pub(crate) struct ReadQuery {
    pub(crate) start: Start,
    /// The `offset` parameter as given (`-1` when absent), for the ETag.
    pub(crate) raw_start: String,
    pub(crate) live: Live,
    pub(crate) cursor: Option<String>,
}

/// The `live` parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Live {
    No,
    LongPoll,
    Sse,
}

impl ReadQuery {
    /// The query `raw` (the request's, if any) asks for; `400 bad_request`
    /// for one the protocol does not take.
    pub(crate) fn parse(raw: Option<&str>) -> Result<Self, Response<Body>> {
        let mut offset: Option<String> = None;
        let mut live = Live::No;
        let mut cursor = None;
        let mut offsets = 0;
        for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value)
                .ok_or_else(|| answer::bad_request("a query parameter is not UTF-8"))?;
            match name {
                "offset" => {
                    offsets += 1;
                    offset = Some(value);
                }
                "live" => {
                    live = match value.as_str() {
                        "long-poll" => Live::LongPoll,
                        "sse" => Live::Sse,
                        "" | "false" => Live::No,
                        _ => return Err(answer::bad_request("live must be long-poll or sse")),
                    }
                }
                "cursor" => cursor = Some(value),
                _ => {}
            }
        }
        if offsets > 1 {
            return Err(answer::bad_request("one offset parameter at most"));
        }
        let start = match &offset {
            None => Start::Beginning,
            Some(value) => Start::parse(value).ok_or_else(|| {
                answer::bad_request("offset must be -1, now, or an offset the server returned")
            })?,
        };
        if live != Live::No && offset.is_none() {
            return Err(answer::bad_request("a live read needs an offset"));
        }
        Ok(Self {
            start,
            raw_start: offset.unwrap_or_else(|| "-1".to_owned()),
            live,
            cursor,
        })
    }
}

/// `%XX` and `+` decoded; `None` when the result is not UTF-8.
fn percent_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
