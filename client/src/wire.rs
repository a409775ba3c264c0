//! The JSON bodies of the protocol (`docs/PROTOCOL.md`), one type per body,
//! shared by the server (which serialises them) and this client (which
//! deserialises them), so the two cannot drift apart.
//!
//! Seqs are JSON integers, event IDs strings in the `<epoch hex16>-<seq>`
//! form, epochs strings of exactly 16 lowercase hex digits. Deserialising is
//! strict about those forms: a seq sent as a string, or an epoch in another
//! spelling, is an error naming the field.

use gapless::session::Transport;
use gapless::EventId;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// `201` of `POST /session`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// The session ID (32 lowercase hex digits).
    pub session: String,
    /// The session's epoch.
    #[serde(with = "epoch_hex")]
    pub epoch: u64,
}

/// `POST /session`'s body as sent: [`Created`], and with a server run with
/// `--publish-keys` the session's write capability, to send as
/// `Authorization: Bearer <key>` ([`bearer`]) with every emit and `DELETE`
/// (the session ID alone then only reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedAnswer {
    /// The session and its epoch.
    #[serde(flatten)]
    pub created: Created,
    /// The publish key (32 lowercase hex digits); absent without
    /// `--publish-keys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_key: Option<String>,
}

/// The `Authorization` value that presents a session's publish key (see
/// [`CreatedAnswer::publish_key`]): `Bearer <key>`, the standard scheme
/// (RFC 6750) that the Durable Streams routes use too, and the header
/// proxies and log layers already treat as a secret.
pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// The token of an `Authorization` value in the `Bearer` scheme, what the
/// server reads as the publish key: the scheme's name in any case (RFC
/// 9110, 11.1), then spaces and a non-empty token, trimmed. `None` for
/// another scheme or no token.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Created {
    /// The "processed nothing" cursor of this session: `<epoch>-0`.
    pub fn origin(&self) -> EventId {
        EventId {
            epoch: self.epoch,
            seq: 0,
        }
    }
}

/// `202` of `POST /session/{id}/events`: the ID the event was stored under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Emitted {
    /// The new event's ID.
    #[serde(with = "event_id_text")]
    pub id: EventId,
}

/// The body of `POST /session/{id}/ack` and `POST /session/{id}/upgrade`.
///
/// The cursor is kept as text so the server can name what is wrong with a
/// malformed one in its `400`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorBody {
    /// The client's own cursor: the ID of the last event it processed.
    pub cursor: String,
}

impl CursorBody {
    /// The body naming `cursor`.
    pub fn new(cursor: EventId) -> Self {
        Self {
            cursor: cursor.to_string(),
        }
    }
}

/// `200` of `POST /session/{id}/upgrade`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeGrant {
    /// The single-use ticket.
    pub ticket: String,
    /// The WebSocket path, `/session/{id}/ws?ticket=T`.
    pub ws: String,
    /// The first seq the WebSocket will carry (`cursor + 1`).
    pub replay_from: u64,
    /// The published watermark when granted.
    pub replay_to: u64,
}

/// `200` of `GET /session/{id}`: server-side figures, never a client cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    /// The session's epoch.
    #[serde(with = "epoch_hex")]
    pub epoch: u64,
    /// Highest seq the client said it processed.
    pub acked: u64,
    /// Highest seq the server handed to a transport.
    pub sent: u64,
    /// The published watermark.
    pub published: u64,
    /// The oldest retained seq.
    pub first_retained: u64,
    /// The attached transport: `"none"`, `"sse"` or `"websocket"`.
    #[serde(with = "transport_name")]
    pub transport: Transport,
}

/// One WebSocket text frame: `{"id": EVENT_ID, "data": PAYLOAD}`, where
/// `data` is the stored JSON payload exactly as emitted (compacted), never
/// re-encoded.
#[derive(Debug, Serialize, Deserialize)]
pub struct WsEvent<'a> {
    /// The event's ID.
    #[serde(with = "event_id_text")]
    pub id: EventId,
    /// The payload's JSON text, as stored.
    #[serde(borrow)]
    pub data: &'a RawValue,
}

/// Exactly 16 lowercase hex digits, as the protocol spells an epoch.
pub fn parse_epoch(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// Whether `text` is a session ID in the protocol's form: 32 lowercase hex.
pub fn is_session_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `#[serde(with)]` for an epoch: a string of 16 lowercase hex digits.
pub mod epoch_hex {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::borrow::Cow;

    /// Writes `epoch` as 16 lowercase hex digits.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(epoch: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&format_args!("{epoch:016x}"))
    }

    /// Reads 16 lowercase hex digits.
    ///
    /// # Errors
    /// Anything else, named.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        super::parse_epoch(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "epoch must be 16 lowercase hex digits, got {text:?}"
            ))
        })
    }
}

