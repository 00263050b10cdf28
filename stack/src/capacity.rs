//! How much the two tables serve, and who makes them hot: warm throughput
//! and the on-demand maximum of each table, and CloudWatch Contributor
//! Insights on both. Every parameter defaults to "not set", and a
//! condition per property leaves the property out of the table then, so a
//! stack deployed with the defaults is the table the kit always had.
//!
//! What the settings are, from AWS's pages:
//! `WarmThroughput` (read and write units per second the table serves at
//! once, <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-table-warmthroughput.html>;
//! it does not lift the per-partition limits, a hot key still throttles,
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html>),
//! `OnDemandThroughput` (`MaxReadRequestUnits`/`MaxWriteRequestUnits`, at
//! least 1; DynamoDB's -1, which removes a maximum, is below the
//! property's minimum, so the template never passes it,
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-dynamodb-table-ondemandthroughput.html>)
//! and `ContributorInsightsSpecification` with `Mode: THROTTLED_KEYS`
//! (only throttled requests are ranked,
//! <https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-dynamodb-table-contributorinsightsspecification.html>).
//! A throttled request names which limit it met
//! ([`hybrid_counter::throttle::ThrottleReason`]), so an operator knows
//! which of these settings, if any, helps.

use crate::expr::{Expr, OnlyIf};
use crate::params;
use crate::resources::dynamodb::{
    ContributorInsightsMode, ContributorInsightsSpecification, OnDemandThroughput, Table, WarmThroughput,
};
use crate::template::{Assertion, LiveChange, Parameter, ParameterRule, Template};

/// `ContributorInsights` value that leaves it off (not `off`, which a
/// YAML 1.1 reader takes for a boolean).
pub const INSIGHTS_OFF: &str = "disabled";
/// `ContributorInsights` value that ranks the keys of throttled requests.
pub const INSIGHTS_THROTTLED_KEYS: &str = "throttled-keys";
/// Condition: `ContributorInsights` is `throttled-keys`.
pub const INSIGHTS_ON: &str = "ContributorInsightsOn";

/// The highest value the unit parameters accept: far above any account's
/// per-table quota (40,000 units by default), below what a Number holds.
const MAX_UNITS: i64 = 1_000_000_000;

/// The lowest warm throughput DynamoDB takes for an on-demand table, and
/// the pattern a warm-throughput parameter (a String: a Number parameter
/// cannot say "0 or at least N") is held to. A new on-demand table starts
/// at 12,000 read and 4,000 write units per second
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html>)
/// and warm throughput cannot be lowered
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput.html>),
/// so anything from 1 to the floor would fail the update and roll it back.
#[derive(Debug, Clone, Copy)]
pub struct WarmFloor {
    pub units: i64,
    /// `0`, or a whole number from `units` up to 10 digits.
    pub pattern: &'static str,
    pub constraint: &'static str,
}

impl WarmFloor {
    pub const READ: WarmFloor = WarmFloor {
        units: 12_000,
        pattern: "^(0|1[2-9][0-9]{3}|[2-9][0-9]{4}|[1-9][0-9]{5,9})$",
        constraint: "0 (not set), or a whole number of at least 12000 (a new on-demand table's warm read throughput)",
    };
    pub const WRITE: WarmFloor = WarmFloor {
        units: 4_000,
        pattern: "^(0|[4-9][0-9]{3}|[1-9][0-9]{4,9})$",
        constraint: "0 (not set), or a whole number of at least 4000 (a new on-demand table's warm write throughput)",
    };
}

/// The capacity parameters of one table.
#[derive(Debug, Clone, Copy)]
pub struct TableCapacity {
    /// What the descriptions call it.
    pub table: &'static str,
    pub warm_read: &'static str,
    pub warm_write: &'static str,
    pub max_read: &'static str,
    pub max_write: &'static str,
}

pub const RESOURCES: TableCapacity = TableCapacity {
    table: "resources",
    warm_read: params::RESOURCES_TABLE_WARM_READ,
    warm_write: params::RESOURCES_TABLE_WARM_WRITE,
    max_read: params::RESOURCES_TABLE_MAX_READ,
    max_write: params::RESOURCES_TABLE_MAX_WRITE,
};

