//! `counterctl usage SCOPE`, `counterctl limit get|set|clear SCOPE` and
//! `counterctl seq get|next SCOPE`: one scope's counters, its limit
//! override and its gapless sequence, through the same library the API
//! uses.

use std::fmt;

use hybrid_counter::scope_keys::ScopeKeys;
use hybrid_counter::{Counter, CounterConfig, RequestStore, Scope, Usage};
use hybrid_counter_aws::DynamoStore;
use serde::Serialize;

use super::Context;
use super::deployed::counter_config;
use crate::config::{LimitAction, SeqAction};
use crate::error::{Error, Result, during, invalid};

#[derive(Debug, Clone, Serialize)]
pub struct UsageReport {
    pub scope: String,
    #[serde(flatten)]
    pub usage: Usage,
    /// Whether the limit comes from the scope's override (else the default):
    /// any copy of it, with the scope spread over several keys.
    pub overridden: bool,
    /// Partition keys the scope is spread over (`ScopeKeyShards`), each
    /// read and summed.
    pub keys: u32,
    /// The override's copies differ between keys (some missing, or other
    /// limits): `limit` is then the largest a key reads, what admission is
    /// bounded by, as `limit get` reports it.
    pub copies_disagree: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LimitReport {
    pub scope: String,
    /// The override (the default when there is none). When its copies
    /// disagree, the largest limit a key reads: what admission is bounded
    /// by.
    pub limit: u64,
    pub overridden: bool,
    pub default_limit: u64,
    pub changed: bool,
    /// With the scope over several keys: each key's copy of the override,
    /// in key order (`None`: that key has none and reads the default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<Option<u64>>,
    /// The copies differ (some missing, or other limits).
    pub copies_disagree: bool,
    /// With the scope over several keys: what each key admits against and
    /// holds, in key order (`docs/admission-and-sharding.md`, limit shares).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<KeyShare>,
    /// The copies' disagreement and what the shares say about admission
    /// ([`LimitReport::share_warnings`]), each with its remedy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// One counters key's share of the scope's limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyShare {
    /// What its creates admit against.
    pub share: u64,
    /// Assigned by the override's own write ([`hybrid_counter::shares`]);
    /// else the even split of the limit the key reads.
    pub assigned: bool,
    /// The larger of its EC and its best-effort items, each from 0: what
    /// `limit set` assigns shares from (admission's first check sums the
    /// items as they are, a shard below 0 included).
    pub held: i64,
}

/// What `limit get` reads of each key: its copy of the override and its share.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyLimit {
    copy: Option<u64>,
    share: KeyShare,
}

impl LimitReport {
    /// The report of `scope`'s override from its `copies` (one per key).
    fn of(scope: &Scope, keys: Vec<KeyLimit>, default_limit: u64, changed: bool) -> Self {
        let copies: Vec<Option<u64>> = keys.iter().map(|k| k.copy).collect();
        let overridden = copies.iter().any(Option::is_some);
        let disagree = copies.windows(2).any(|w| w[0] != w[1]);
        let limit = copies
            .iter()
            .map(|c| c.unwrap_or(default_limit))
            .max()
            .unwrap_or(default_limit);
        Self {
            scope: scope.to_string(),
            limit,
            overridden,
            default_limit,
            changed,
            copies_disagree: disagree,
            copies: if copies.len() > 1 { copies } else { Vec::new() },
            shares: if keys.len() > 1 {
                keys.into_iter().map(|k| k.share).collect()
            } else {
                Vec::new()
            },
            warnings: Vec::new(),
        }
        .warned()
    }

    fn warned(mut self) -> Self {
        self.warnings = self.disagreement().into_iter().chain(self.share_warnings()).collect();
        self
    }

    /// The copies' disagreement, if any: admission is bounded by the
    /// largest limit a key reads.
    fn disagreement(&self) -> Option<String> {
        if !self.copies_disagree {
            return None;
        }
        let copies: Vec<String> = self
            .copies
            .iter()
            .enumerate()
            .map(|(k, c)| {
                format!(
                    "#{k}: {}",
                    c.map_or_else(|| "none (default)".to_owned(), |l| l.to_string())
                )
            })
            .collect();
        Some(format!(
            "the copies of the override on the scope's {} keys disagree ({}); each key admits its share of the \
             limit it reads, so admission is bounded by the larger, {}: run `counterctl limit set` (or `clear`) \
             again, or `counterctl limits apply`, to write every copy",
            self.copies.len(),
            copies.join(", "),
            self.limit
        ))
    }

