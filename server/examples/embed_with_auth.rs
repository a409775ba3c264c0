//! Embedding the reference server in an application: its router behind the
//! application's own API-key layer, served with the server's limits and
//! shutdown (`serve_router`), with `--publish-keys` on.
//!
//! ```text
//! cargo run -p gapless-server --example embed_with_auth
//! ```
//!
//! Two credentials, two headers. `Authorization: Bearer` belongs to the
//! server: with publish keys, it carries a session's publish key on emits
//! and `DELETE`, and a write without it is `401` with `WWW-Authenticate:
//! Bearer` (a Durable Streams client answers that with a fresh token). A
//! request carries one `Authorization` value, so the application's own
//! credential goes elsewhere — here `x-api-key`, checked in front of the
//! router — and the application refuses with `403`, never `401 Bearer`,
//! so a client cannot mistake a missing API key for a stale publish key.
//! (An application that keeps `Authorization` for itself runs without
//! publish keys and decides who writes in its own layer.)
//!
//! It serves on a free loopback port and checks: without the API key,
//! `403`; with it, a session and its publish key; an emit with the API key
//! but no publish key, `401`; with both, `202`. Then it shuts down.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use gapless_client::wire::{bearer, CreatedAnswer};
use gapless_client::Client;
use gapless_server::{router, serve_router, AppState, ServerConfig};
use std::error::Error;

/// The application's own credential's header: not `Authorization`, which
/// carries the server's publish keys.
const API_KEY_HEADER: &str = "x-api-key";

/// The API key this example accepts; a real application checks its own.
const API_KEY: &str = "example-api-key";

/// Lets a request through only with `x-api-key: <API_KEY>`, leaving
/// `Authorization` to the server.
async fn require_api_key(request: Request, next: Next) -> Response {
    let authorized = request
        .headers()
        .get(API_KEY_HEADER)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|key| key == API_KEY);
    if authorized {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({
                "error": "forbidden",
                "detail": "this application needs its API key in x-api-key",
            })),
        )
            .into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (stop, on_stop) = tokio::sync::watch::channel(false);
    let config = ServerConfig {
        publish_keys: true,
        ..ServerConfig::default()
    };
    let state = AppState::new(config, on_stop);
    let app = router(state.clone()).layer(middleware::from_fn(require_api_key));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(serve_router(listener, state, app));
    println!("serving on {url} (API key and publish keys required)");

    let client = Client::new(url.as_str())?;
    let anonymous = client.send(client.post("/session")).await?;
    println!("without the API key: {}", anonymous.status());
    if anonymous.status() != StatusCode::FORBIDDEN {
        return Err("a request without the API key was let through".into());
    }
    let created = client
        .send(client.post("/session").header(API_KEY_HEADER, API_KEY))
        .await?;
    let status = created.status();
    let body = client.read_body(created).await?;
    println!("with the API key: {status}");
    if status != StatusCode::CREATED {
        return Err("a request with the API key was refused".into());
    }
    let created: CreatedAnswer = serde_json::from_slice(&body)?;
    let publish_key = created.publish_key.ok_or("no publish key")?;
    let events = format!("/session/{}/events", created.created.session);

    let emit = || {
        client
            .post(&events)
            .header(API_KEY_HEADER, API_KEY)
            .json_body(r#"{"hello":"world"}"#)
    };
    let keyless = client.send(emit()).await?;
    println!(
        "emit without the publish key: {} (WWW-Authenticate: {:?})",
        keyless.status(),
        keyless.headers().get(header::WWW_AUTHENTICATE)
    );
    if keyless.status() != StatusCode::UNAUTHORIZED {
        return Err("an emit without the publish key was let through".into());
    }
    let emitted = client
        .send(emit().header(header::AUTHORIZATION, bearer(&publish_key)))
        .await?;
    let status = emitted.status();
    let body = client.read_body(emitted).await?;
    println!(
        "emit with both: {status} {}",
        String::from_utf8_lossy(&body)
    );
    if status != StatusCode::ACCEPTED {
        return Err("an emit with the publish key was refused".into());
    }

    stop.send(true)?;
    server.await??;
    Ok(())
}
