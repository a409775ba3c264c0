//! Whether `gapless-server serve` may start on its address: the server's
//! default posture towards the network, as Redis's protected mode has it.
//!
//! Without `--publish-keys`, whoever reaches the server writes: a Durable
//! Stream's URL is enough to create, append to and delete it, and its
//! answers allow any origin (`Access-Control-Allow-Origin: *`, and a
//! `text/plain` `POST` needs no preflight), so any web page that a browser
//! on the network opens can do it too. On loopback only this machine
//! reaches it; on any other address the server refuses to start unless
//! keys are required (`--publish-keys`) or open writes are asked for
//! (`--allow-anonymous-writes`).
//!
//! An application that embeds the router binds its own listener and makes
//! this decision itself: [`check_exposure`] is what the binary calls.

use std::fmt;
use std::net::SocketAddr;

/// Why `serve` does not start on an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// `addr` is not a loopback address, and neither `--publish-keys` nor
    /// `--allow-anonymous-writes` was given.
    AnonymousWrites {
        /// The address asked for.
        addr: SocketAddr,
    },
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AnonymousWrites { addr } => write!(
                f,
                "--addr {addr} is reachable from other machines, and without \
                 --publish-keys anyone who reaches it (any web page a browser \
                 on that network opens, too) can create, append to and delete \
                 every stream: add --publish-keys to require a key for writes, \
                 or --allow-anonymous-writes (GAPLESS_ALLOW_ANONYMOUS_WRITES=true) \
                 to serve open writes on purpose, or listen on 127.0.0.1"
            ),
        }
    }
}

impl std::error::Error for Exposure {}

/// Whether the server may listen on `addrs` with these flags: every
/// address a loopback one (`127.0.0.0/8`, `::1`, `::ffff:127.x.x.x`), or
/// `publish_keys`, or `allow_anonymous_writes`. An unspecified address
/// (`0.0.0.0`, `::`) is every interface, so not loopback.
///
/// # Errors
/// [`Exposure::AnonymousWrites`] naming the first address that is not
/// loopback.
pub fn check_exposure(
    addrs: &[SocketAddr],
    publish_keys: bool,
    allow_anonymous_writes: bool,
) -> Result<(), Exposure> {
    if publish_keys || allow_anonymous_writes {
        return Ok(());
    }
    match addrs
        .iter()
        .find(|addr| !addr.ip().to_canonical().is_loopback())
    {
        Some(&addr) => Err(Exposure::AnonymousWrites { addr }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    /// Loopback addresses start without either flag. Fails if the check
    /// refuses every address (`find(|_| true)`), or drops
    /// `to_canonical()` (the mapped `::ffff:127.0.0.1`).
    #[test]
    fn loopback_starts_without_keys() {
        for text in [
            "127.0.0.1:7070",
            "127.0.0.1:0",
            "127.1.2.3:80",
            "[::1]:7070",
            "[::ffff:127.0.0.1]:7070",
        ] {
            assert_eq!(
                check_exposure(&[addr(text)], false, false),
                Ok(()),
                "{text}"
            );
        }
        assert_eq!(check_exposure(&[], false, false), Ok(()), "no address");
    }

    /// Every interface and a LAN address are refused without either flag,
    /// naming the address. Fails if the check always passes (the guard
    /// removed), or counts `0.0.0.0` as loopback (`is_unspecified()`
    /// allowed), or looks only at the first address.
    #[test]
    fn other_addresses_are_refused_without_keys() {
        for text in [
            "0.0.0.0:7070",
            "[::]:7070",
            "192.168.1.10:7070",
            "10.0.0.5:0",
            "[fe80::1]:7070",
            "[::ffff:192.168.1.10]:7070",
        ] {
            assert_eq!(
                check_exposure(&[addr(text)], false, false),
                Err(Exposure::AnonymousWrites { addr: addr(text) }),
                "{text}"
            );
        }
        let both = [addr("127.0.0.1:1"), addr("0.0.0.0:2")];
        assert_eq!(
            check_exposure(&both, false, false),
            Err(Exposure::AnonymousWrites { addr: both[1] })
        );
    }

    /// `--publish-keys` or `--allow-anonymous-writes` lets any address
    /// start. Fails if either flag is ignored (the early return dropped or
    /// reduced to one of them).
    #[test]
    fn keys_or_the_flag_allow_any_address() {
        for text in ["0.0.0.0:7070", "[::]:7070", "192.168.1.10:7070"] {
            let addrs = [addr(text)];
            assert_eq!(check_exposure(&addrs, true, false), Ok(()), "{text} keys");
            assert_eq!(check_exposure(&addrs, false, true), Ok(()), "{text} flag");
            assert_eq!(check_exposure(&addrs, true, true), Ok(()), "{text} both");
        }
    }

    /// The message names the address and both flags, so whoever reads it
    /// knows both ways out. Fails if either flag's name is left out of
    /// `Display`.
    #[test]
    fn the_message_names_both_flags() {
        let message = Exposure::AnonymousWrites {
            addr: addr("0.0.0.0:7070"),
        }
        .to_string();
        for part in [
            "0.0.0.0:7070",
            "--publish-keys",
            "--allow-anonymous-writes",
            "GAPLESS_ALLOW_ANONYMOUS_WRITES",
        ] {
            assert!(message.contains(part), "{part} missing: {message}");
        }
    }
}