pub const COUNTERS: TableCapacity = TableCapacity {
    table: "counters",
    warm_read: params::COUNTERS_TABLE_WARM_READ,
    warm_write: params::COUNTERS_TABLE_WARM_WRITE,
    max_read: params::COUNTERS_TABLE_MAX_READ,
    max_write: params::COUNTERS_TABLE_MAX_WRITE,
};

/// The condition under which `parameter` (a unit count, 0 when not set) is set.
pub fn set_condition(parameter: &str) -> String {
    format!("{parameter}Set")
}

impl TableCapacity {
    /// Condition: both warm-throughput parameters of this table are set.
    pub fn warm_condition(&self) -> String {
        format!("{}WarmThroughputSet", title(self.table))
    }

    /// Condition: either maximum of this table is set.
    pub fn max_condition(&self) -> String {
        format!("{}MaxThroughputSet", title(self.table))
    }

    fn add_parameters(&self, t: &mut Template) {
        let table = self.table;
        for (name, what, floor) in [
            (self.warm_read, "read", WarmFloor::READ),
            (self.warm_write, "write", WarmFloor::WRITE),
        ] {
            t.parameter(
                name,
                Parameter::string(&format!(
                    "Warm throughput of the {table} table: {what} units per second it serves at once, before \
                     on-demand scaling catches up. 0: not set (the table keeps what DynamoDB gave it). Otherwise \
                     at least {}: a new on-demand table starts there, and DynamoDB refuses a value below what the \
                     table already has (warm throughput only grows; `counterctl status` shows the current one), \
                     which rolls the update back. Set both the read and the write value or neither \
                     (WarmThroughput takes both). It does not lift a partition's limits: one hot scope still \
                     throttles at them.",
                    floor.units
                ))
                .default_string("0")
                .pattern(floor.pattern, floor.constraint)
                .effect(
                    &format!("WarmThroughput of the {table} table."),
                    LiveChange::Safe,
                    "The table is updated in place while it serves; DynamoDB bills the increase once. Warm \
                     throughput only grows: a value below the table's current one is refused and rolls the update \
                     back; 0 leaves the property out and takes nothing back.",
                ),
            );
        }
        for (name, what) in [(self.max_read, "read"), (self.max_write, "write")] {
            t.parameter(
                name,
                Parameter::number(
                    &format!(
                        "Most {what} request units per second the on-demand {table} table serves; requests above it \
                         are throttled with MaxOnDemandThroughputExceeded. 0: not set (no maximum by default). \
                         Setting 0 again leaves the property out of the template; to be sure a maximum set earlier \
                         is gone, remove it with `aws dynamodb update-table --on-demand-throughput` and the value -1."
                    ),
                    0,
                    0,
                    MAX_UNITS,
                )
                .effect(
                    &format!("OnDemandThroughput of the {table} table: a cost ceiling."),
                    LiveChange::Safe,
                    "The table is updated in place. A maximum below the traffic throttles it: the request path \
                     answers 503 and best-effort writes are swallowed (the stream still counts), the stream \
                     counter retries; the Throttles metric names the reason.",
                ),
            );
        }
        for name in [self.warm_read, self.warm_write, self.max_read, self.max_write] {
            t.condition(&set_condition(name), Expr::differs(name, "0"));
        }
        let set = |a: &str, b: &str| vec![Expr::condition(&set_condition(a)), Expr::condition(&set_condition(b))];
        t.condition(&self.warm_condition(), Expr::and(set(self.warm_read, self.warm_write)));
        t.condition(&self.max_condition(), Expr::or(set(self.max_read, self.max_write)));
        // WarmThroughput takes both values: one without the other is
        // refused before anything changes, not silently ignored.
        let unset = |p: &str| Expr::equals(Expr::reference(p), "0".into());
        t.rule(
            &format!("{}WarmThroughputBothOrNeither", title(table)),
            ParameterRule {
                assertions: vec![Assertion {
                    assert: Expr::or(vec![
                        Expr::and(vec![unset(self.warm_read), unset(self.warm_write)]),
                        Expr::and(vec![
                            Expr::negate(unset(self.warm_read)),
                            Expr::negate(unset(self.warm_write)),
                        ]),
                    ]),
                    assert_description: format!(
                        "Set both {} and {}, or neither: a table's warm throughput takes a read and a write value.",
                        self.warm_read, self.warm_write
                    ),
                }],
            },
        );
    }

