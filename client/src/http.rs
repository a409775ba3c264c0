//! [`Client`]: one typed helper per route, over a pooled HTTP/1.1 client.

use crate::error::{within, ClientError};
use crate::response::Response;
use crate::sse::SseStream;
use crate::timeout::{CONNECT_TIMEOUT, DEFAULT_TIMEOUT};
use crate::wire::{
    bearer, is_session_id, Created, CreatedAnswer, CursorBody, Emitted, StateView, UpgradeGrant,
};
use crate::ws::WsStream;
use bytes::Bytes;
use gapless::EventId;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite;

/// A request being built: method, URI, headers, body. Made by
/// [`Client::request`] (or [`Client::get`], [`Client::post`]) and sent by [`Client::send`]; the typed helpers use
/// it too, and tests use it for requests the helpers do not make.
#[derive(Debug)]
pub struct Request {
    method: Method,
    uri: String,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    /// A header that is not valid HTTP was added: sending fails.
    invalid_header: bool,
}

impl Request {
    /// Adds a header; a name or value that is not valid HTTP is an error
    /// when the request is sent.
    pub fn header<K, V>(mut self, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        HeaderValue: TryFrom<V>,
    {
        match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            (Ok(name), Ok(value)) => self.headers.push((name, value)),
            _ => self.invalid_header = true,
        }
        self
    }

    /// Sets the body, sent byte for byte.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// A `Content-Type: application/json` body.
    pub fn json_body(self, body: impl Into<Bytes>) -> Self {
        self.header(CONTENT_TYPE, "application/json").body(body)
    }

    fn into_http(self) -> Result<http::Request<Full<Bytes>>, ClientError> {
        if self.invalid_header {
            return Err(ClientError::Protocol(
                "request with an invalid header name or value".into(),
            ));
        }
        let mut builder = http::Request::builder().method(self.method).uri(&self.uri);
        for (name, value) in self.headers {
            builder = builder.header(name, value);
        }
        builder
            .body(Full::new(self.body))
            .map_err(|error| ClientError::Http(error.into()))
    }
}

/// One typed helper per route of the protocol.
#[derive(Clone, Debug)]
pub struct Client {
    http: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
    /// `http://HOST:PORT`, without a trailing slash.
    base: String,
    /// The limit of every network wait.
    timeout: Duration,
    /// Publish keys by session ID: learnt from `POST /session` (or given
    /// with [`Client::set_publish_key`]), sent with that session's emits
    /// and `DELETE`, forgotten at its `DELETE`. Shared by clones.
    publish_keys: Arc<Mutex<HashMap<String, String>>>,
}

impl Client {
    /// A client for the server at `base_url` (`http://HOST:PORT`).
    ///
    /// # Errors
    /// [`ClientError::Protocol`] if the URL is not `http://...` (this client
    /// speaks plain HTTP/1.1; put TLS in front of it with a proxy).
    pub fn new(base_url: impl Into<String>) -> Result<Self, ClientError> {
        let mut base = base_url.into();
        while base.ends_with('/') {
            base.pop();
        }
        if !base.starts_with("http://") || base.parse::<http::Uri>().is_err() {
            return Err(ClientError::Protocol(format!(
                "base URL must be http://HOST:PORT, got {base:?}"
            )));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let http =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self {
            http,
            base,
            timeout: DEFAULT_TIMEOUT,
            publish_keys: Arc::default(),
        })
    }

