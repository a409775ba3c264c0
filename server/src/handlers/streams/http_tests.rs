//! The `HEAD` and `GET` routes with `--data-dir`: what they tell of a
//! stream's close and removal waits until it is durable (the committer
//! held by the test: `DiskHistory::hold_commits`).

use super::serve_stream;
use crate::config::{DataDir, DiskLimits, Fsync, ServerConfig};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, Response, StatusCode};
use futures_util::FutureExt;
use gapless_history::CommitsHeld;
use tokio::sync::watch;

/// A server's state over a data directory in `dir`, and the sender of its
/// shutdown signal (kept: dropped, it would read as a shutdown).
async fn journaled_state(dir: &std::path::Path) -> (AppState, watch::Sender<bool>) {
    let config = ServerConfig {
        data_dir: Some(DataDir {
            path: dir.to_owned(),
            fsync: Fsync::Always,
            limits: DiskLimits::default(),
        }),
        ..ServerConfig::default()
    };
    let (shutdown, signal) = watch::channel(false);
    let state = AppState::connect(config, signal)
        .await
        .expect("the server's state over the data directory");
    (state, shutdown)
}

fn request(method: Method, headers: &[(&str, &str)], body: &'static str) -> Request {
    let mut builder = Request::builder()
        .method(method)
        .uri("/v1/stream/s")
        .header("content-type", "text/plain");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body)).expect("a request")
}

async fn serve(state: &AppState, request: Request) -> Response<Body> {
    serve_stream(&state.0, "s".to_owned(), request).await
}

fn hold(state: &AppState) -> CommitsHeld<'_> {
    state
        .0
        .streams
        .journal()
        .expect("a journal")
        .disk()
        .hold_commits()
}

/// A state with stream `s` created (durably).
async fn with_stream(dir: &std::path::Path) -> (AppState, watch::Sender<bool>) {
    let (state, shutdown) = journaled_state(dir).await;
    let created = serve(&state, request(Method::PUT, &[], "a")).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    (state, shutdown)
}

#[tokio::test]
async fn head_tells_a_close_only_once_it_is_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (state, _shutdown) = with_stream(dir.path()).await;
    let held = hold(&state);
    let mut closing = Box::pin(serve(
        &state,
        request(Method::POST, &[("stream-closed", "true")], ""),
    ));
    assert!(
        (&mut closing).now_or_never().is_none(),
        "the close waits for its commit"
    );
    let mut head = Box::pin(serve(&state, request(Method::HEAD, &[], "")));
    assert!(
        (&mut head).now_or_never().is_none(),
        "HEAD answered about a close that is not durable"
    );
    drop(held);
    let head = head.await;
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers().get("stream-closed").map(|v| v.as_bytes()),
        Some(&b"true"[..]),
        "durable, the close is told"
    );
    assert!(closing.await.status().is_success());
}

#[tokio::test]
async fn head_and_get_say_not_found_only_once_the_deletion_is_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (state, _shutdown) = with_stream(dir.path()).await;
    let held = hold(&state);
    let mut deleting = Box::pin(serve(&state, request(Method::DELETE, &[], "")));
    assert!(
        (&mut deleting).now_or_never().is_none(),
        "the deletion waits for its commit"
    );
    let mut head = Box::pin(serve(&state, request(Method::HEAD, &[], "")));
    let mut get = Box::pin(serve(&state, request(Method::GET, &[], "")));
    assert!(
        (&mut head).now_or_never().is_none(),
        "HEAD said not found before the deletion was durable"
    );
    assert!(
        (&mut get).now_or_never().is_none(),
        "GET said not found before the deletion was durable"
    );
    drop(held);
    assert_eq!(head.await.status(), StatusCode::NOT_FOUND);
    assert_eq!(get.await.status(), StatusCode::NOT_FOUND);
    assert_eq!(deleting.await.status(), StatusCode::NO_CONTENT);
}
