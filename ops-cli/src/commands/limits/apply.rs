//! `counterctl limits apply FILE | --plan PLAN.json`: writes exactly the
//! plan, each override only if it is still what the plan read (absent for
//! an added one, the same `version` for a changed or removed one), so a
//! change made since the plan is refused and reported, never overwritten.
//! Each scope's result is logged as it completes (so an interrupted apply
//! has said what it wrote); the report lists every scope written,
//! refused, unknown and failed. A saved plan is checked before anything
//! is sent ([`LimitsPlan::check`]), and its usage and default limit are
//! read again: the file's `below_usage` is not trusted.

use std::fmt;
use std::time::Instant;

use futures_util::future::join_all;
use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter_aws::DynamoStore;
use hybrid_counter_aws::limits::{Expect, LimitWrite};
use serde::Serialize;

use super::plan::{LimitsPlan, PlannedChange};
use super::table::{CONCURRENCY, Limits};
use crate::error::{Error, Result};
use hybrid_counter::limits::diff::{Change, CopyRead, Kind};

/// How one scope's write ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Written,
    /// The override already was what the plan wanted (nothing overwritten).
    AlreadyAsPlanned,
    /// Changed since the plan; `now` is the override found (`None`: none).
    Refused {
        now: Option<u64>,
        /// With the scope over several keys: the key whose copy changed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },
    /// A send ended ambiguously and the read-back could not tell whether
    /// it landed: re-run plan to see.
    Unknown {
        error: String,
    },
    Failed {
        error: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct ScopeResult {
    pub scope: String,
    pub kind: Kind,
    pub new: Option<u64>,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Serialize)]
pub struct LimitsApplyReport {
    pub plan: LimitsPlan,
    /// Set when nothing was written because changes go below usage
    /// without `--allow-below-usage`: those scopes.
    pub refused_below_usage: Vec<String>,
    pub results: Vec<ScopeResult>,
    pub seconds: f64,
}

impl LimitsApplyReport {
    fn count(&self, pick: fn(&Outcome) -> bool) -> usize {
        self.results.iter().filter(|r| pick(&r.outcome)).count()
    }

    /// Every change landed (or already was as planned).
    pub fn succeeded(&self) -> bool {
        self.refused_below_usage.is_empty()
            && self
                .results
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Written | Outcome::AlreadyAsPlanned))
    }
}

/// What a change's write expects to find: never [`Expect::Any`].
fn expect(change: &Change) -> Expect {
    match change.version {
        None => Expect::Absent,
        Some(version) => Expect::Read {
            version,
            rev: change.rev.clone(),
        },
    }
}

/// What a write of one key's `copy` expects to find: what the plan read
/// of that copy.
fn expect_copy(copy: &CopyRead) -> Expect {
    match copy.version {
        None => Expect::Absent,
        Some(version) => Expect::Read {
            version,
            rev: copy.rev.clone(),
        },
    }
}

fn outcome_of(written: std::result::Result<LimitWrite, hybrid_counter::error::StoreError>) -> Outcome {
    match written {
        Ok(LimitWrite::Written) => Outcome::Written,
        Ok(LimitWrite::AlreadyAsPlanned) => Outcome::AlreadyAsPlanned,
        Ok(LimitWrite::Refused { current }) => Outcome::Refused {
            now: current.map(|c| c.limit),
            key: None,
        },
        Ok(LimitWrite::Unknown { error }) => Outcome::Unknown { error },
        Err(e) => Outcome::Failed { error: e.to_string() },
    }
}

/// Writes `change`: its scope's one override, or with the scope over
/// several keys every copy in one transaction, each conditioned on what the
/// plan read of it: a copy not yet as planned is written, one already so is
/// only checked, so a change since the plan to any copy refuses the scope
/// whole and nothing is written (review: written copy by copy, a plan read
/// before another writer's change left them mixed).
async fn write_change<S: LimitWriter>(store: &S, keys: ScopeKeys, change: &Change) -> Outcome {
    let scope = match hybrid_counter::Scope::new(change.scope.clone()) {
        Err(e) => return Outcome::Failed { error: e.to_string() },
        Ok(scope) => scope,
    };
    let now = hybrid_counter::now_millis();
    if change.copies.is_empty() {
        return outcome_of(store.write_limit(&scope, change.new, expect(change), now).await);
    }
    if change.copies.iter().all(|copy| copy.limit == change.new) {
        return Outcome::AlreadyAsPlanned;
    }
    let mut copies = Vec::with_capacity(change.copies.len());
    for copy in &change.copies {
        match keys.key(&scope, copy.key) {
            Err(e) => return Outcome::Failed { error: e.to_string() },
            Ok(key) => copies.push((key, expect_copy(copy), copy.limit != change.new)),
        }
    }
    match store.write_limit_copies(&copies, change.new, now).await {
        Ok((LimitWrite::Refused { current }, key)) => Outcome::Refused {
            now: current.map(|c| c.limit),
            key: key.map(|k| k.to_string()),
        },
        written => outcome_of(written.map(|(write, _)| write)),
    }
}

