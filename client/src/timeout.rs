//! How long the client waits: the default limit of every network wait, and
//! the limit of a TCP connect.

use std::time::Duration;

/// The default timeout of every network wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a TCP connect may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
