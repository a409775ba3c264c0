//! [`History`] over Redis: the scripts, one multiplexed reconnecting
//! connection for every short call, and a dedicated connection per
//! [`RedisTail`] (a blocked `XREAD` would stall every call queued behind
//! it).

use super::{
    Acquired, Attach, History, HistoryConfig, HistoryError, Raised, Snapshot, Tail, Token,
};
use crate::ids::{PublishKey, SessionId};
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, Script, Value};
use std::future::Future;
use std::time::Duration;

/// Events read per call when a ring catches up with the history.
pub(crate) const READ_BATCH: usize = 512;

/// The shared history of every session, in one Redis.
pub(crate) struct RedisHistory {
    client: Client,
    connection: ConnectionManager,
    config: HistoryConfig,
    scripts: Scripts,
}

/// The Lua scripts, sent by SHA (`EVALSHA`) and loaded again on
/// `NOSCRIPT` (after a Redis restart).
struct Scripts {
    create: Script,
    append: Script,
    acquire: Script,
    renew: Script,
    release: Script,
    raise: Script,
    read: Script,
}

/// The three keys of session `id` (see the module docs).
struct Keys {
    stream: String,
    meta: String,
    lease: String,
}

impl Keys {
    /// The key of upgrade `ticket` (hex) of session `id`: in the session's
    /// slot, expiring with the ticket.
    fn ticket(id: &SessionId, ticket: &str) -> String {
        format!("gapless:{{{id}}}:t:{ticket}")
    }

    fn of(id: &SessionId) -> Self {
        Self {
            stream: format!("gapless:{{{id}}}:s"),
            meta: format!("gapless:{{{id}}}:m"),
            lease: format!("gapless:{{{id}}}:l"),
        }
    }
}