/// The conditioned write of one `limit` item ([`DynamoStore::write_limit`]),
/// so the copies' loop can be checked without the service.
pub(crate) trait LimitWriter {
    fn write_limit(
        &self,
        scope: &hybrid_counter::Scope,
        limit: Option<u64>,
        expect: Expect,
        now: hybrid_counter::EpochMillis,
    ) -> impl std::future::Future<Output = std::result::Result<LimitWrite, hybrid_counter::error::StoreError>>;

    /// Every copy of one scope in one transaction
    /// ([`DynamoStore::write_limit_copies`]): `(key, expected, written)`.
    fn write_limit_copies(
        &self,
        copies: &[(hybrid_counter::Scope, Expect, bool)],
        limit: Option<u64>,
        now: hybrid_counter::EpochMillis,
    ) -> impl std::future::Future<
        Output = std::result::Result<(LimitWrite, Option<hybrid_counter::Scope>), hybrid_counter::error::StoreError>,
    >;
}

impl LimitWriter for DynamoStore {
    async fn write_limit(
        &self,
        scope: &hybrid_counter::Scope,
        limit: Option<u64>,
        expect: Expect,
        now: hybrid_counter::EpochMillis,
    ) -> std::result::Result<LimitWrite, hybrid_counter::error::StoreError> {
        DynamoStore::write_limit(self, scope, limit, expect, now).await
    }

    async fn write_limit_copies(
        &self,
        copies: &[(hybrid_counter::Scope, Expect, bool)],
        limit: Option<u64>,
        now: hybrid_counter::EpochMillis,
    ) -> std::result::Result<(LimitWrite, Option<hybrid_counter::Scope>), hybrid_counter::error::StoreError> {
        DynamoStore::write_limit_copies(self, copies, limit, now).await
    }
}

impl ScopeResult {
    /// The report's line of this scope.
    fn line(&self) -> String {
        let scope = &self.scope;
        let new = self.new.map_or_else(|| "removed".to_owned(), |n| n.to_string());
        match &self.outcome {
            Outcome::Written => format!("  written  {scope}: {new}"),
            Outcome::AlreadyAsPlanned => format!("  written  {scope}: {new} (already so)"),
            Outcome::Refused { now, key } => format!(
                "  refused  {scope}: changed since the plan (now {}{}): re-run plan",
                now.map_or_else(|| "no override".to_owned(), |n| n.to_string()),
                key.as_ref().map_or_else(String::new, |k| format!(" on {k}"))
            ),
            Outcome::Unknown { error } => {
                format!("  unknown  {scope}: {new} may or may not be written ({error}): re-run plan")
            }
            Outcome::Failed { error } => format!("  failed   {scope}: {error}"),
        }
    }
}