    /// Sets the table's capacity properties, each under its condition.
    pub fn apply(&self, table: &mut Table) {
        let when_set = |name: &str| Expr::when(&set_condition(name), Expr::reference(name), Expr::no_value());
        table.warm_throughput = Some(OnlyIf::new(
            &self.warm_condition(),
            WarmThroughput {
                read_units_per_second: Expr::reference(self.warm_read),
                write_units_per_second: Expr::reference(self.warm_write),
            },
        ));
        table.on_demand_throughput = Some(OnlyIf::new(
            &self.max_condition(),
            OnDemandThroughput {
                max_read_request_units: when_set(self.max_read),
                max_write_request_units: when_set(self.max_write),
            },
        ));
        table.contributor_insights_specification = Some(OnlyIf::new(
            INSIGHTS_ON,
            ContributorInsightsSpecification {
                enabled: true,
                mode: ContributorInsightsMode::ThrottledKeys,
            },
        ));
    }
}

fn title(word: &str) -> String {
    format!("{}{}Table", word[..1].to_ascii_uppercase(), &word[1..])
}

/// Adds the capacity parameters and conditions of both tables.
pub fn add_parameters(t: &mut Template) {
    RESOURCES.add_parameters(t);
    COUNTERS.add_parameters(t);
    t.parameter(
        params::CONTRIBUTOR_INSIGHTS,
        Parameter::string(
            "CloudWatch Contributor Insights on both tables. throttled-keys: ranks the partition and sort keys of \
             throttled requests, so the hot scope behind KeyRangeThroughputExceeded throttles is named. disabled: none.",
        )
        .default_string(INSIGHTS_OFF)
        .allowed_values(&[INSIGHTS_OFF, INSIGHTS_THROTTLED_KEYS])
        .effect(
            "ContributorInsightsSpecification of both tables (Mode THROTTLED_KEYS).",
            LiveChange::Safe,
            "The tables are updated in place; ranking starts within minutes. CloudWatch bills the rules by the \
             events they see (only throttled requests in this mode).",
        ),
    );
    t.condition(
        INSIGHTS_ON,
        Expr::equals(
            Expr::reference(params::CONTRIBUTOR_INSIGHTS),
            INSIGHTS_THROTTLED_KEYS.into(),
        ),
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_capacity_property_exists_only_under_its_condition() {
        let mut table = Table::keyed("t".into(), "pk", "sk");
        RESOURCES.apply(&mut table);
        let tree = serde_json::to_value(&table).unwrap();
        let when = |p: &str| json!({"Fn::If": [format!("{p}Set"), {"Ref": p}, {"Ref": "AWS::NoValue"}]});
        assert_eq!(
            tree["WarmThroughput"],
            json!({"Fn::If": ["ResourcesTableWarmThroughputSet", {
                "ReadUnitsPerSecond": {"Ref": "ResourcesTableWarmReadUnitsPerSecond"},
                "WriteUnitsPerSecond": {"Ref": "ResourcesTableWarmWriteUnitsPerSecond"},
            }, {"Ref": "AWS::NoValue"}]})
        );
        assert_eq!(
            tree["OnDemandThroughput"]["Fn::If"][1],
            json!({
                "MaxReadRequestUnits": when("ResourcesTableMaxReadRequestUnits"),
                "MaxWriteRequestUnits": when("ResourcesTableMaxWriteRequestUnits"),
            })
        );
        assert_eq!(
            tree["ContributorInsightsSpecification"],
            json!({"Fn::If": ["ContributorInsightsOn", {"Enabled": true, "Mode": "THROTTLED_KEYS"}, {"Ref": "AWS::NoValue"}]})
        );
    }

    #[test]
    fn no_parameter_value_reads_as_a_boolean_in_yaml_1_1() {
        // CloudFormation reads YAML 1.1, where an unquoted `off` or `yes`
        // is a boolean; the generator writes such a string unquoted.
        let booleans = ["y", "n", "yes", "no", "on", "off", "true", "false"];
        let t = crate::template();
        for (name, p) in &t.parameters {
            let default = match &p.default {
                Some(crate::expr::Literal::String(s)) => vec![s.clone()],
                _ => Vec::new(),
            };
            for value in p.allowed_values.iter().chain(&default) {
                assert!(!booleans.contains(&value.to_lowercase().as_str()), "{name}: {value}");
            }
        }
    }

    #[test]
    fn unit_parameters_default_to_not_set_and_conditions_test_for_zero() {
        let mut t = Template::new("t");
        add_parameters(&mut t);
        assert_eq!(
            t.parameters[COUNTERS.warm_read].default,
            Some(crate::expr::Literal::String("0".to_owned()))
        );
        assert_eq!(
            t.parameters[COUNTERS.max_write].default,
            Some(crate::expr::Literal::Integer(0))
        );
        for name in [COUNTERS.warm_read, COUNTERS.max_write] {
            assert_eq!(
                serde_json::to_value(&t.conditions[&set_condition(name)]).unwrap(),
                json!({"Fn::Not": [{"Fn::Equals": [{"Ref": name}, "0"]}]})
            );
        }
        assert_eq!(t.parameters[COUNTERS.max_read].min_value, Some(0));
        let rule = serde_json::to_value(&t.rules["CountersTableWarmThroughputBothOrNeither"]).unwrap();
        let unset = |p: &str| json!({"Fn::Equals": [{"Ref": p}, "0"]});
        let (r, w) = (COUNTERS.warm_read, COUNTERS.warm_write);
        assert_eq!(
            rule["Assertions"][0]["Assert"],
            json!({"Fn::Or": [
                {"Fn::And": [unset(r), unset(w)]},
                {"Fn::And": [{"Fn::Not": [unset(r)]}, {"Fn::Not": [unset(w)]}]},
            ]})
        );
        assert_eq!(
            serde_json::to_value(&t.conditions["CountersTableMaxThroughputSet"]).unwrap(),
            json!({"Fn::Or": [{"Condition": "CountersTableMaxReadRequestUnitsSet"}, {"Condition": "CountersTableMaxWriteRequestUnitsSet"}]})
        );
    }

    fn accepts(floor: WarmFloor, value: &str) -> bool {
        regex::Regex::new(floor.pattern).unwrap().is_match(value)
    }

    fn compiled(floor: WarmFloor) -> regex::Regex {
        regex::Regex::new(floor.pattern).unwrap()
    }

    #[test]
    fn warm_throughput_below_a_new_on_demand_tables_is_refused_and_0_means_not_set() {
        for floor in [WarmFloor::READ, WarmFloor::WRITE] {
            assert!(accepts(floor, "0"));
            for below in [1, 10, floor.units / 2, floor.units - 1] {
                assert!(!accepts(floor, &below.to_string()), "{below} < {}", floor.units);
            }
            for at_or_above in [floor.units, floor.units + 1, 40_000, 99_999, 100_000, MAX_UNITS] {
                assert!(accepts(floor, &at_or_above.to_string()), "{at_or_above}");
            }
            for nonsense in ["", "00", "012000", "-1", "12000.5", " 12000", "1e5"] {
                assert!(!accepts(floor, nonsense), "{nonsense:?}");
            }
        }
        // Every value from 1 to the floor is refused, every one above it up to 100,000 taken.
        for floor in [WarmFloor::READ, WarmFloor::WRITE] {
            let pattern = compiled(floor);
            for units in 1..=100_000 {
                assert_eq!(pattern.is_match(&units.to_string()), units >= floor.units, "{units}");
            }
        }
    }

    #[test]
    fn the_warm_throughput_parameters_carry_the_floor_pattern() {
        let mut t = Template::new("t");
        add_parameters(&mut t);
        for table in [RESOURCES, COUNTERS] {
            assert_eq!(
                t.parameters[table.warm_read].allowed_pattern.as_deref(),
                Some(WarmFloor::READ.pattern)
            );
            assert_eq!(
                t.parameters[table.warm_write].allowed_pattern.as_deref(),
                Some(WarmFloor::WRITE.pattern)
            );
            assert_eq!(t.parameters[table.warm_read].min_value, None);
        }
    }
}