    /// What the shares say about admission, each with its remedy: their
    /// sum below the limit (a `limit set` whose shares were only lowered),
    /// or a key full at an assigned share that `limit set` of the same
    /// limit would raise from what the keys hold now (shares assigned when
    /// they held otherwise). None for the even split of a limit without
    /// assigned shares: hash skew there refuses by design, and `limit set`
    /// would pin an override a later `DefaultLimit` change no longer reaches.
    fn share_warnings(&self) -> Vec<String> {
        if !self.shares.iter().any(|s| s.assigned) || self.copies_disagree {
            return Vec::new();
        }
        let remedy = format!(
            "`counterctl limit set {} {}` assigns the shares from what the keys hold now",
            self.scope, self.limit
        );
        let mut warnings = Vec::new();
        let sum = self.shares.iter().fold(0u64, |sum, s| sum.saturating_add(s.share));
        if sum < self.limit {
            warnings.push(format!(
                "the keys' shares add up to {sum}, below the limit {}: creates are refused below it; {remedy}",
                self.limit
            ));
        } else if sum > self.limit {
            // Some shares assigned by one write, others the even split.
            warnings.push(format!(
                "the keys' shares add up to {sum}, above the limit {}: the scope may pass it; {remedy}",
                self.limit
            ));
        }
        let held: Vec<i64> = self.shares.iter().map(|s| s.held).collect();
        let total = held
            .iter()
            .fold(0u64, |sum, &h| sum.saturating_add(u64::try_from(h).unwrap_or(0)));
        if total >= self.limit {
            return warnings;
        }
        let target = hybrid_counter::shares::shares_from(self.limit, &held);
        let full: Vec<String> = self
            .shares
            .iter()
            .zip(&target)
            .enumerate()
            .filter(|(_, (s, t))| s.held >= i64::try_from(s.share).unwrap_or(i64::MAX) && **t > s.share)
            .map(|(k, _)| format!("#{k}"))
            .collect();
        if !full.is_empty() {
            warnings.push(format!(
                "key(s) {} full at their share while the keys hold {total} of {}: creates hashed to them are \
                 refused below the limit; {remedy}",
                full.join(", "),
                self.limit
            ));
        }
        warnings
    }
}

async fn open(ctx: &Context<'_>) -> Result<(DynamoStore, CounterConfig)> {
    let config = counter_config(ctx).await?;
    Ok((DynamoStore::new(ctx.clients.dynamodb.clone(), &config), config))
}

/// Each key's copy of `scope`'s override and its share, in key order (one
/// key: the scope's own override), read with the counters (strongly
/// consistent).
async fn limit_copies<S: RequestStore>(
    store: &S,
    keys: ScopeKeys,
    scope: &Scope,
    default_limit: u64,
) -> Result<Vec<KeyLimit>> {
    let copies = keys.keys(scope).map_err(invalid)?;
    let reads = futures_util::future::try_join_all(copies.iter().map(|key| store.read_counters(key)))
        .await
        .map_err(during("reading the limit"))?;
    Ok(reads
        .iter()
        .zip(0u32..)
        .map(|(read, index)| {
            let key = hybrid_counter::shares::KeyRead::of(read, keys, index, default_limit);
            KeyLimit {
                copy: read.limit_override,
                share: KeyShare {
                    share: key.share,
                    assigned: read.limit_share.is_some(),
                    held: key.held,
                },
            }
        })
        .collect())
}

pub async fn usage(ctx: &Context<'_>, scope: &Scope) -> Result<UsageReport> {
    let (store, config) = open(ctx).await?;
    usage_of(&std::sync::Arc::new(store), &config, scope).await
}

/// BE and EC summed over the scope's keys; the limit as `limit get`
/// reports it (the largest a key reads when the copies disagree).
async fn usage_of<S: RequestStore>(
    store: &std::sync::Arc<S>,
    config: &CounterConfig,
    scope: &Scope,
) -> Result<UsageReport> {
    let default_limit = config.default_limit.unwrap_or_default();
    let copies = limit_copies(store.as_ref(), config.scope_keys, scope, default_limit).await?;
    let mut usage = Counter::configured(store.clone(), default_limit, config)
        .usage(scope)
        .await
        .map_err(during("reading the counters"))?;
    let limit = LimitReport::of(scope, copies, default_limit, false);
    usage.limit = limit.limit;
    Ok(UsageReport {
        scope: scope.to_string(),
        usage,
        overridden: limit.overridden,
        keys: config.scope_keys.count(),
        copies_disagree: limit.copies_disagree,
    })
}

