//! How streams in the shared history are admitted: a place in two
//! admission sets of the history (every stream's, and its creating
//! client's), taken by a create, renewed by use, given back with the
//! stream ([`super::shared::Admission`] holds the bounds).

use super::registry::CreateRefusal;
use super::shared::{create_unavailable, log_of, SharedStreams};
use crate::history::{Admission as Admitted, History, HistoryError};

/// The admission set of every stream.
const ALL_STREAMS: &str = "durable-streams";

/// The admission set of `client`'s streams.
fn client_set(client: &str) -> String {
    format!("durable-streams/{client}")
}

impl<H: History> SharedStreams<H> {
    /// How often a stream's places are renewed, at most.
    pub(super) fn renew_every_ms(&self) -> u64 {
        u64::try_from(self.admission.ttl.as_millis() / 5).unwrap_or(u64::MAX)
    }

    /// Takes the new stream at `path` a place in all and in `client`'s
    /// set: `Ok(added)`, what this call added (a place the same stream
    /// already held is not added again, nor given back on failure).
    pub(super) async fn admit(
        &self,
        path: &str,
        client: Option<&str>,
    ) -> Result<(bool, bool), CreateRefusal> {
        let member = log_of(path).to_string();
        let ttl = self.admission.ttl;
        let down = |error: HistoryError| create_unavailable(&error);
        let all = match self
            .history
            .admit(ALL_STREAMS, &member, self.admission.total, ttl)
            .await
            .map_err(down)?
        {
            Admitted::Admitted { added } => added,
            Admitted::Full { .. } => return Err(CreateRefusal::TooManyStreams),
        };
        let Some(client) = client else {
            return Ok((all, false));
        };
        match self
            .history
            .admit(&client_set(client), &member, self.admission.per_client, ttl)
            .await
        {
            Ok(Admitted::Admitted { added }) => Ok((all, added)),
            Ok(Admitted::Full { .. }) => {
                self.give_back(path, None, (all, false)).await;
                Err(CreateRefusal::TooManyStreamsForClient)
            }
            Err(error) => {
                self.give_back(path, None, (all, false)).await;
                Err(down(error))
            }
        }
    }

    /// Gives back the places `added` says were taken for `path`.
    pub(super) async fn give_back(&self, path: &str, client: Option<&str>, added: (bool, bool)) {
        let member = log_of(path).to_string();
        if added.0 {
            if let Err(error) = self.history.release(ALL_STREAMS, &member).await {
                tracing::warn!(%error, "giving back a stream's place");
            }
        }
        if let (true, Some(client)) = (added.1, client) {
            if let Err(error) = self.history.release(&client_set(client), &member).await {
                tracing::warn!(%error, "giving back a stream's place");
            }
        }
    }

    /// Renews the places of the stream at `path` (created by `client`).
    pub(super) async fn renew_places(&self, path: &str, client: Option<&str>) {
        let member = log_of(path).to_string();
        let ttl = self.admission.ttl;
        if let Err(error) = self.history.renew(ALL_STREAMS, &member, ttl).await {
            tracing::debug!(%error, "renewing a stream's place");
        }
        if let Some(client) = client {
            if let Err(error) = self.history.renew(&client_set(client), &member, ttl).await {
                tracing::debug!(%error, "renewing a stream's place");
            }
        }
    }
}