/// Applies `plan`; `saved`: it was read from a file (`--plan`), so the
/// scopes' usage is read again and its default limit checked against the
/// stack's.
pub async fn run(
    limits: &Limits<'_>,
    mut plan: LimitsPlan,
    saved: bool,
    allow_below_usage: bool,
) -> Result<LimitsApplyReport> {
    let ctx = limits.ctx;
    if plan.stack_name != ctx.config.stack_name || plan.counters_table != limits.store.counters_table() {
        return Err(Error::InvalidArgument(format!(
            "the plan is for stack {} (table {}), not {} (table {}): plan again against this stack",
            plan.stack_name,
            plan.counters_table,
            ctx.config.stack_name,
            limits.store.counters_table()
        )));
    }
    if plan.scope_keys != limits.scope_keys.count() {
        return Err(Error::InvalidArgument(format!(
            "the plan was made with {} key(s) per scope, the stack now has {}: plan again",
            plan.scope_keys,
            limits.scope_keys.count()
        )));
    }
    if plan.default_limit.deployed != limits.default_limit {
        return Err(Error::InvalidArgument(format!(
            "the plan was made with the default limit {}, the stack now has {}: plan again",
            plan.default_limit.deployed, limits.default_limit
        )));
    }
    let started = Instant::now();
    if saved {
        super::plan::annotate_usage(limits, &mut plan.changes).await?;
    }
    let below: Vec<String> = plan.below_usage().map(|c| c.change.scope.clone()).collect();
    if !allow_below_usage && !below.is_empty() {
        return Ok(LimitsApplyReport {
            plan,
            refused_below_usage: below,
            results: Vec::new(),
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    let mut results = Vec::with_capacity(plan.changes.len());
    let bar = ctx.ui.bar(plan.changes.len() as u64, "writing the limit overrides");
    for chunk in plan.changes.chunks(CONCURRENCY) {
        let writes = chunk.iter().map(|PlannedChange { change, .. }| async {
            let outcome = write_change(&limits.store, limits.scope_keys, change).await;
            bar.inc(1);
            let result = ScopeResult {
                scope: change.scope.clone(),
                kind: change.kind,
                new: change.new,
                outcome,
            };
            ctx.ui.log(result.line());
            result
        });
        results.extend(join_all(writes).await);
    }
    drop(bar);
    Ok(LimitsApplyReport {
        plan,
        refused_below_usage: Vec::new(),
        results,
        seconds: started.elapsed().as_secs_f64(),
    })
}

impl fmt::Display for LimitsApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The plan applied, then what became of each change.
        write!(f, "{}", self.plan)?;
        if !self.refused_below_usage.is_empty() {
            writeln!(
                f,
                "Nothing written: {} change(s) set a limit below the scope's current usage; pass \
                 --allow-below-usage to apply them:",
                self.refused_below_usage.len()
            )?;
            for c in self.plan.below_usage() {
                writeln!(
                    f,
                    "  {}: {} below usage {}",
                    c.change.scope,
                    c.change.new.unwrap_or(self.plan.default_limit.deployed),
                    c.usage
                )?;
            }
            return Ok(());
        }
        let written = self.count(|o| matches!(o, Outcome::Written | Outcome::AlreadyAsPlanned));
        let refused = self.count(|o| matches!(o, Outcome::Refused { .. }));
        let unknown = self.count(|o| matches!(o, Outcome::Unknown { .. }));
        let failed = self.count(|o| matches!(o, Outcome::Failed { .. }));
        writeln!(
            f,
            "Limits of stack {}: {written} written, {refused} refused, {unknown} unknown, {failed} failed, of {} \
             change(s) ({:.1} s)",
            self.plan.stack_name,
            self.results.len(),
            self.seconds
        )?;
        for r in &self.results {
            writeln!(f, "{}", r.line())?;
        }
        if self.plan.default_limit.differs() {
            writeln!(
                f,
                "Default limit not changed (apply never changes the stack): run `counterctl deploy --param {}={}`",
                stack::params::DEFAULT_LIMIT,
                self.plan.default_limit.file.unwrap_or_default()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hybrid_counter::limits::diff::DefaultLimit;

    fn change(scope: &str, kind: Kind, version: Option<u64>) -> Change {
        Change {
            scope: scope.into(),
            kind,
            old: version.map(|_| 1),
            new: (kind != Kind::Removed).then_some(9),
            version,
            rev: version.map(|v| format!("r{v}")),
            prefix: None,
            copies: Vec::new(),
        }
    }

    #[test]
    fn an_added_override_expects_none_and_a_changed_or_removed_one_its_read_version() {
        assert_eq!(expect(&change("a", Kind::Added, None)), Expect::Absent);
        let read = |version: u64| Expect::Read {
            version,
            rev: Some(format!("r{version}")),
        };
        assert_eq!(expect(&change("a", Kind::Changed, Some(4))), read(4));
        assert_eq!(expect(&change("a", Kind::Removed, Some(7))), read(7));
    }

    /// Answers a scope's copies in one transaction, refused at
    /// `refuse` when it names one, and records what it was asked.
    #[derive(Default)]
    struct Writes {
        asked: std::sync::Mutex<Vec<Vec<(String, Expect, bool)>>>,
        refuse: Option<&'static str>,
    }

    impl LimitWriter for Writes {
        async fn write_limit(
            &self,
            _scope: &hybrid_counter::Scope,
            _limit: Option<u64>,
            _expect: Expect,
            _now: hybrid_counter::EpochMillis,
        ) -> std::result::Result<LimitWrite, hybrid_counter::error::StoreError> {
            panic!("a scope over several keys is written in one transaction")
        }

        async fn write_limit_copies(
            &self,
            copies: &[(hybrid_counter::Scope, Expect, bool)],
            _limit: Option<u64>,
            _now: hybrid_counter::EpochMillis,
        ) -> std::result::Result<(LimitWrite, Option<hybrid_counter::Scope>), hybrid_counter::error::StoreError>
        {
            self.asked
                .lock()
                .unwrap()
                .push(copies.iter().map(|(k, e, w)| (k.to_string(), e.clone(), *w)).collect());
            Ok(match copies.iter().find(|(k, _, _)| Some(k.as_str()) == self.refuse) {
                Some((key, _, _)) => (
                    LimitWrite::Refused {
                        current: Some(hybrid_counter::limits::LimitItem {
                            limit: 7,
                            version: 9,
                            rev: None,
                        }),
                    },
                    Some(key.clone()),
                ),
                None => (LimitWrite::Written, None),
            })
        }
    }

    fn copy(key: u32, limit: Option<u64>) -> CopyRead {
        CopyRead {
            key,
            limit,
            version: limit.map(|_| u64::from(key) + 1),
            rev: limit.map(|_| format!("r{key}")),
        }
    }

    /// Review of issue 38 item 4 (finding 2): every copy goes in one
    /// transaction, those already as planned checked against the plan's
    /// read, so a change since the plan to any of them refuses the scope
    /// whole instead of leaving the copies mixed.
    #[tokio::test]
    async fn over_four_keys_apply_writes_every_copy_in_one_transaction_conditioned_on_its_read() {
        let keys = ScopeKeys::new(4).unwrap();
        let read = |version: u64, rev: &str| Expect::Read {
            version,
            rev: Some(rev.into()),
        };
        let mut repair = change("acct", Kind::Changed, None);
        repair.old = Some(20);
        repair.new = Some(20);
        repair.copies = vec![copy(0, Some(20)), copy(1, Some(15)), copy(2, None), copy(3, Some(20))];
        let store = Writes::default();
        assert_eq!(write_change(&store, keys, &repair).await, Outcome::Written);
        assert_eq!(
            *store.asked.lock().unwrap(),
            [vec![
                ("acct#0".to_owned(), read(1, "r0"), false),
                ("acct#1".to_owned(), read(2, "r1"), true),
                ("acct#2".to_owned(), Expect::Absent, true),
                ("acct#3".to_owned(), read(4, "r3"), false),
            ]],
            "one transaction: the copies to write and the others checked"
        );

        // A refused copy refuses the scope, naming what the plan read there.
        let mut removal = change("acct", Kind::Removed, None);
        removal.old = Some(20);
        removal.copies = vec![copy(0, Some(20)), copy(1, None), copy(2, Some(20)), copy(3, Some(20))];
        let store = Writes {
            refuse: Some("acct#2"),
            ..Writes::default()
        };
        assert_eq!(
            write_change(&store, keys, &removal).await,
            Outcome::Refused {
                now: Some(7),
                key: Some("acct#2".into())
            }
        );
        assert_eq!(store.asked.lock().unwrap().len(), 1);

        // Every copy already as planned: nothing is sent.
        let mut done = change("acct", Kind::Changed, None);
        done.copies = (0..4).map(|k| copy(k, Some(9))).collect();
        let store = Writes::default();
        assert_eq!(write_change(&store, keys, &done).await, Outcome::AlreadyAsPlanned);
        assert!(store.asked.lock().unwrap().is_empty());
    }

    #[test]
    fn the_summary_names_each_scope_written_refused_and_failed() {
        let result = |scope: &str, outcome| ScopeResult {
            scope: scope.into(),
            kind: Kind::Changed,
            new: Some(9),
            outcome,
        };
        let report = LimitsApplyReport {
            plan: LimitsPlan {
                stack_name: "hck".into(),
                counters_table: "t".into(),
                default_limit: DefaultLimit {
                    deployed: 100,
                    file: None,
                },
                changes: Vec::new(),
                overrides: 3,
                prefixed_scopes: 0,
                scope_keys: 1,
                unread: Vec::new(),
            },
            refused_below_usage: Vec::new(),
            results: vec![
                result("a", Outcome::Written),
                result(
                    "b",
                    Outcome::Refused {
                        now: Some(3),
                        key: None,
                    },
                ),
                result("c", Outcome::Failed { error: "boom".into() }),
                result("d", Outcome::Unknown { error: "500".into() }),
            ],
            seconds: 0.25,
        };
        let text = report.to_string();
        assert!(
            text.contains("1 written, 1 refused, 1 unknown, 1 failed, of 4 change(s)"),
            "{text}"
        );
        assert!(text.contains("  written  a: 9"), "{text}");
        assert!(
            text.contains("  refused  b: changed since the plan (now 3): re-run plan"),
            "{text}"
        );
        assert!(text.contains("  failed   c: boom"), "{text}");
        assert!(
            text.contains("  unknown  d: 9 may or may not be written (500): re-run plan"),
            "{text}"
        );
        assert!(!report.succeeded());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["results"][1]["outcome"], "refused");
        assert_eq!(json["results"][1]["now"], 3);
    }
}
