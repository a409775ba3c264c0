//! What a stream is charged: the same bytes of the server's memory budget
//! and of its creating client's share of it, taken together or not at
//! all, given back together on drop.

use crate::admission::{Bounded, ClientShare, ClientShares, Held};
use crate::client_addr::ClientKey;
use std::sync::Arc;

/// A share of the memory budget, and the same bytes of the creating
/// client's share of it: given back on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    _budget: Held,
    _client: Option<ClientShare>,
}

/// Why a [`Charge`] was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChargeRefusal {
    /// Past the server's memory budget (`503`).
    Budget,
    /// Past the creating client's share of it (`429`).
    ClientShare,
}

/// The creating client's share of the budget that a stream charges.
#[derive(Clone, Debug)]
pub(crate) struct ClientCharge {
    pub(crate) shares: Arc<ClientShares>,
    pub(crate) client: ClientKey,
}

/// `amount` of `budget`, and of `client`'s share when the stream has one.
pub(crate) fn take_charge(
    budget: &Arc<Bounded>,
    client: Option<&ClientCharge>,
    amount: u64,
) -> Result<Charge, ChargeRefusal> {
    let held = budget.take(amount).ok_or(ChargeRefusal::Budget)?;
    let client = match client {
        Some(charge) => Some(
            charge
                .shares
                .take(charge.client, amount)
                .ok_or(ChargeRefusal::ClientShare)?,
        ),
        None => None,
    };
    Ok(Charge {
        _budget: held,
        _client: client,
    })
}
