//! [`Response`]: an HTTP response whose body has not been read yet, as
//! [`Client::send`](crate::Client::send) returns it and
//! [`SseStream::from_response`](crate::SseStream::from_response) reads it.

/// A response whose body has not been read yet.
pub type Response = ::http::Response<hyper::body::Incoming>;
