//! Embedding the reference server in an application: its router behind the
//! application's own bearer-token layer, served with the server's limits
//! and shutdown (`serve_router`).
//!
//! ```text
//! cargo run -p gapless-server --example embed_with_auth
//! ```
//!
//! It serves on a free loopback port, checks that a request without the
//! token is `401` and one with it creates a session, then shuts down.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use gapless_client::Client;
use gapless_server::{router, serve_router, AppState, ServerConfig};
use std::error::Error;

/// The token this example accepts; a real application checks its own.
const TOKEN: &str = "example-token";

/// Lets a request through only with `Authorization: Bearer <TOKEN>`.
async fn require_bearer(request: Request, next: Next) -> Response {
    let authorized = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|token| token == TOKEN);
    if authorized {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            axum::Json(serde_json::json!({ "error": "unauthorized" })),
        )
            .into_response()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (stop, on_stop) = tokio::sync::watch::channel(false);
    let state = AppState::new(ServerConfig::default(), on_stop);
    let app = router(state.clone()).layer(middleware::from_fn(require_bearer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(serve_router(listener, state, app));
    println!("serving on {url} (bearer token required)");

    let client = Client::new(url.as_str())?;
    let anonymous = client.send(client.post("/session")).await?;
    println!("without the token: {}", anonymous.status());
    if anonymous.status() != StatusCode::UNAUTHORIZED {
        return Err("a request without the token was let through".into());
    }
    let authorized = client
        .send(
            client
                .post("/session")
                .header(header::AUTHORIZATION, format!("Bearer {TOKEN}")),
        )
        .await?;
    let status = authorized.status();
    let body = client.read_body(authorized).await?;
    println!(
        "with the token: {status} {}",
        String::from_utf8_lossy(&body)
    );
    if status != StatusCode::CREATED {
        return Err("a request with the token was refused".into());
    }

    stop.send(true)?;
    server.await??;
    Ok(())
}