    /// Every network wait (a response, a stream read) gives up after
    /// `timeout` with [`ClientError::Timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout of every network wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `base_url + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request for `path` (relative to the base URL).
    pub fn request(&self, method: Method, path: &str) -> Request {
        Request {
            method,
            uri: self.url(path),
            headers: Vec::new(),
            body: Bytes::new(),
            invalid_header: false,
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Request {
        self.request(Method::GET, path)
    }

    /// `POST path`.
    pub fn post(&self, path: &str) -> Request {
        self.request(Method::POST, path)
    }

    /// Sends a request and waits, with the client's timeout, for the
    /// response's head.
    ///
    /// # Errors
    /// [`ClientError::Http`], [`ClientError::Timeout`].
    pub async fn send(&self, request: Request) -> Result<Response, ClientError> {
        let request = request.into_http()?;
        within(self.timeout, "a response", self.http.request(request))
            .await?
            .map_err(|error| ClientError::Http(error.into()))
    }

    /// Reads a whole response body, with the client's timeout.
    ///
    /// # Errors
    /// [`ClientError::Http`], [`ClientError::Timeout`].
    pub async fn read_body(&self, response: Response) -> Result<Bytes, ClientError> {
        let collected = within(
            self.timeout,
            "a response body",
            response.into_body().collect(),
        )
        .await?
        .map_err(|error| ClientError::Http(error.into()))?;
        Ok(collected.to_bytes())
    }

    /// Checks the status; on anything else, reads and types the error answer.
    async fn expect(
        &self,
        response: Response,
        status: StatusCode,
    ) -> Result<Response, ClientError> {
        if response.status() == status {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.parse::<u64>().ok());
        let body = self.read_body(response).await?;
        let mut error = ClientError::from_parts(status, &body);
        if let ClientError::Unavailable {
            retry_after: slot, ..
        }
        | ClientError::Limited {
            retry_after: slot, ..
        } = &mut error
        {
            *slot = retry_after;
        }
        Err(error)
    }

    /// Sends, expects `status`, and reads the body as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        request: Request,
        status: StatusCode,
        what: &str,
    ) -> Result<T, ClientError> {
        let response = self.expect(self.send(request).await?, status).await?;
        let body = self.read_body(response).await?;
        serde_json::from_slice(&body).map_err(|error| {
            ClientError::Protocol(format!(
                "{what}: {error}: {}",
                String::from_utf8_lossy(&body)
            ))
        })
    }

    /// Sends and expects a `204`.
    async fn call_no_content(&self, request: Request) -> Result<(), ClientError> {
        self.expect(self.send(request).await?, StatusCode::NO_CONTENT)
            .await
            .map(drop)
    }

    /// `POST /session` → `201 {"session", "epoch"}`.
    ///
    /// # Errors
    /// As the server answers; [`ClientError::Protocol`] for a malformed ID.
    pub async fn create_session(&self) -> Result<Created, ClientError> {
        let CreatedAnswer {
            created,
            publish_key,
        } = self
            .call(self.post("/session"), StatusCode::CREATED, "POST /session")
            .await?;
        if !is_session_id(&created.session) {
            return Err(ClientError::Protocol(format!(
                "POST /session: session ID must be 32 lowercase hex digits, got {:?}",
                created.session
            )));
        }
        if let Some(key) = &publish_key {
            self.set_publish_key(&created.session, key);
        }
        Ok(created)
    }

    /// The publish key this client sends with `session`'s emits and
    /// `DELETE`, if it has one (from `POST /session` on a server run with
    /// `--publish-keys`, or [`Client::set_publish_key`]).
    pub fn publish_key(&self, session: &str) -> Option<String> {
        self.keys().get(session).cloned()
    }

    /// Sends `key` as `session`'s publish key with its emits and `DELETE`
    /// (a key this client did not receive itself, say from the process
    /// that created the session).
    pub fn set_publish_key(&self, session: &str, key: &str) {
        self.keys().insert(session.to_owned(), key.to_owned());
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.publish_keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `request` with `session`'s publish key as `Authorization: Bearer
    /// <key>`, when this client knows one.
    fn with_publish_key(&self, request: Request, session: &str) -> Request {
        match self.keys().get(session).map(|key| bearer(key)) {
            Some(credentials) => request.header(AUTHORIZATION, credentials),
            None => request,
        }
    }

    /// `POST /session/{id}/events` with `payload` as compact JSON →
    /// `202 {"id"}`.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn emit(&self, session: &str, payload: &Value) -> Result<EventId, ClientError> {
        let body = serde_json::to_vec(payload)
            .map_err(|e| ClientError::Protocol(format!("payload does not serialise: {e}")))?;
        self.emit_raw(session, body).await
    }

    /// `POST /session/{id}/events` with `body` sent byte for byte.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn emit_raw(
        &self,
        session: &str,
        body: impl Into<Bytes>,
    ) -> Result<EventId, ClientError> {
        let request = self.with_publish_key(
            self.post(&format!("/session/{session}/events"))
                .json_body(body),
            session,
        );
        let emitted: Emitted = self
            .call(request, StatusCode::ACCEPTED, "POST events")
            .await?;
        Ok(emitted.id)
    }

    /// `GET /session/{id}/events` with `Last-Event-ID: cursor` if given.
    ///
    /// # Errors
    /// The `409` refusals (before any stream byte), `404`, `400`.
    pub async fn open_sse(
        &self,
        session: &str,
        last_event_id: Option<EventId>,
    ) -> Result<SseStream, ClientError> {
        let mut request = self.get(&format!("/session/{session}/events"));
        if let Some(cursor) = last_event_id {
            request = request.header("last-event-id", cursor.to_string());
        }
        self.sse_from(request).await
    }

    /// `GET /session/{id}/events?last_event_id=cursor` (the query form).
    ///
    /// # Errors
    /// As [`Client::open_sse`].
    pub async fn open_sse_query(
        &self,
        session: &str,
        cursor: EventId,
    ) -> Result<SseStream, ClientError> {
        self.sse_from(self.get(&format!("/session/{session}/events?last_event_id={cursor}")))
            .await
    }

