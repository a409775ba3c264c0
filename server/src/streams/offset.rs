//! Durable Streams offsets: `GGGGGGGGGGGGGGGG_SSSSSSSSSSSSSSSS`, the
//! stream's generation and the seq of the last message before the
//! position, each 16 decimal digits, so offsets sort byte-wise in append
//! order.
//!
//! A generation names one incarnation of a stream's numbering: a stream
//! created at a path gets a generation larger than any earlier one there,
//! and a fork keeps its source's generations for the messages it inherits
//! (its own appends take a new one). An offset whose generation the
//! stream does not have is never taken as a position in it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(test)]
pub(crate) const PART_MAX: u64 = PART_LIMIT;

/// A position in a stream: after message `seq` of generation `generation`
/// (`seq` 0: before the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Offset {
    /// The numbering the seq belongs to.
    pub(crate) generation: u64,
    /// The ring seq of the last message before this position.
    pub(crate) seq: u64,
}

impl Offset {
    /// `0000000000000000_0000000000000000`: before everything, in every
    /// stream (the protocol's zero offset).
    pub(crate) const ZERO: Self = Self {
        generation: 0,
        seq: 0,
    };

    /// Parses the wire form: exactly two runs of 16 ASCII digits around
    /// one `_`. Anything else is `None`.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (generation, seq) = text.split_once('_')?;
        Some(Self {
            generation: part(generation)?,
            seq: part(seq)?,
        })
    }
}

fn part(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The length of an offset's wire form.
const WIRE_LEN: usize = 33;

impl Offset {
    /// The wire form's bytes, written without the formatting machinery
    /// (every answer carries an offset): each part's 16 least significant
    /// decimal digits, zero-padded, around `_`. A part past 16 digits is
    /// never handed out ([`PART_LIMIT`]).
    pub(crate) fn wire(&self) -> [u8; WIRE_LEN] {
        let mut out = [b'0'; WIRE_LEN];
        out[16] = b'_';
        for (mut value, end) in [(self.generation, 16), (self.seq, WIRE_LEN)] {
            for at in (end - 16..end).rev() {
                out[at] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        out
    }

    /// The wire form as a header value.
    pub(crate) fn header_value(&self) -> axum::http::HeaderValue {
        // Digits and `_` are always a valid header value.
        axum::http::HeaderValue::from_bytes(&self.wire())
            .unwrap_or_else(|_| axum::http::HeaderValue::from_static(""))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wire = self.wire();
        // The wire form is ASCII digits and `_`.
        f.write_str(std::str::from_utf8(&wire).map_err(|_| fmt::Error)?)
    }
}

/// Hands out generations: microseconds since the Unix epoch (16 decimal
/// digits until the year 2286), strictly increasing within the process.
/// Instances with clocks in step hand out increasing ones too, so a stream
/// created (or continued under a new epoch) later sorts after.
#[derive(Debug, Default)]
pub(crate) struct Generations {
    last: AtomicU64,
}

impl Generations {
    /// Every later generation is above `generation` (a restored stream's:
    /// a clock set back does not hand it out again).
    pub(crate) fn above(&self, generation: u64) {
        self.last.fetch_max(generation, Ordering::AcqRel);
    }

    /// A generation larger than every one this value handed out.
    pub(crate) fn next(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .clamp(1, PART_LIMIT);
        let previous = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(0);
        now.max(previous + 1)
    }
}

/// The largest value one part of an offset holds: 16 decimal digits.
const PART_LIMIT: u64 = 9_999_999_999_999_999;

/// Where a read starts, from its `offset` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// `-1` (or no parameter, or the zero offset): the stream's beginning.
    Beginning,
    /// `now`: the stream's tail at the time of the request.
    Now,
    /// A position the server handed out.
    At(Offset),
}

impl Start {
    /// Parses the parameter's value; `None` for a malformed one.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "-1" => Some(Self::Beginning),
            "now" => Some(Self::Now),
            _ => match Offset::parse(text)? {
                Offset::ZERO => Some(Self::Beginning),
                offset => Some(Self::At(offset)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Offset, Start};

    #[test]
    fn offsets_round_trip_and_sort_bytewise_in_order() {
        let offsets = [
            Offset {
                generation: 1,
                seq: 0,
            },
            Offset {
                generation: 1,
                seq: 9,
            },
            Offset {
                generation: 1,
                seq: 10,
            },
            Offset {
                generation: 2,
                seq: 3,
            },
            Offset {
                generation: super::PART_MAX,
                seq: super::PART_MAX,
            },
        ];
        for pair in offsets.windows(2) {
            let (a, b) = (pair[0].to_string(), pair[1].to_string());
            assert!(a < b, "{a} sorts before {b}");
            assert!(pair[0] < pair[1]);
        }
        for offset in offsets {
            assert_eq!(Offset::parse(&offset.to_string()), Some(offset));
        }
    }

    proptest::proptest! {
        /// The hand-written wire form is the zero-padded decimal one.
        #[test]
        fn the_wire_form_is_two_zero_padded_decimals(
            generation in 0..=super::PART_MAX,
            seq in 0..=super::PART_MAX,
        ) {
            let offset = Offset { generation, seq };
            let text = offset.to_string();
            proptest::prop_assert_eq!(&text, &format!("{generation:016}_{seq:016}"));
            let value = offset.header_value();
            proptest::prop_assert_eq!(value.to_str().ok(), Some(text.as_str()));
            proptest::prop_assert_eq!(Offset::parse(&text), Some(offset));
        }
    }

    #[test]
    fn malformed_offsets_are_refused() {
        for bad in [
            "",
            "_",
            "1_2",
            "0000000000000001_000000000000002",
            "0000000000000001_00000000000000002",
            "000000000000000a_0000000000000002",
            "+000000000000001_0000000000000002",
            "0000000000000001_0000000000000002_",
            "0000000000000001-0000000000000002",
            "0000000000000001_0000000000000002\u{0}",
            "-2",
            "NOW",
        ] {
            assert_eq!(Start::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Start::parse("-1"), Some(Start::Beginning));
        assert_eq!(Start::parse("now"), Some(Start::Now));
        assert_eq!(
            Start::parse("0000000000000000_0000000000000000"),
            Some(Start::Beginning)
        );
    }
}
