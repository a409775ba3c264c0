//! PROTOCOL "Running": the binary's one `listening on` line, its flags, and
//! a graceful shutdown that closes open streams cleanly.

use crate::support::{
    bounded, create, emit_range, expect_sse, expect_ws, id, next_frame, next_item, refusal, start,
    stop, ChildGuard, IO,
};
use gapless_client::{Client, Closed, Incoming, Refusal};
use gapless_server::ServerConfig;
use std::time::{Duration, Instant};

/// PROTOCOL "Running": `--addr 127.0.0.1:0` prints exactly one line
/// `listening on http://127.0.0.1:PORT`; `--ring-events` and `--strict` take
/// effect; SIGTERM closes open SSE and WebSocket streams cleanly and exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_prints_listening_line_and_sigterm_closes_streams_cleanly() {
    bounded("binary", async {
        use std::io::{BufRead, Read};
        let mut child = ChildGuard(
            std::process::Command::new(env!("CARGO_BIN_EXE_gapless-server"))
                .args([
                    "serve",
                    "--addr",
                    "127.0.0.1:0",
                    "--ring-events",
                    "8",
                    "--strict",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn gapless-server"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (line, mut stdout) = tokio::time::timeout(
            IO,
            tokio::task::spawn_blocking(move || {
                let mut reader = std::io::BufReader::new(stdout);
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                (line, reader)
            }),
        )
        .await
        .expect("no `listening on` line within the deadline")
        .expect("reader thread");
        let url = line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("listening on "))
            .unwrap_or_else(|| panic!("first stdout line is {line:?}"));
        let port: u16 = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not http://127.0.0.1:PORT: {line:?}"));
        assert_ne!(port, 0, "the printed port must be the bound one");
        let client = Client::new(url).expect("client").with_timeout(IO);

        // --strict: an upgrade cursor that differs from the acked one.
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 3)).await,
                "strict upgrade"
            ),
            Refusal::CursorMismatch {
                cursor: 3,
                acked: 0
            }
        );
        // --ring-events 8: 20 events leave at most 8 retained.
        let b = create(&client).await;
        emit_range(&client, &b, 1, 1..=20).await;
        let state = client.state(&b.session).await.expect("state");
        assert_eq!(state.published, 20);
        assert!(
            state.published - state.first_retained < 8 && state.first_retained > 1,
            "--ring-events 8 not applied: {state:?}"
        );
        // A WebSocket open at shutdown too.
        let c = create(&client).await;
        emit_range(&client, &c, 2, 1..=1).await;
        let grant = client
            .upgrade(&c.session, c.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &c, 2, 1..=1).await;

        let status = std::process::Command::new("kill")
            .args(["-TERM", &child.0.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());

        match next_item(&mut sse, "SSE at SIGTERM").await {
            Incoming::Closed(Closed { clean: true, .. }) => {}
            other => panic!("SSE must end cleanly on SIGTERM, got {other:?}"),
        }
        match next_frame(&mut ws, "WebSocket at SIGTERM").await {
            Incoming::Closed(Closed {
                code: Some(_),
                clean: true,
                ..
            }) => {}
            other => panic!("WebSocket must get a close frame on SIGTERM, got {other:?}"),
        }
        let deadline = Instant::now() + IO;
        let exit = loop {
            if let Some(exit) = child.0.try_wait().expect("try_wait") {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(10)).await; // polling, bounded
        };
        assert!(exit.success(), "exit status after SIGTERM: {exit:?}");
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        assert_eq!(
            rest, "",
            "stdout must hold exactly the one `listening on` line"
        );
    })
    .await;
}

/// `RunningServer::shutdown` closes open streams cleanly (the in-process
/// form of the graceful shutdown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_open_streams_cleanly() {
    bounded("shutdown", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=2).await;
        let b = create(&client).await;
        let grant = client
            .upgrade(&b.session, b.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        stop(server).await;
        assert!(
            matches!(
                next_item(&mut sse, "SSE").await,
                Incoming::Closed(Closed { clean: true, .. })
            ),
            "SSE must end cleanly"
        );
        assert!(
            matches!(
                next_frame(&mut ws, "WS").await,
                Incoming::Closed(Closed {
                    code: Some(_),
                    clean: true,
                    ..
                })
            ),
            "WebSocket must get a close frame"
        );
    })
    .await;
}