impl RedisHistory {
    /// Connects to the Redis at `config.url` and checks that it answers.
    ///
    /// # Errors
    /// A malformed URL or a Redis that does not answer `PING` in time.
    pub(crate) async fn connect(config: HistoryConfig) -> Result<Self, HistoryError> {
        let client = Client::open(config.url.as_str())
            .map_err(|e| HistoryError::Unavailable(format!("{}: {e}", config.url)))?;
        // Our own deadline bounds every call; the manager's retries only
        // shorten the outage after Redis comes back.
        let manager = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.timeout))
            .set_connection_timeout(Some(config.timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_lazy_with_config(client.clone(), manager)
            .map_err(unavailable)?;
        let history = Self {
            client,
            connection,
            config,
            scripts: Scripts {
                create: Script::new(include_str!("create.lua")),
                append: Script::new(include_str!("append.lua")),
                acquire: Script::new(include_str!("acquire.lua")),
                renew: Script::new(include_str!("renew.lua")),
                release: Script::new(include_str!("release.lua")),
                raise: Script::new(include_str!("raise.lua")),
                read: Script::new(include_str!("read.lua")),
            },
        };
        history.ping().await?;
        Ok(history)
    }

    /// Runs one call under the deadline, typing its error.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, HistoryError> {
        match tokio::time::timeout(self.config.timeout, call).await {
            Ok(result) => result.map_err(typed),
            Err(_) => Err(HistoryError::Unavailable(format!(
                "no answer within {:?}",
                self.config.timeout
            ))),
        }
    }

    /// Whether Redis answers.
    pub(crate) async fn ping(&self) -> Result<(), HistoryError> {
        let mut connection = self.connection.clone();
        self.call(redis::cmd("PING").query_async::<String>(&mut connection))
            .await
            .map(drop)
    }

    fn ms(duration: Duration) -> u64 {
        u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Records a new session with `epoch`, owned by `owner`. `false` if a
    /// session with this ID exists.
    pub(crate) async fn create(
        &self,
        id: &SessionId,
        epoch: u64,
        owner: Token,
        publish_key: Option<PublishKey>,
    ) -> Result<bool, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.create.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.lease)
            .arg(format!("{epoch:016x}"))
            .arg(owner.to_string())
            .arg(Self::ms(self.config.lease_ttl))
            .arg(Self::ms(self.config.idle))
            .arg(publish_key.map(|key| key.to_string()).unwrap_or_default());
        let created: i64 = self.call(invocation.invoke_async(&mut connection)).await?;
        Ok(created == 1)
    }

    /// Raises the session's `acked` and `sent` to at least these values
    /// for a transport at `attach` (see [`Attach`]), and restarts the
    /// session's idle expiry.
    pub(crate) async fn raise_cursors(
        &self,
        id: &SessionId,
        acked: u64,
        sent: u64,
        attach: Attach,
    ) -> Result<Raised, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.raise.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.stream)
            .arg(acked)
            .arg(sent)
            .arg(Self::ms(self.config.idle))
            .arg(match attach {
                Attach::None => String::new(),
                Attach::New => "new".to_owned(),
                Attach::Current(generation) => generation.to_string(),
            });
        let (raised, generation): (i64, u64) =
            self.call(invocation.invoke_async(&mut connection)).await?;
        Ok(Raised {
            raised: raised == 1,
            generation,
        })
    }

    /// The session's meta and its newest `count` events; `None` if the
    /// session is gone.
    pub(crate) async fn newest(
        &self,
        id: &SessionId,
        count: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, "last".to_owned(), count).await
    }

    async fn read(
        &self,
        id: &SessionId,
        from: String,
        count: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        let newest_first = from == "last";
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.read.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.stream)
            .arg(from)
            .arg(count);
        let value: Value = self.call(invocation.invoke_async(&mut connection)).await?;
        let items = match value {
            Value::Nil => return Ok(None),
            Value::Array(items) if items.len() == 6 => items,
            other => return Err(HistoryError::Corrupt(format!("read answered {other:?}"))),
        };
        let mut items = items.into_iter();
        let mut text = || text_of(items.next().unwrap_or(Value::Nil));
        let epoch = text()?;
        let epoch = u64::from_str_radix(&epoch, 16)
            .map_err(|_| HistoryError::Corrupt(format!("epoch {epoch:?}")))?;
        let published = parse_seq(&text()?)?;
        let acked = parse_seq(&text()?)?;
        let sent = parse_seq(&text()?)?;
        let mut events = entries(items.next().unwrap_or(Value::Nil))?;
        if newest_first {
            events.reverse();
        }
        let publish_key = match text_of(items.next().unwrap_or(Value::Nil))? {
            key if key.is_empty() => None,
            key => Some(
                key.parse()
                    .map_err(|_| HistoryError::Corrupt("publish key".into()))?,
            ),
        };
        Ok(Some(Snapshot {
            epoch,
            published,
            acked,
            sent,
            events,
            publish_key,
        }))
    }

    /// Records upgrade `ticket` for `cursor` until `ttl`, so the WebSocket
    /// handshake may reach any instance.
    pub(crate) async fn ticket_put(
        &self,
        id: &SessionId,
        ticket: &str,
        cursor: u64,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        let mut connection = self.connection.clone();
        self.call(
            redis::cmd("SET")
                .arg(Keys::ticket(id, ticket))
                .arg(cursor)
                .arg("PX")
                .arg(Self::ms(ttl))
                .query_async::<()>(&mut connection),
        )
        .await
    }

    /// Takes upgrade `ticket` (`GETDEL`: it is used once, on whichever
    /// instance gets the handshake first); its cursor, or `None` if it is
    /// unknown, used or expired.
    pub(crate) async fn ticket_take(
        &self,
        id: &SessionId,
        ticket: &str,
    ) -> Result<Option<u64>, HistoryError> {
        let mut connection = self.connection.clone();
        let cursor: Option<String> = self
            .call(
                redis::cmd("GETDEL")
                    .arg(Keys::ticket(id, ticket))
                    .query_async(&mut connection),
            )
            .await?;
        cursor.map(|text| parse_seq(&text)).transpose()
    }

    /// Whether upgrade `ticket` is still waiting for its handshake.
    pub(crate) async fn ticket_exists(
        &self,
        id: &SessionId,
        ticket: &str,
    ) -> Result<bool, HistoryError> {
        let mut connection = self.connection.clone();
        let exists: i64 = self
            .call(
                redis::cmd("EXISTS")
                    .arg(Keys::ticket(id, ticket))
                    .query_async(&mut connection),
            )
            .await?;
        Ok(exists == 1)
    }

    /// Deletes the session's keys; whether there were any.
    pub(crate) async fn delete(&self, id: &SessionId) -> Result<bool, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        self.call(
            redis::cmd("DEL")
                .arg(&keys.stream)
                .arg(&keys.meta)
                .arg(&keys.lease)
                .query_async::<i64>(&mut connection),
        )
        .await
        .map(|deleted| deleted > 0)
    }
}

impl History for RedisHistory {
    type Tail = RedisTail;

