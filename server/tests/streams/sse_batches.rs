//! SSE sends what one read of a stream finds as one `data` event and one
//! `control` event (the protocol's "each batch of data"): the batch's
//! bytes joined for text and base64, one array of its messages in JSON
//! mode; a message appended while the reader waits is the next batch.

use crate::support::{append, bounded, control_offset, create, start, stop, Sse};
use gapless::sse::SseEvent;
use gapless_server::ServerConfig;

/// The next event, which must be of `kind`.
async fn expect(sse: &mut Sse, kind: &str, what: &str) -> SseEvent {
    let event = sse
        .next()
        .await
        .unwrap_or_else(|| panic!("{what}: the SSE body ended"));
    assert_eq!(event.event_type, kind, "{what}: {event:?}");
    event
}

/// For each encoding: two appends held when the read begins arrive as one
/// `data` event whose text is both, then one `control` event naming the
/// tail after the second, up to date; a third append made while the reader
/// waits arrives as the next batch. For text, the two appends split one
/// UTF-8 character (`é` is `C3 A9`): joined, it arrives whole, where a
/// message each would have been two U+FFFD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_read_finds_is_one_data_event_and_one_control_event() {
    bounded("SSE batches", async {
        let (server, client) = start(ServerConfig::default()).await;
        // (content type, the three appends, the first batch's data, the
        // second batch's data)
        let cases: [(&str, [&[u8]; 3], &str, &str); 3] = [
            (
                "text/plain",
                [b"caf\xC3", b"\xA9 au lait\n", b"encore\n"],
                "café au lait\n",
                "encore\n",
            ),
            (
                "application/json",
                [b"{\"a\":1}", b"[{\"b\":2},3]", b"\"c\""],
                "[{\"a\":1},{\"b\":2},3]",
                "[\"c\"]",
            ),
            (
                "application/octet-stream",
                [&[0, 1], &[2], &[0xFF]],
                "AAEC",
                "/w==",
            ),
        ];
        for (n, (content_type, appends, first, second)) in cases.into_iter().enumerate() {
            let path = format!("batches/{n}");
            let start = create(&client, &path, content_type).await;
            append(&client, &path, content_type, appends[0]).await;
            let held = append(&client, &path, content_type, appends[1]).await;
            let mut sse = Sse::open(&client, &path, &start).await;

            let data = expect(&mut sse, "data", content_type).await;
            assert_eq!(data.data, first, "{content_type}: both appends, one event");
            let control = expect(&mut sse, "control", content_type).await;
            assert_eq!(control_offset(&control), held, "{content_type}");
            assert!(control.data.contains("\"upToDate\":true"), "{control:?}");

            let later = append(&client, &path, content_type, appends[2]).await;
            let data = expect(&mut sse, "data", content_type).await;
            assert_eq!(data.data, second, "{content_type}: the next batch");
            let control = expect(&mut sse, "control", content_type).await;
            assert_eq!(control_offset(&control), later, "{content_type}");
        }
        stop(server).await;
    })
    .await;
}