/// `#[serde(with)]` for an [`EventId`]: its wire text, parsed strictly.
pub mod event_id_text {
    use gapless::EventId;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::borrow::Cow;

    /// Writes `id` as `<epoch hex16>-<seq>`.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(id: &EventId, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(id)
    }

    /// Reads `<epoch hex16>-<seq>`.
    ///
    /// # Errors
    /// The parser's reason, with the text.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<EventId, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        text.parse()
            .map_err(|error| D::Error::custom(format!("not an event ID ({error}): {text:?}")))
    }
}

/// `#[serde(with)]` for a [`Transport`]: `"none"`, `"sse"` or `"websocket"`.
pub mod transport_name {
    use gapless::session::Transport;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::borrow::Cow;

    /// Writes the transport's name.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<S: Serializer>(
        transport: &Transport,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(transport.as_str())
    }

    /// Reads one of the three names.
    ///
    /// # Errors
    /// Any other text, named.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Transport, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        [Transport::None, Transport::Sse, Transport::WebSocket]
            .into_iter()
            .find(|transport| transport.as_str() == text)
            .ok_or_else(|| D::Error::custom(format!("unknown transport {text:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_in_their_wire_forms() {
        let created: Created =
            serde_json::from_str(r#"{"session":"ab","epoch":"00000000000000ab"}"#).unwrap();
        assert_eq!(created.epoch, 0xab);
        assert_eq!(
            serde_json::to_string(&created).unwrap(),
            r#"{"session":"ab","epoch":"00000000000000ab"}"#
        );
        let view = StateView {
            epoch: 1,
            acked: 2,
            sent: 3,
            published: 4,
            first_retained: 1,
            transport: Transport::WebSocket,
        };
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(
            text,
            r#"{"epoch":"0000000000000001","acked":2,"sent":3,"published":4,"first_retained":1,"transport":"websocket"}"#
        );
        assert_eq!(serde_json::from_str::<StateView>(&text).unwrap(), view);
    }

    #[test]
    fn wire_forms_are_strict() {
        // An epoch in another spelling, a seq as a string, an unknown transport.
        for bad in [
            r#"{"session":"ab","epoch":"AB"}"#,
            r#"{"session":"ab","epoch":"00000000000000AB"}"#,
            r#"{"session":"ab","epoch":171}"#,
        ] {
            assert!(serde_json::from_str::<Created>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<UpgradeGrant>(
            r#"{"ticket":"t","ws":"/w","replay_from":"1","replay_to":2}"#
        )
        .is_err());
        assert!(serde_json::from_str::<StateView>(
            r#"{"epoch":"0000000000000001","acked":0,"sent":0,"published":0,"first_retained":1,"transport":"carrier-pigeon"}"#
        )
        .is_err());
        assert!(serde_json::from_str::<Emitted>(r#"{"id":"1-2"}"#).is_err());
    }

    #[test]
    fn the_publish_key_travels_as_a_bearer_token() {
        let key = "00112233445566778899aabbccddeeff";
        assert_eq!(bearer(key), format!("Bearer {key}"));
        assert_eq!(bearer_token(&bearer(key)), Some(key));
        assert_eq!(bearer_token(&format!("bearer  {key} ")), Some(key));
        for other in [
            key.to_owned(),
            format!("Basic {key}"),
            format!("Bearer{key}"),
            "Bearer ".to_owned(),
            "Bearer".to_owned(),
        ] {
            assert_eq!(bearer_token(&other), None, "{other:?}");
        }
    }

    #[test]
    fn a_websocket_frame_keeps_the_payload_text_exactly() {
        let frame = r#"{"id":"00000000000000ab-1","data":{"b":1,"a":[1.0,"x\"}]",1e5]}}"#;
        let event: WsEvent<'_> = serde_json::from_str(frame).unwrap();
        assert_eq!(
            event.id,
            EventId {
                epoch: 0xab,
                seq: 1
            }
        );
        assert_eq!(event.data.get(), r#"{"b":1,"a":[1.0,"x\"}]",1e5]}"#);
        assert_eq!(serde_json::to_string(&event).unwrap(), frame);
        assert!(serde_json::from_str::<WsEvent<'_>>(r#"{"id":3,"data":"x"}"#).is_err());
        assert!(serde_json::from_str::<WsEvent<'_>>(r#"{"id":"00000000000000ab-1"}"#).is_err());
    }
}
