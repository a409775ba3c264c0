//! A connection handed over with bytes already read from it: reads return
//! those bytes first, then the socket's; writes go straight to the socket.
//!
//! The append loop (`append_loop`) reads requests itself and gives hyper
//! the connection at the first request it does not answer, together with
//! what it read of that request: hyper parses it as if it had read it.

use bytes::{Buf, Bytes};
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// `inner`, with `prefix` read before anything `inner` gives.
#[derive(Debug)]
pub(crate) struct PrefixedIo<T> {
    /// Bytes read from `inner` before the hand-over, not yet read again;
    /// empty once they all were.
    prefix: Bytes,
    inner: T,
}

impl<T> PrefixedIo<T> {
    /// `inner` whose reads begin with `prefix`.
    pub(crate) fn new(prefix: Bytes, inner: T) -> Self {
        Self { prefix, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for PrefixedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for PrefixedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::PrefixedIo;
    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_prefix_is_read_first_then_the_rest_and_writes_pass_through() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = PrefixedIo::new(Bytes::from_static(b"GET / HT"), near);
        far.write_all(b"TP/1.1\r\n\r\n").await.unwrap();
        let mut small = [0u8; 3];
        io.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"GET");
        let mut rest = vec![0u8; 15];
        io.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b" / HTTP/1.1\r\n\r\n");
        io.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        far.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");
    }
}
