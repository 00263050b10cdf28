//! Global-table replicas of the stack's two tables, and what they serve:
//! warm throughput, on-demand maximum and Contributor Insights (the
//! capacity parameters, `stack::capacity`). The kit counts
//! correctly in one region only (`docs/multi-region.md`): on a global table
//! every replica's stream carries the other regions' writes, last-writer-wins
//! can overwrite an item's `counter_processed` or `deleted`, and a
//! transaction is atomic only where it ran. `status` lists a table with
//! replicas as needing attention and `deploy` refuses to update a stack
//! whose tables have replicas unless told to ([`guard`]). One
//! `DescribeTable` per table, and for `status` one
//! `DescribeContributorInsights` ([`read_contributor_insights`]); nothing
//! is written.

use std::collections::BTreeMap;

use serde::Serialize;

use aws_sdk_dynamodb::types::ContributorInsightsStatus;

use crate::error::{self, Error, Result};

/// The stack's tables: what each is for, and the output naming it.
const TABLES: [(&str, &str); 2] = [
    ("resources", stack::outputs::RESOURCES_TABLE),
    ("counters", stack::outputs::COUNTERS_TABLE),
];

/// One table and the regions of its replicas (empty: a single-region table).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableReplicas {
    /// `resources` or `counters`.
    pub role: String,
    pub table: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replica_regions: Vec<String>,
    /// Units per second the table serves at once (`WarmThroughput`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_throughput: Option<Units>,
    /// The on-demand table's maximum (`OnDemandThroughput`); `None`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_throughput: Option<Units>,
    /// Contributor Insights: its mode when enabled (`THROTTLED_KEYS`),
    /// else its status (`DISABLED`), or why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contributor_insights: Option<String>,
    /// Why the table could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Read and write units per second; `None` where not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Units {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write: Option<i64>,
}

impl Units {
    /// The positive values of a pair DynamoDB reports (`-1` or nothing:
    /// not set); `None` when neither is.
    fn positive(read: Option<i64>, write: Option<i64>) -> Option<Self> {
        let units = Self {
            read: read.filter(|n| *n > 0),
            write: write.filter(|n| *n > 0),
        };
        (units != Self::default()).then_some(units)
    }
}

impl std::fmt::Display for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |n: Option<i64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        write!(f, "{} read / {} write", side(self.read), side(self.write))
    }
}

impl TableReplicas {
    /// Warm throughput, maximum and Contributor Insights, in words.
    pub fn capacity(&self) -> String {
        format!(
            "warm throughput {}  maximum {}  contributor insights {}",
            self.warm_throughput.map_or_else(|| "-".to_owned(), |w| w.to_string()),
            self.max_throughput.map_or_else(|| "none".to_owned(), |m| m.to_string()),
            self.contributor_insights.as_deref().unwrap_or("-")
        )
    }

    pub fn replicated(&self) -> bool {
        !self.replica_regions.is_empty()
    }

    fn summary(&self) -> String {
        format!(
            "table {} ({}) is a global table with replicas in {}",
            self.table,
            self.role,
            self.replica_regions.join(", ")
        )
    }
}

/// The replicas of each table the stack's `outputs` name, in the order
/// resources, counters. A table that cannot be read is reported with the
/// reason, not as an error.
pub async fn read(dynamodb: &aws_sdk_dynamodb::Client, outputs: &BTreeMap<String, String>) -> Vec<TableReplicas> {
    let mut tables = Vec::new();
    for (role, output) in TABLES {
        let Some(table) = outputs.get(output) else {
            continue;
        };
        let mut found = TableReplicas {
            role: role.to_owned(),
            table: table.clone(),
            ..TableReplicas::default()
        };
        match dynamodb.describe_table().table_name(table).send().await {
            Ok(described) => {
                if let Some(t) = described.table() {
                    found.replica_regions = t
                        .replicas()
                        .iter()
                        .filter_map(|r| r.region_name().map(str::to_owned))
                        .collect();
                    found.warm_throughput = t
                        .warm_throughput()
                        .and_then(|w| Units::positive(w.read_units_per_second(), w.write_units_per_second()));
                    found.max_throughput = t
                        .on_demand_throughput()
                        .and_then(|m| Units::positive(m.max_read_request_units(), m.max_write_request_units()));
                }
            }
            Err(err) => found.problem = Some(error::aws("DescribeTable")(err).to_string()),
        }
        tables.push(found);
    }
    tables
}

