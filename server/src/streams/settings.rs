//! What a Durable Stream was created with ([`Settings`]): its content
//! type, expiry and fork, the rules every tier shares for a fork's
//! inherited settings, an idempotent create and expiry, and the media type
//! they compare by.

use super::offset::Offset;
use std::time::SystemTime;

/// What a stream was created with; compared by an idempotent create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The content type as given (compared by [`media_type`]).
    pub(crate) content_type: String,
    /// `Stream-TTL`: seconds after the last access.
    pub(crate) ttl_secs: Option<u64>,
    /// `Stream-Expires-At`: as given, and as a time.
    pub(crate) expires_at: Option<(String, SystemTime)>,
    /// The source of a fork.
    pub(crate) forked_from: Option<String>,
    /// The fork's offset in its source.
    pub(crate) fork_offset: Option<Offset>,
    /// `Stream-Fork-Sub-Offset` (0 when absent).
    pub(crate) fork_sub_offset: u64,
}

/// A fork's `Content-Type` is not its source's (`409`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ContentTypeMismatch;

impl Settings {
    /// A fork's settings completed from its source's, in every tier: the
    /// source's content type when it gives none (another one is refused),
    /// and the source's expiry when it asks for none.
    pub(crate) fn inherit(&mut self, source: &Settings) -> Result<(), ContentTypeMismatch> {
        if self.content_type.is_empty() {
            self.content_type = source.content_type.clone();
        } else if media_type(&self.content_type) != media_type(&source.content_type) {
            return Err(ContentTypeMismatch);
        }
        if self.ttl_secs.is_none() && self.expires_at.is_none() {
            self.ttl_secs = source.ttl_secs;
            self.expires_at = source.expires_at.clone();
        }
        Ok(())
    }

    /// `application/octet-stream` when the create named no content type.
    pub(crate) fn default_content_type(&mut self) {
        if self.content_type.is_empty() {
            self.content_type = "application/octet-stream".to_owned();
        }
    }

    /// JSON mode.
    pub(crate) fn json(&self) -> bool {
        media_type(&self.content_type) == "application/json"
    }

    /// Whether `Stream-Expires-At` has passed at `now()` (the clock is read
    /// only for a stream that has one), or `Stream-TTL` after `idle_ms`
    /// without an access.
    pub(crate) fn expired(&self, idle_ms: u64, now: impl FnOnce() -> SystemTime) -> bool {
        if self.expires_at.as_ref().is_some_and(|(_, at)| now() >= *at) {
            return true;
        }
        self.ttl_secs
            .is_some_and(|ttl| idle_ms >= ttl.saturating_mul(1000))
    }

    /// Whether a create asking for `asked` (closed if `asked_closed`) asks
    /// for the stream these settings made (closed if `closed`): the one
    /// rule of an idempotent `PUT`, in every tier. A fork that names no
    /// content type or expiry asks for its source's, whatever they were;
    /// a create that names no fork offset asks for the one it got.
    pub(crate) fn same_create(&self, closed: bool, asked: &Settings, asked_closed: bool) -> bool {
        let content_type = |t: &str| match media_type(t) {
            m if m.is_empty() => "application/octet-stream".to_owned(),
            m => m,
        };
        let fork = asked.forked_from.is_some();
        let type_matches = (fork && asked.content_type.is_empty())
            || content_type(&asked.content_type) == content_type(&self.content_type);
        let expiry_matches = (fork && asked.ttl_secs.is_none() && asked.expires_at.is_none())
            || (asked.ttl_secs == self.ttl_secs
                && asked.expires_at.as_ref().map(|(s, _)| s)
                    == self.expires_at.as_ref().map(|(s, _)| s));
        type_matches
            && expiry_matches
            && asked_closed == closed
            && asked.forked_from == self.forked_from
            && (asked.fork_offset.is_none() || asked.fork_offset == self.fork_offset)
            && asked.fork_sub_offset == self.fork_sub_offset
    }
}

/// The media type of a `Content-Type` value: lower case, no parameters.
pub(crate) fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}
