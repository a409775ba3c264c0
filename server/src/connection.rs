//! What a request knows of the TCP connection it arrived on: its [`Peer`]
//! address, and a [`ConnectionHandle`] that lets a stream close it.
//!
//! An SSE body only ends when hyper polls it, and hyper stops polling while
//! a stalled client's socket is full; ending the body cannot free such a
//! connection. The accept loop gives each connection a handle (a request
//! extension) and drops the connection when a stream calls
//! [`ConnectionHandle::close`].

use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::Notify;

/// The connection a request arrived on; [`close`](Self::close) drops it.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnectionHandle(Arc<Notify>);

impl ConnectionHandle {
    /// Drops the connection at once (no more bytes are written).
    pub(crate) fn close(&self) {
        // Stores a permit if the connection task is not waiting right now.
        self.0.notify_one();
    }

    /// Resolves when [`close`](Self::close) was called.
    pub(crate) async fn closed(&self) {
        self.0.notified().await;
    }
}

/// The address the connection came from (a request extension the accept
/// loop sets).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) IpAddr);