/// Fills in each readable table's Contributor Insights. One that cannot
/// be read says why in its place: `status` still reports the rest.
pub async fn read_contributor_insights(dynamodb: &aws_sdk_dynamodb::Client, tables: &mut [TableReplicas]) {
    for t in tables.iter_mut().filter(|t| t.problem.is_none()) {
        let insights = match dynamodb
            .describe_contributor_insights()
            .table_name(&t.table)
            .send()
            .await
        {
            Ok(d) => match (d.contributor_insights_status(), d.contributor_insights_mode()) {
                (Some(ContributorInsightsStatus::Enabled), Some(mode)) => mode.as_str().to_owned(),
                (Some(status), _) => status.as_str().to_owned(),
                (None, _) => "unknown".to_owned(),
            },
            Err(err) => format!("not read: {}", error::aws("DescribeContributorInsights")(err)),
        };
        t.contributor_insights = Some(insights);
    }
}

/// What `status` lists under "Needs attention".
pub fn attention(tables: &[TableReplicas]) -> Vec<String> {
    tables
        .iter()
        .filter_map(|t| match &t.problem {
            Some(problem) => Some(format!("table {} ({}): {problem}", t.table, t.role)),
            None if t.replicated() => Some(format!(
                "{}: the kit counts correctly in one region only; remove the replicas (docs/multi-region.md)",
                t.summary()
            )),
            None => None,
        })
        .collect()
}

