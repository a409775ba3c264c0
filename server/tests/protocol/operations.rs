//! PROTOCOL "Bad input" and "Browsers and embedding": health, JSON error
//! bodies for what axum answers (405), CORS for the configured origins,
//! a panicking handler answered as a JSON 500, and embedding the router.

use crate::support::{answer, bounded, create, eventually, scrape, start, stop, IO};
use axum::routing::get;
use gapless_client::{Client, Method};
use gapless_server::{routes, with_layers, AppState, ServerConfig};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_ok() {
    bounded("healthz", async {
        let (server, client) = start(ServerConfig::default()).await;
        let raw = answer(&client, client.get("/healthz"), "GET /healthz").await;
        assert_eq!(raw.status, 200);
        assert_eq!(raw.json(), serde_json::json!({ "status": "ok" }));
        stop(server).await;
    })
    .await;
}

/// A wrong method on a known route: `405 {"error": "method_not_allowed"}`
/// with `Allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_is_a_json_405_with_allow() {
    bounded("405", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        for (method, path, allowed) in [
            (Method::PUT, "/session".to_owned(), "POST"),
            (Method::GET, format!("/session/{}/ack", a.session), "POST"),
            (Method::DELETE, "/metrics".to_owned(), "GET"),
        ] {
            let what = format!("{method} {path}");
            let response = client
                .send(client.request(method, &path))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(response.status().as_u16(), 405, "{what}");
            let allow = response
                .headers()
                .get("allow")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(allow.contains(allowed), "{what}: Allow {allow:?}");
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert!(content_type.starts_with("application/json"), "{what}");
            let body = client.read_body(response).await.expect("body");
            let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(body, serde_json::json!({ "error": "method_not_allowed" }));
        }
        stop(server).await;
    })
    .await;
}

/// `--cors-origin` allows exactly its origins: preflights are answered,
/// every answer to an allowed origin (errors and SSE included) carries
/// `Access-Control-Allow-Origin` and `Vary: Origin`; other origins get no
/// CORS header; without the flag the server sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_exactly_the_configured_origins() {
    bounded("cors", async {
        const ALLOWED: &str = "https://app.example";
        let config = ServerConfig {
            cors_origins: vec![ALLOWED.to_owned()],
            ..ServerConfig::default()
        };
        let (server, client) = start(config).await;
        let a = create(&client).await;
        let header = |response: &gapless_client::Response, name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let preflight = client
            .send(
                client
                    .request(Method::OPTIONS, &format!("/session/{}/events", a.session))
                    .header("origin", ALLOWED)
                    .header("access-control-request-method", "POST")
                    .header("access-control-request-headers", "content-type"),
            )
            .await
            .expect("preflight");
        assert!(preflight.status().is_success(), "{}", preflight.status());
        assert_eq!(
            header(&preflight, "access-control-allow-origin").as_deref(),
            Some(ALLOWED)
        );
        let methods = header(&preflight, "access-control-allow-methods").unwrap_or_default();
        assert!(
            methods.contains("POST") && methods.contains("DELETE"),
            "{methods}"
        );
        let headers = header(&preflight, "access-control-allow-headers")
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(
            headers.contains("content-type") && headers.contains("last-event-id"),
            "{headers}"
        );
        // The publish key travels as `Authorization: Bearer`; the retired
        // header is not allowed.
        assert!(
            headers.contains("authorization") && !headers.contains("gapless-publish-key"),
            "{headers}"
        );

        for (what, path) in [
            (
                "an error",
                "/session/00000000000000000000000000000000".to_owned(),
            ),
            ("an SSE stream", format!("/session/{}/events", a.session)),
            ("metrics", "/metrics".to_owned()),
        ] {
            let response = client
                .send(client.get(&path).header("origin", ALLOWED))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                header(&response, "access-control-allow-origin").as_deref(),
                Some(ALLOWED),
                "{what}"
            );
            let vary = header(&response, "vary")
                .unwrap_or_default()
                .to_ascii_lowercase();
            assert!(vary.contains("origin"), "{what}: Vary {vary:?}");
            let other = client
                .send(client.get(&path).header("origin", "https://evil.example"))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                header(&other, "access-control-allow-origin"),
                None,
                "{what}"
            );
        }
        stop(server).await;

        let (server, client) = start(ServerConfig::default()).await;
        let response = client
            .send(client.get("/healthz").header("origin", ALLOWED))
            .await
            .expect("healthz");
        assert!(
            response
                .headers()
                .keys()
                .all(|name| !name.as_str().starts_with("access-control-")),
            "no CORS flag, no CORS header"
        );
        stop(server).await;
    })
    .await;
}

/// The router embeds: an application merges its own routes into
/// [`routes`] and applies [`with_layers`]; a handler that panics is then a
/// JSON `500` without the panic's text, counted, and the server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_a_json_500_and_the_server_goes_on() {
    bounded("panic", async {
        let (_stop, on_stop) = tokio::sync::watch::channel(false);
        let state = AppState::new(ServerConfig::default(), on_stop);
        let app = routes(state.clone()).merge(axum::Router::new().route(
            "/boom",
            get(|| async {
                if true {
                    panic!("secret internal detail at src/boom.rs:1");
                }
                "unreachable"
            }),
        ));
        let app = with_layers(app, &state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        let client = Client::new(format!("http://{addr}"))
            .expect("client")
            .with_timeout(IO);
        let raw = answer(&client, client.get("/boom"), "GET /boom").await;
        assert_eq!(raw.status, 500);
        assert_eq!(raw.json(), serde_json::json!({ "error": "internal" }));
        assert!(!raw.text().contains("secret"), "{}", raw.text());
        // The server goes on, and counted the panic.
        create(&client).await;
        eventually("the panic is counted", Duration::from_secs(5), || async {
            scrape(&client)
                .await
                .value("gapless_limits_tripped_total", &[("kind", "panic")])
                == Some(1.0)
        })
        .await;
        task.abort();
    })
    .await;
}