    /// The configuration this history was opened with.
    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    /// Appends `payloads` as seqs `first ..`, as `owner`; returns the last
    /// seq. Durable in Redis (to its persistence settings) when this
    /// returns `Ok`.
    async fn append(
        &self,
        id: &SessionId,
        owner: Token,
        first: u64,
        payloads: &[Bytes],
    ) -> Result<u64, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.append.prepare_invoke();
        invocation
            .key(&keys.lease)
            .key(&keys.stream)
            .key(&keys.meta)
            .arg(owner.to_string())
            .arg(first)
            .arg(self.config.retention)
            .arg(Self::ms(self.config.lease_ttl))
            .arg(Self::ms(self.config.idle));
        for payload in payloads {
            invocation.arg(payload.as_ref());
        }
        let last: String = self.call(invocation.invoke_async(&mut connection)).await?;
        parse_seq(&last)
    }

    /// Takes the session's lease for `owner` if it is free (or already
    /// `owner`'s).
    async fn acquire(&self, id: &SessionId, owner: Token) -> Result<Acquired, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.acquire.prepare_invoke();
        invocation
            .key(&keys.lease)
            .key(&keys.meta)
            .arg(owner.to_string())
            .arg(Self::ms(self.config.lease_ttl));
        let (outcome, figure): (String, String) =
            self.call(invocation.invoke_async(&mut connection)).await?;
        let figure = parse_seq(&figure)?;
        match outcome.as_str() {
            "owner" => Ok(Acquired::Owner { published: figure }),
            "held" => Ok(Acquired::Held {
                retry_after: Duration::from_millis(figure),
            }),
            other => Err(HistoryError::Corrupt(format!("acquire answered {other}"))),
        }
    }

    /// Extends `owner`'s lease; `false` if another instance holds it now.
    async fn renew(&self, id: &SessionId, owner: Token) -> Result<bool, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.renew.prepare_invoke();
        invocation
            .key(&keys.lease)
            .arg(owner.to_string())
            .arg(Self::ms(self.config.lease_ttl));
        let renewed: i64 = self.call(invocation.invoke_async(&mut connection)).await?;
        Ok(renewed == 1)
    }

    /// Gives up `owner`'s lease, so another instance may take over at once.
    async fn release(&self, id: &SessionId, owner: Token) -> Result<(), HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation.key(&keys.lease).arg(owner.to_string());
        self.call(invocation.invoke_async::<i64>(&mut connection))
            .await
            .map(drop)
    }

    /// The session's meta and up to `count` events after seq `after`;
    /// `None` if the session is gone. The events are whatever Redis still
    /// retains: the first may be past `after + 1` (the caller checks).
    async fn after(
        &self,
        id: &SessionId,
        after: u64,
        count: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after.to_string(), count).await
    }

    /// A dedicated connection that follows session `id`'s stream.
    async fn tail(&self, id: &SessionId) -> Result<RedisTail, HistoryError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.timeout))
            .set_response_timeout(None);
        let connection = self
            .call(
                self.client
                    .get_multiplexed_async_connection_with_config(&config),
            )
            .await?;
        Ok(RedisTail {
            connection,
            stream: Keys::of(id).stream,
            timeout: self.config.timeout,
        })
    }
}

/// A blocking reader of one session's stream, on its own connection.
pub(crate) struct RedisTail {
    connection: MultiplexedConnection,
    stream: String,
    timeout: Duration,
}

impl Tail for RedisTail {
    async fn next(
        &mut self,
        after: u64,
        block: Duration,
    ) -> Result<Vec<(u64, Bytes)>, HistoryError> {
        let mut command = redis::cmd("XREAD");
        command
            .arg("COUNT")
            .arg(READ_BATCH)
            .arg("BLOCK")
            .arg(u64::try_from(block.as_millis()).unwrap_or(u64::MAX))
            .arg("STREAMS")
            .arg(&self.stream)
            .arg(format!("0-{after}"));
        let call = command.query_async::<Value>(&mut self.connection);
        let value = match tokio::time::timeout(block + self.timeout, call).await {
            Ok(result) => result.map_err(typed)?,
            Err(_) => {
                return Err(HistoryError::Unavailable(format!(
                    "XREAD gave no answer within {:?}",
                    block + self.timeout
                )))
            }
        };
        // Nil on timeout, else [[stream, entries]] (a map under RESP3).
        let streams = match value {
            Value::Nil => return Ok(Vec::new()),
            Value::Array(streams) => streams,
            Value::Map(pairs) => pairs
                .into_iter()
                .map(|(key, entries)| Value::Array(vec![key, entries]))
                .collect(),
            other => return Err(HistoryError::Corrupt(format!("XREAD answered {other:?}"))),
        };
        match streams.into_iter().next() {
            Some(Value::Array(pair)) if pair.len() == 2 => {
                entries(pair.into_iter().nth(1).unwrap_or(Value::Nil))
            }
            None => Ok(Vec::new()),
            Some(other) => Err(HistoryError::Corrupt(format!("XREAD stream {other:?}"))),
        }
    }
}

/// Types a Redis error: our scripts' refusals by their code, everything
/// else (I/O, timeouts, OOM, LOADING, a busy script) as unavailable, and
/// replies of the wrong shape as corrupt.
fn typed(error: RedisError) -> HistoryError {
    let detail = error.detail().unwrap_or_default().trim();
    match error.code() {
        Some("NOTOWNER") => {
            // PTTL is -2 (no lease any more) or -1 (no expiry): retry soon.
            let ms = detail.parse::<i64>().unwrap_or(0).max(1);
            return HistoryError::NotOwner {
                retry_after: Duration::from_millis(ms.unsigned_abs()),
            };
        }
        Some("BEHIND") => {
            return match parse_seq(detail) {
                Ok(published) => HistoryError::Behind { published },
                Err(error) => error,
            }
        }
        Some("GONE") => return HistoryError::Gone,
        _ => {}
    }
    match error.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            HistoryError::Corrupt(error.to_string())
        }
        _ => unavailable(error),
    }
}

fn unavailable(error: RedisError) -> HistoryError {
    HistoryError::Unavailable(error.to_string())
}

/// A decimal seq as Redis holds it.
fn parse_seq(text: &str) -> Result<u64, HistoryError> {
    text.trim()
        .parse()
        .map_err(|_| HistoryError::Corrupt(format!("seq {text:?}")))
}

fn text_of(value: Value) -> Result<String, HistoryError> {
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
fn entries(value: Value) -> Result<Vec<(u64, Bytes)>, HistoryError> {
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