/// Whether a deploy may update a stack with these tables: an error when a
/// table has replicas and `allow` is false, else the warnings to print
/// (one per replicated table).
pub fn guard(tables: &[TableReplicas], allow: bool) -> Result<Vec<String>> {
    let replicated: Vec<String> = tables
        .iter()
        .filter(|t| t.replicated())
        .map(TableReplicas::summary)
        .collect();
    if replicated.is_empty() {
        return Ok(Vec::new());
    }
    if !allow {
        return Err(Error::ReplicatedTables {
            tables: replicated.join("; "),
        });
    }
    Ok(replicated
        .into_iter()
        .map(|t| format!("{t}: deploying anyway (--allow-replicas); its counters cannot be trusted"))
        .collect())
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput;
    use aws_sdk_dynamodb::types::{ReplicaDescription, TableDescription};
    use aws_smithy_mocks::{Rule, RuleMode, mock};

    use super::*;

    fn client(rules: &[Rule]) -> Client {
        aws_smithy_mocks::mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, rules)
    }

    /// `DescribeTable` of `table` answering with replicas in `regions`.
    fn described(table: &'static str, regions: &'static [&'static str]) -> Rule {
        mock!(Client::describe_table)
            .match_requests(move |r| r.table_name() == Some(table))
            .then_output(move || {
                let mut description = TableDescription::builder().table_name(table);
                for region in regions {
                    description = description.replicas(ReplicaDescription::builder().region_name(*region).build());
                }
                DescribeTableOutput::builder().table(description.build()).build()
            })
    }

    fn outputs() -> BTreeMap<String, String> {
        BTreeMap::from([
            (stack::outputs::RESOURCES_TABLE.to_owned(), "hc-resources".to_owned()),
            (stack::outputs::COUNTERS_TABLE.to_owned(), "hc-counters".to_owned()),
        ])
    }

    #[tokio::test]
    async fn single_region_tables_need_nothing_and_deploy_goes_ahead() {
        let dynamodb = client(&[described("hc-resources", &[]), described("hc-counters", &[])]);
        let tables = read(&dynamodb, &outputs()).await;
        assert_eq!(tables.len(), 2);
        assert!(
            tables.iter().all(|t| !t.replicated() && t.problem.is_none()),
            "{tables:?}"
        );
        assert!(attention(&tables).is_empty());
        assert_eq!(guard(&tables, false).unwrap(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn status_flags_a_table_with_replicas() {
        let dynamodb = client(&[
            described("hc-resources", &["us-east-1", "eu-west-1"]),
            described("hc-counters", &[]),
        ]);
        let tables = read(&dynamodb, &outputs()).await;
        let items = attention(&tables);
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(
            items[0]
                .starts_with("table hc-resources (resources) is a global table with replicas in us-east-1, eu-west-1"),
            "{}",
            items[0]
        );
        assert!(items[0].contains("docs/multi-region.md"), "{}", items[0]);
    }

    #[tokio::test]
    async fn deploy_refuses_replicated_tables_unless_allowed_and_then_warns() {
        let replicated = || client(&[described("hc-resources", &[]), described("hc-counters", &["eu-west-1"])]);
        let tables = read(&replicated(), &outputs()).await;
        let err = guard(&tables, false).unwrap_err();
        assert!(matches!(err, Error::ReplicatedTables { .. }), "{err}");
        assert!(err.to_string().contains("hc-counters (counters)"), "{err}");
        assert!(err.to_string().contains("--allow-replicas"), "{err}");
        assert_eq!(err.exit_code(), crate::exit::USAGE);

        let tables = read(&replicated(), &outputs()).await;
        let warnings = guard(&tables, true).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("deploying anyway (--allow-replicas)"),
            "{}",
            warnings[0]
        );
    }

    #[tokio::test]
    async fn status_reads_warm_throughput_maximum_and_contributor_insights() {
        use aws_sdk_dynamodb::operation::describe_contributor_insights::{
            DescribeContributorInsightsError, DescribeContributorInsightsOutput,
        };
        use aws_sdk_dynamodb::types::{ContributorInsightsMode, OnDemandThroughput, TableWarmThroughputDescription};
        let resources = mock!(Client::describe_table)
            .match_requests(|r| r.table_name() == Some("hc-resources"))
            .then_output(|| {
                let table = TableDescription::builder()
                    .table_name("hc-resources")
                    .warm_throughput(
                        TableWarmThroughputDescription::builder()
                            .read_units_per_second(12_000)
                            .write_units_per_second(4_000)
                            .build(),
                    )
                    // -1: DynamoDB's "no maximum" for that side.
                    .on_demand_throughput(
                        OnDemandThroughput::builder()
                            .max_read_request_units(-1)
                            .max_write_request_units(8_000)
                            .build(),
                    )
                    .build();
                DescribeTableOutput::builder().table(table).build()
            });
        let insights_on = mock!(Client::describe_contributor_insights)
            .match_requests(|r| r.table_name() == Some("hc-resources"))
            .then_output(|| {
                DescribeContributorInsightsOutput::builder()
                    .contributor_insights_status(ContributorInsightsStatus::Enabled)
                    .contributor_insights_mode(ContributorInsightsMode::ThrottledKeys)
                    .build()
            });
        let insights_refused = mock!(Client::describe_contributor_insights)
            .match_requests(|r| r.table_name() == Some("hc-counters"))
            .then_error(|| {
                DescribeContributorInsightsError::generic(
                    aws_smithy_types::error::ErrorMetadata::builder()
                        .code("AccessDeniedException")
                        .message("not authorized to perform dynamodb:DescribeContributorInsights")
                        .build(),
                )
            });
        let dynamodb = client(&[resources, described("hc-counters", &[]), insights_on, insights_refused]);
        let mut tables = read(&dynamodb, &outputs()).await;
        read_contributor_insights(&dynamodb, &mut tables).await;
        assert_eq!(
            tables[0].warm_throughput,
            Some(Units {
                read: Some(12_000),
                write: Some(4_000)
            })
        );
        assert_eq!(
            tables[0].max_throughput,
            Some(Units {
                read: None,
                write: Some(8_000)
            })
        );
        assert_eq!(
            tables[0].capacity(),
            "warm throughput 12000 read / 4000 write  maximum - read / 8000 write  contributor insights THROTTLED_KEYS"
        );
        assert_eq!(tables[1].max_throughput, None, "no maximum reported: none");
        let counters = tables[1].capacity();
        assert!(
            counters.starts_with("warm throughput -  maximum none  contributor insights not read: "),
            "{counters}"
        );
        assert!(counters.contains("DescribeContributorInsights"), "{counters}");
        assert!(attention(&tables).is_empty(), "unread insights are shown, not flagged");
    }

    #[tokio::test]
    async fn a_table_that_cannot_be_read_is_reported_not_fatal() {
        let refused = mock!(Client::describe_table)
            .match_requests(|r| r.table_name() == Some("hc-resources"))
            .then_error(|| {
                aws_sdk_dynamodb::operation::describe_table::DescribeTableError::ResourceNotFoundException(
                    aws_sdk_dynamodb::types::error::ResourceNotFoundException::builder()
                        .message("Requested resource not found")
                        .build(),
                )
            });
        let dynamodb = client(&[refused, described("hc-counters", &[])]);
        let tables = read(&dynamodb, &outputs()).await;
        assert!(
            tables[0]
                .problem
                .as_deref()
                .is_some_and(|p| p.contains("DescribeTable")),
            "{tables:?}"
        );
        let items = attention(&tables);
        assert_eq!(items.len(), 1, "{items:?}");
        assert!(
            items[0].starts_with("table hc-resources (resources): DescribeTable failed"),
            "{}",
            items[0]
        );
        assert!(
            guard(&tables, false).unwrap().is_empty(),
            "an unreadable table does not block a deploy"
        );
    }
}
