//! [`WsStream`]: the WebSocket of a granted upgrade, read as the protocol's
//! items.

use crate::error::{within, ClientError};
use crate::incoming::{Closed, Delivered, Incoming};
use crate::refusal::Refusal;
use crate::timeout::DEFAULT_TIMEOUT;
use crate::wire::WsEvent;
use futures_util::{SinkExt, StreamExt};
use std::fmt;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Close code for "the ring no longer covers your cursor"; the reason is
/// the `gap_not_covered` refusal body.
pub const CLOSE_GAP: u16 = 4409;

/// An open WebSocket of a granted upgrade.
pub struct WsStream {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// How long a read may wait for a frame (`None`: forever).
    idle_timeout: Option<Duration>,
    /// A close frame came or the connection ended: no more reads.
    closed: bool,
}

impl fmt::Debug for WsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WsStream")
            .field("closed", &self.closed)
            .finish()
    }
}

impl WsStream {
    pub(crate) fn new(
        socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
        idle_timeout: Option<Duration>,
    ) -> Self {
        Self {
            socket,
            idle_timeout,
            closed: false,
        }
    }

    /// How long a read may wait for a frame (`None`: forever).
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    /// The next item: an event frame `{"id", "data"}`, a gap (close 4409),
    /// or the end (any other close, or the connection ending).
    ///
    /// # Errors
    /// [`ClientError::Protocol`] for a frame that is not the protocol's
    /// JSON, a binary frame, or a 4409 whose reason is not a refusal; the
    /// transport errors.
    pub async fn next_item(&mut self) -> Result<Incoming, ClientError> {
        loop {
            if self.closed {
                return Ok(Incoming::Closed(Closed::bare(false)));
            }
            let message = match self.idle_timeout {
                Some(timeout) => within(timeout, "a WebSocket frame", self.socket.next()).await?,
                None => self.socket.next().await,
            };
            match message {
                Some(Ok(Message::Text(text))) => return event_frame(text.as_str()),
                Some(Ok(Message::Binary(_))) => {
                    return Err(ClientError::Protocol(
                        "binary WebSocket frame; the protocol sends text frames".into(),
                    ))
                }
                Some(Ok(Message::Close(frame))) => {
                    self.closed = true;
                    return close_item(frame);
                }
                Some(Ok(_)) => {} // ping, pong: answered by the library
                Some(Err(tungstenite::Error::ConnectionClosed)) | None => {
                    self.closed = true;
                    return Ok(Incoming::Closed(Closed::bare(false)));
                }
                Some(Err(error)) => {
                    self.closed = true;
                    return Err(ClientError::WebSocket(Box::new(error)));
                }
            }
        }
    }

    /// Closes the socket with a normal close frame (best effort).
    pub async fn close(mut self) {
        let timeout = self.idle_timeout.unwrap_or(DEFAULT_TIMEOUT);
        let _ = within(timeout, "the WebSocket close", async {
            let _ = self
                .socket
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })))
                .await;
            while let Some(Ok(_)) = self.socket.next().await {}
        })
        .await;
    }
}

fn close_item(frame: Option<CloseFrame>) -> Result<Incoming, ClientError> {
    let Some(frame) = frame else {
        return Ok(Incoming::Closed(Closed::bare(true)));
    };
    let code = u16::from(frame.code);
    let reason = frame.reason.as_str().to_owned();
    if code == CLOSE_GAP {
        return Refusal::from_text(&reason)
            .map(Incoming::Gap)
            .map_err(|e| ClientError::Protocol(format!("WebSocket close 4409: {e}")));
    }
    Ok(Incoming::Closed(Closed {
        code: Some(code),
        reason,
        clean: true,
    }))
}

/// An event frame, its payload kept as the exact text the server sent.
fn event_frame(text: &str) -> Result<Incoming, ClientError> {
    // serde would also read a struct from a JSON array; the protocol's
    // frame is an object.
    if !text.trim_start().starts_with('{') {
        return Err(ClientError::Protocol(format!(
            "WebSocket frame {text:?}: not a JSON object"
        )));
    }
    let frame: WsEvent<'_> = serde_json::from_str(text)
        .map_err(|e| ClientError::Protocol(format!("WebSocket frame {text:?}: {e}")))?;
    Ok(Incoming::Event(Delivered {
        id: frame.id,
        data: frame.data.get().to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_frames_keep_the_payload_and_reject_other_shapes() {
        match event_frame(r#"{"id":"00000000000000ab-3","data":"x"}"#) {
            Ok(Incoming::Event(d)) => assert_eq!((d.id.seq, d.data.as_str()), (3, r#""x""#)),
            other => panic!("{other:?}"),
        }
        for bad in [
            r#"{"id":3,"data":"x"}"#,
            r#"{"id":"00000000000000ab-3"}"#,
            r#"["00000000000000ab-3","x"]"#,
            "not json",
        ] {
            assert!(
                matches!(event_frame(bad), Err(ClientError::Protocol(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_4409_close_is_a_gap_and_other_closes_are_ends() {
        let gap = CloseFrame {
            code: CloseCode::from(CLOSE_GAP),
            reason: r#"{"error":"gap_not_covered","cursor":1,"first_retained":5,"published":9,"evicted":3}"#.into(),
        };
        assert!(matches!(
            close_item(Some(gap)),
            Ok(Incoming::Gap(Refusal::GapNotCovered {
                first_retained: 5,
                ..
            }))
        ));
        let bad = CloseFrame {
            code: CloseCode::from(CLOSE_GAP),
            reason: "gone".into(),
        };
        assert!(matches!(
            close_item(Some(bad)),
            Err(ClientError::Protocol(_))
        ));
        let away = CloseFrame {
            code: CloseCode::Away,
            reason: "server shutting down".into(),
        };
        assert!(matches!(
            close_item(Some(away)),
            Ok(Incoming::Closed(Closed {
                code: Some(1001),
                clean: true,
                ..
            }))
        ));
    }
}
