//! [`DynamoStore`] itself: the client, the two tables' names, the meter its
//! requests are counted on and the admission mode the audit reads by. The
//! fields are `pub(super)`: each sibling file adds the methods of one
//! concern.

use aws_sdk_dynamodb::Client;

use hybrid_counter::config::{Admission, CounterConfig};
use hybrid_counter::store::meter::Meter;

/// The DynamoDB implementation of [`Store`](hybrid_counter::store::Store).
#[derive(Debug, Clone)]
pub struct DynamoStore {
    pub(super) client: Client,
    pub(super) resources_table: String,
    pub(super) counters_table: String,
    pub(super) meter: Meter,
    /// How the scopes are admitted, so the audit reads BE against the live
    /// count by the right invariant ([`hybrid_counter::audit::findings_for`]).
    pub(super) admission: Admission,
}

impl DynamoStore {
    pub fn new(client: Client, config: &CounterConfig) -> Self {
        Self {
            client,
            resources_table: config.resources_table.clone(),
            counters_table: config.counters_table.clone(),
            meter: Meter::default(),
            admission: config.admission,
        }
    }

    /// The admission mode [`hybrid_counter::audit::Auditor::audit_scope`] audits by (from the
    /// configuration by default).
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    pub fn admission(&self) -> Admission {
        self.admission
    }

    /// Counts this store's requests on `meter` (shared with other stores).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The counters table's name.
    pub fn counters_table(&self) -> &str {
        &self.counters_table
    }

    /// The cost accounting of the requests this store sent.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }
}