pub async fn limit(ctx: &Context<'_>, scope: &Scope, action: &LimitAction) -> Result<LimitReport> {
    let (store, config) = open(ctx).await?;
    let default_limit = config.default_limit.unwrap_or_default();
    if let LimitAction::Set(limit) = action {
        store
            .set_scope_limit(config.scope_keys, scope, *limit, hybrid_counter::now_millis())
            .await
            .map_err(during("writing the limit"))?;
    }
    let copies = limit_copies(&store, config.scope_keys, scope, default_limit).await?;
    Ok(LimitReport::of(
        scope,
        copies,
        default_limit,
        matches!(action, LimitAction::Set(_)),
    ))
}

/// `seq get` and `seq next`.
#[derive(Debug, Clone, Serialize)]
pub struct SequenceReport {
    pub scope: String,
    /// `get`: the last number claimed (0: none); `next`: the number claimed.
    pub number: u64,
    /// Whether this run claimed `number`.
    pub claimed: bool,
    /// `next`: the attempts the claim took (1: no retry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

pub async fn sequence(ctx: &Context<'_>, scope: &Scope, action: &SeqAction) -> Result<SequenceReport> {
    // The sequence stays on the bare scope, whatever its keys; a scope the
    // API would refuse (a `#` on a stack spread over keys, one too long for
    // its longest key) is refused here too, so no bare partition of a
    // sequence ever looks like another scope's key.
    let (store, config) = open(ctx).await?;
    config.scope_keys.keys(scope).map_err(invalid)?;
    let sequence = hybrid_counter::Sequence::new(store);
    let report = |number: u64, attempts: Option<u32>, owner: &Option<String>| SequenceReport {
        scope: scope.to_string(),
        number,
        claimed: attempts.is_some(),
        attempts,
        owner: owner.clone(),
    };
    match action {
        SeqAction::Get => {
            let last = sequence.current(scope).await.map_err(during("reading the sequence"))?;
            Ok(report(last, None, &None))
        }
        SeqAction::Next { owner } => {
            match sequence
                .next(scope, owner.as_deref(), hybrid_counter::now_millis())
                .await
            {
                Ok(claimed) => Ok(report(claimed.number, Some(claimed.attempts), owner)),
                Err(err @ hybrid_counter::Error::SequenceContended { .. }) => {
                    Err(Error::SequenceContended(err.to_string()))
                }
                Err(err) => Err(during("claiming a sequence number")(err)),
            }
        }
    }
}

impl fmt::Display for SequenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.claimed {
            write!(f, "claimed number {} of scope {}", self.number, self.scope)?;
            if let Some(owner) = &self.owner {
                write!(f, " for {owner}")?;
            }
            match self.attempts {
                Some(n) if n > 1 => writeln!(f, " ({n} attempts)"),
                _ => writeln!(f),
            }
        } else if self.number == 0 {
            writeln!(f, "scope {} has claimed no sequence number yet", self.scope)
        } else {
            writeln!(f, "last sequence number of scope {}: {}", self.scope, self.number)
        }
    }
}

impl fmt::Display for UsageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = &self.usage;
        write!(
            f,
            "scope {}: effective {} of {} ({}); best-effort {}, eventual {}",
            self.scope,
            u.effective,
            u.limit,
            if self.overridden { "override" } else { "default limit" },
            u.best_effort,
            u.eventual
        )?;
        if self.keys > 1 {
            write!(f, " (summed over its {} keys)", self.keys)?;
        }
        if self.copies_disagree {
            write!(
                f,
                "; the override's copies disagree between keys: {} is the largest a key reads (counterctl limit get)",
                u.limit
            )?;
        }
        writeln!(f)
    }
}