    /// Opens an SSE stream from any request (custom headers in tests).
    ///
    /// # Errors
    /// As [`Client::open_sse`]; [`ClientError::Protocol`] if a `200` is not
    /// `text/event-stream`.
    pub async fn sse_from(&self, request: Request) -> Result<SseStream, ClientError> {
        let request = request.header(ACCEPT, "text/event-stream");
        let response = self
            .expect(self.send(request).await?, StatusCode::OK)
            .await?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type.starts_with("text/event-stream") {
            return Err(ClientError::Protocol(format!(
                "SSE answered 200 with content type {content_type:?}"
            )));
        }
        Ok(SseStream::from_response(response, Some(self.timeout)))
    }

    /// `POST /session/{id}/ack {"cursor"}` → `204`.
    ///
    /// # Errors
    /// As the server answers (`409` for a foreign or ahead cursor).
    pub async fn ack(&self, session: &str, cursor: EventId) -> Result<(), ClientError> {
        let request = self
            .post(&format!("/session/{session}/ack"))
            .json_body(cursor_body(cursor)?);
        self.call_no_content(request).await
    }

    /// `POST /session/{id}/upgrade {"cursor"}` with the client's OWN cursor
    /// → `200 {"ticket", "ws", "replay_from", "replay_to"}`.
    ///
    /// # Errors
    /// The `409` refusals, `404`, `400`.
    pub async fn upgrade(
        &self,
        session: &str,
        cursor: EventId,
    ) -> Result<UpgradeGrant, ClientError> {
        self.upgrade_raw(session, cursor_body(cursor)?).await
    }

    /// `POST /session/{id}/upgrade` with `body` sent byte for byte.
    ///
    /// # Errors
    /// As [`Client::upgrade`].
    pub async fn upgrade_raw(
        &self,
        session: &str,
        body: impl Into<Bytes>,
    ) -> Result<UpgradeGrant, ClientError> {
        let request = self
            .post(&format!("/session/{session}/upgrade"))
            .json_body(body);
        self.call(request, StatusCode::OK, "POST upgrade").await
    }

    /// The `ws://` URL of `path`.
    pub fn ws_url(&self, path: &str) -> String {
        let rest = self.base.strip_prefix("http://").unwrap_or(&self.base);
        format!("ws://{rest}{path}")
    }

    /// Opens the WebSocket of a granted upgrade (its `ws` path).
    ///
    /// # Errors
    /// The handshake's answer typed (`409 bad_ticket`, `404`), or the
    /// transport error.
    pub async fn connect_ws(&self, grant: &UpgradeGrant) -> Result<WsStream, ClientError> {
        self.connect_ws_path(&grant.ws).await
    }

    /// Opens `GET /session/{id}/ws?ticket=T`.
    ///
    /// # Errors
    /// As [`Client::connect_ws`].
    pub async fn connect_ws_ticket(
        &self,
        session: &str,
        ticket: &str,
    ) -> Result<WsStream, ClientError> {
        self.connect_ws_path(&format!("/session/{session}/ws?ticket={ticket}"))
            .await
    }

    /// Opens a WebSocket at `path` (relative to the base URL).
    ///
    /// # Errors
    /// As [`Client::connect_ws`].
    pub async fn connect_ws_path(&self, path: &str) -> Result<WsStream, ClientError> {
        let handshake = tokio_tungstenite::connect_async(self.ws_url(path));
        match within(self.timeout, "the WebSocket handshake", handshake).await? {
            Ok((socket, _response)) => Ok(WsStream::new(socket, Some(self.timeout))),
            Err(tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                Err(ClientError::from_parts(status, &body))
            }
            Err(error) => Err(ClientError::WebSocket(Box::new(error))),
        }
    }

    /// `GET /session/{id}` → the server-side figures.
    ///
    /// # Errors
    /// As the server answers; [`ClientError::Protocol`] if a seq is not a
    /// JSON integer, the epoch not 16 hex digits, or `transport` unknown.
    pub async fn state(&self, session: &str) -> Result<StateView, ClientError> {
        self.call(
            self.get(&format!("/session/{session}")),
            StatusCode::OK,
            "GET session",
        )
        .await
    }

    /// `DELETE /session/{id}` → `204`.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn delete(&self, session: &str) -> Result<(), ClientError> {
        let request = self.with_publish_key(
            self.request(Method::DELETE, &format!("/session/{session}")),
            session,
        );
        self.call_no_content(request).await?;
        self.keys().remove(session);
        Ok(())
    }
}

/// `{"cursor": "<id>"}`.
fn cursor_body(cursor: EventId) -> Result<Vec<u8>, ClientError> {
    serde_json::to_vec(&CursorBody::new(cursor))
        .map_err(|e| ClientError::Protocol(format!("cursor body does not serialise: {e}")))
}
