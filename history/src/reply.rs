//! A Redis call under its deadline, its error typed, and the scripts'
//! replies read back (seqs, epochs, stream entries, the caller's meta).

use crate::{HistoryError, Meta};
use bytes::Bytes;
use redis::{ErrorKind, RedisError, Value};
use std::future::Future;
use std::time::Duration;

/// An epoch as the scripts hold it: 16 hex digits, never 0.
pub(crate) fn parse_epoch(text: &str) -> Result<u64, HistoryError> {
    u64::from_str_radix(text, 16)
        .ok()
        .filter(|epoch| *epoch != 0)
        .ok_or_else(|| HistoryError::Corrupt(format!("epoch {text:?}")))
}

/// The caller's fields of a meta hash, as the scripts return them: a flat
/// `[name, value, …]` with the history's own fields left out.
pub(crate) fn caller_meta(value: Value) -> Result<Meta, HistoryError> {
    let fields = match value {
        Value::Array(fields) => fields,
        Value::Nil => return Ok(Meta::new()),
        other => return Err(HistoryError::Corrupt(format!("meta {other:?}"))),
    };
    let mut fields = fields.into_iter();
    let mut meta = Meta::new();
    while let Some(name) = fields.next() {
        let value = fields
            .next()
            .ok_or_else(|| HistoryError::Corrupt("meta: a name without a value".into()))?;
        meta.insert(text_of(name)?, text_of(value)?);
    }
    Ok(meta)
}

/// `call` within `timeout`, its error typed.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, HistoryError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(typed),
        Err(_) => Err(HistoryError::Unavailable(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

/// Types a Redis error: our scripts' refusals by their code, everything
/// else (I/O, timeouts, OOM, LOADING, a busy script) as unavailable, and
/// replies of the wrong shape as corrupt.
pub(crate) fn typed(error: RedisError) -> HistoryError {
    if error.code() == Some("GONE") {
        return HistoryError::Gone;
    }
    match error.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            HistoryError::Corrupt(error.to_string())
        }
        _ => unavailable(error),
    }
}

pub(crate) fn unavailable(error: RedisError) -> HistoryError {
    HistoryError::Unavailable(error.to_string())
}

/// A decimal seq as Redis holds it.
pub(crate) fn parse_seq(text: &str) -> Result<u64, HistoryError> {
    text.trim()
        .parse()
        .map_err(|_| HistoryError::Corrupt(format!("seq {text:?}")))
}

pub(crate) fn text_of(value: Value) -> Result<String, HistoryError> {
    match value {
        Value::BulkString(bytes) => {
            String::from_utf8(bytes).map_err(|e| HistoryError::Corrupt(e.to_string()))
        }
        Value::SimpleString(text) => Ok(text),
        Value::Int(n) => Ok(n.to_string()),
        other => Err(HistoryError::Corrupt(format!(
            "expected text, got {other:?}"
        ))),
    }
}

/// Stream entries `[[id, [field, value, …]], …]` as `(seq, payload)`.
pub(crate) fn entries(value: Value) -> Result<Vec<(u64, Bytes)>, HistoryError> {
    let entries = match value {
        Value::Array(entries) => entries,
        Value::Nil => return Ok(Vec::new()),
        other => return Err(HistoryError::Corrupt(format!("entries {other:?}"))),
    };
    entries
        .into_iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return Err(HistoryError::Corrupt("an entry is not an array".into()));
            };
            let mut parts = parts.into_iter();
            let id = text_of(parts.next().unwrap_or(Value::Nil))?;
            let seq = id
                .strip_prefix("0-")
                .ok_or_else(|| HistoryError::Corrupt(format!("entry ID {id:?}")))
                .and_then(parse_seq)?;
            let payload = match parts.next() {
                Some(Value::Array(fields)) if fields.len() == 2 => {
                    match fields.into_iter().nth(1) {
                        Some(Value::BulkString(bytes)) => Bytes::from(bytes),
                        other => return Err(HistoryError::Corrupt(format!("payload {other:?}"))),
                    }
                }
                other => return Err(HistoryError::Corrupt(format!("fields {other:?}"))),
            };
            Ok((seq, payload))
        })
        .collect()
}