impl fmt::Display for LimitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut source = if self.overridden {
            "scope override".to_owned()
        } else {
            format!("the stack default, {}", self.default_limit)
        };
        if self.copies.len() > 1 && !self.copies_disagree {
            source.push_str(&format!(", the same on each of its {} keys", self.copies.len()));
        }
        let verb = if self.changed { "is now" } else { "is" };
        writeln!(f, "limit of scope {} {verb} {} ({source})", self.scope, self.limit)?;
        if !self.shares.is_empty() {
            let shares: Vec<String> = self
                .shares
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let even = if s.assigned { "" } else { ", even split" };
                    format!("#{k}: {} (holds {}{even})", s.share, s.held)
                })
                .collect();
            writeln!(f, "shares of its keys: {}", shares.join(", "))?;
        }
        for warning in &self.warnings {
            writeln!(f, "WARNING: {warning}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hybrid_counter::memory::MemoryStore;
    use hybrid_counter::{Admission, ResourceId};

    use super::*;

    fn spread(keys: u32) -> CounterConfig {
        CounterConfig {
            resources_table: "r".into(),
            counters_table: "c".into(),
            default_limit: Some(100),
            eventual_shards: 1,
            best_effort_shards: 1,
            admission: Admission::BestEffort,
            scope_keys: ScopeKeys::new(keys).unwrap(),
        }
    }

    /// A scope `acct` over four keys holding 12 items.
    async fn twelve_items() -> (CounterConfig, Arc<MemoryStore>, Scope) {
        let config = spread(4);
        let store = Arc::new(MemoryStore::new());
        let counter = Counter::configured(store.clone(), 100, &config);
        let scope = Scope::new("acct").unwrap();
        for n in 0..12 {
            let id = ResourceId::new(format!("r-{n}")).unwrap();
            counter.create(&scope, &id, Default::default(), 1).await.unwrap();
        }
        (config, store, scope)
    }

    #[tokio::test]
    async fn usage_at_four_keys_sums_every_key_and_sees_the_override_copies() {
        let (config, store, scope) = twelve_items().await;
        for k in 0..4 {
            store.set_limit(&format!("acct#{k}"), Some(40));
        }
        let report = usage_of(&store, &config, &scope).await.unwrap();
        assert_eq!(report.usage.best_effort, 12, "every key's BE is summed");
        assert_eq!(report.usage.limit, 40);
        assert!(report.overridden);
        assert!(report.to_string().contains("summed over its 4 keys"), "{report}");
        assert!(!report.copies_disagree);
        // Review finding 5: a clear cut short after key 0 (default 100):
        // the default is what three keys read, not key 0's "override".
        store.set_limit("acct#0", None);
        let report = usage_of(&store, &config, &scope).await.unwrap();
        assert_eq!((report.usage.limit, report.copies_disagree), (100, true));
        assert!(report.to_string().contains("copies disagree"), "{report}");
        // A set cut short after key 0: admission is bounded by the default
        // the other keys read, not key 0's 40.
        for k in 0..4 {
            store.set_limit(&format!("acct#{k}"), None);
        }
        store.set_limit("acct#0", Some(40));
        let report = usage_of(&store, &config, &scope).await.unwrap();
        assert_eq!((report.usage.limit, report.copies_disagree), (100, true));
    }

    #[tokio::test]
    async fn limit_get_at_four_keys_reads_every_copy_and_says_when_they_disagree() {
        let config = spread(4);
        let store = MemoryStore::new();
        let scope = Scope::new("acct").unwrap();
        for k in 0..4 {
            store.set_limit(&format!("acct#{k}"), Some(40));
        }
        let copies = limit_copies(&store, config.scope_keys, &scope, 100).await.unwrap();
        let agreed = LimitReport::of(&scope, copies, 100, false);
        assert_eq!(
            (agreed.limit, agreed.overridden, agreed.copies_disagree),
            (40, true, false)
        );
        assert!(
            agreed.to_string().contains("the same on each of its 4 keys"),
            "{agreed}"
        );

        // A write that stopped half way: key 3 still has the old limit, key 2 none.
        store.set_limit("acct#2", None);
        store.set_limit("acct#3", Some(90));
        let copies = limit_copies(&store, config.scope_keys, &scope, 100).await.unwrap();
        assert_eq!(
            copies.iter().map(|k| k.copy).collect::<Vec<_>>(),
            [Some(40), Some(40), None, Some(90)]
        );
        let split = LimitReport::of(&scope, copies, 100, false);
        assert!(split.copies_disagree);
        assert_eq!(
            split.limit, 100,
            "the key without a copy reads the default, the largest"
        );
        let text = split.to_string();
        assert!(
            text.contains("disagree (#0: 40, #1: 40, #2: none (default), #3: 90)"),
            "{text}"
        );
        assert!(text.contains("bounded by the larger, 100"), "{text}");
        assert!(
            split.warnings.len() == 1 && split.warnings[0].contains("disagree"),
            "the JSON report carries it too: {:?}",
            split.warnings
        );
    }

    #[tokio::test]
    async fn limit_get_shows_each_keys_assigned_share_and_what_it_holds() {
        let (config, store, scope) = twelve_items().await;
        store
            .set_scope_limit(config.scope_keys, &scope, Some(40), 100)
            .await
            .unwrap();
        let keys = limit_copies(store.as_ref(), config.scope_keys, &scope, 100)
            .await
            .unwrap();
        let report = LimitReport::of(&scope, keys, 100, false);
        assert_eq!(report.shares.iter().map(|s| s.share).sum::<u64>(), 40);
        assert!(report.shares.iter().all(|s| s.assigned), "{report}");
        assert_eq!(report.shares.iter().map(|s| s.held).sum::<i64>(), 12);
        assert!(report.to_string().contains("shares of its keys: #0: "), "{report}");
        assert!(!report.to_string().contains("WARNING"), "{report}");
    }

    /// Four keys' reads of a limit of 40: copies of it with these shares,
    /// each key holding `held`.
    fn keys_of_40(shares: [u64; 4], held: [i64; 4]) -> Vec<KeyLimit> {
        shares
            .iter()
            .zip(held)
            .map(|(&share, held)| KeyLimit {
                copy: Some(40),
                share: KeyShare {
                    share,
                    assigned: true,
                    held,
                },
            })
            .collect()
    }

    #[test]
    fn limit_get_warns_when_shares_refuse_creates_below_the_limit() {
        let scope = Scope::new("acct").unwrap();
        // Assigned when key 0 held 25 and the others nothing: once key 0
        // drained to 0 and key 1 filled its 5, key 1 is full while the
        // keys hold 5 of 40, and limit set would give it 10.
        let skewed = LimitReport::of(&scope, keys_of_40([25, 5, 5, 5], [0, 5, 0, 0]), 100, false);
        let text = skewed.to_string();
        assert!(
            text.contains("key(s) #1 full at their share while the keys hold 5 of 40"),
            "{text}"
        );
        assert!(text.contains("`counterctl limit set acct 40`"), "{text}");
        assert_eq!(skewed.warnings.len(), 1, "in the JSON report too");
        // Right after that limit set (key 0 holding 25): key 0 is at its
        // share, but limit set would give it no more: no warning.
        let assigned = LimitReport::of(&scope, keys_of_40([25, 5, 5, 5], [25, 0, 0, 0]), 100, false);
        assert!(assigned.warnings.is_empty(), "{assigned}");
        // At or above the limit (a window's excess): nothing is refused
        // below it, whatever a key's target (re-review, finding 1).
        let over = LimitReport::of(&scope, keys_of_40([5, 25, 5, 5], [8, 27, 5, 5]), 100, false);
        assert!(over.warnings.is_empty(), "{over}");
        let at = LimitReport::of(&scope, keys_of_40([10, 10, 10, 10], [12, 10, 10, 8]), 100, false);
        assert!(at.warnings.is_empty(), "{at}");
        // The even split, no share assigned: skew there is by design.
        let mut even = keys_of_40([10, 10, 10, 10], [10, 0, 0, 0]);
        even.iter_mut().for_each(|k| k.share.assigned = false);
        assert!(LimitReport::of(&scope, even, 100, false).warnings.is_empty());
        // A limit set whose shares were only lowered.
        let lowered = LimitReport::of(&scope, keys_of_40([5, 5, 5, 5], [0, 0, 0, 0]), 100, false);
        assert!(
            lowered.to_string().contains("add up to 20, below the limit 40"),
            "{lowered}"
        );
        // Shares that fit: no warning, even with a key full when the scope is.
        let full = LimitReport::of(&scope, keys_of_40([25, 5, 5, 5], [25, 5, 5, 5]), 100, false);
        assert!(!full.to_string().contains("WARNING"), "{full}");
    }

    fn report(number: u64, attempts: Option<u32>, owner: Option<&str>) -> SequenceReport {
        SequenceReport {
            scope: "tenant-a".into(),
            number,
            claimed: attempts.is_some(),
            attempts,
            owner: owner.map(str::to_owned),
        }
    }

    #[test]
    fn a_sequence_report_says_what_was_read_or_claimed() {
        assert_eq!(
            report(0, None, None).to_string(),
            "scope tenant-a has claimed no sequence number yet\n"
        );
        assert_eq!(
            report(41, None, None).to_string(),
            "last sequence number of scope tenant-a: 41\n"
        );
        assert_eq!(
            report(42, Some(1), None).to_string(),
            "claimed number 42 of scope tenant-a\n"
        );
        assert_eq!(
            report(42, Some(3), Some("invoice-7")).to_string(),
            "claimed number 42 of scope tenant-a for invoice-7 (3 attempts)\n"
        );
        assert_eq!(
            serde_json::to_value(report(42, Some(3), Some("invoice-7"))).unwrap(),
            serde_json::json!({"scope": "tenant-a", "number": 42, "claimed": true, "attempts": 3, "owner": "invoice-7"})
        );
        assert_eq!(
            serde_json::to_value(report(0, None, None)).unwrap(),
            serde_json::json!({"scope": "tenant-a", "number": 0, "claimed": false})
        );
    }
}
