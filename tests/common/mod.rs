//! What the wire-format property tests share: case counts and event IDs
//! with their edge values.

use gapless::EventId;
use proptest::prelude::*;

/// Cases for the main properties (CI requires at least 1000).
pub const CASES: u32 = 1000;
/// Cases for the cheap properties over arbitrary input.
pub const MANY_CASES: u32 = 4000;

/// Any `u64`, with extra weight on 0..=20, the 21 values up to `u64::MAX`,
/// powers of 2 and powers of 10.
fn any_u64_with_edges() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => any::<u64>(),
        1 => 0u64..=20,
        1 => (0u64..=20).prop_map(|back| u64::MAX - back),
        1 => (0u32..64).prop_map(|shift| 1u64 << shift),
        1 => (1u32..20).prop_map(|exp| 10u64.pow(exp)),
    ]
}

/// Event IDs whose epoch and seq lean to the edge values.
pub fn event_ids() -> impl Strategy<Value = EventId> {
    (any_u64_with_edges(), any_u64_with_edges()).prop_map(|(epoch, seq)| EventId { epoch, seq })
}
