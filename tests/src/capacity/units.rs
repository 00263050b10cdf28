//! What a request costs, by DynamoDB's unit rules ("Read/write capacity
//! mode", "Item sizes"): the items a request touches, their sizes as last
//! seen, and the units of each.
//!
//! A write costs 1 WU per KB (rounded up; an update or a put over an
//! existing item the larger of before and after), 2 inside
//! `TransactWriteItems`; a consistent read 1 RU per 4 KB, an eventually
//! consistent one half, a transactional one 2; a `Query` is charged on the
//! total size it read, rounded up once.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// Bytes per write unit, and per read unit.
const WRITE_UNIT_BYTES: usize = 1024;
const READ_UNIT_BYTES: usize = 4096;

/// Read or write: which budget a touch draws on, and its throttling reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Access {
    Read,
    Write,
}

/// A table the model limits: its name and key attributes.
#[derive(Debug, Clone)]
pub struct TableKeys {
    pub name: String,
    pub partition_key: String,
    pub sort_key: String,
}

impl TableKeys {
    pub fn new(name: &str, partition_key: &str, sort_key: &str) -> Self {
        Self {
            name: name.to_owned(),
            partition_key: partition_key.to_owned(),
            sort_key: sort_key.to_owned(),
        }
    }
}

/// An item: table, partition-key value, sort-key value.
pub(crate) type ItemId = (String, String, String);

/// One item (or, for a `Query`, one partition-key value) a request
/// touches, and what it costs there.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Touch {
    pub table: String,
    pub partition_key: String,
    /// `None`: every sort key of the partition-key value (a `Query`).
    pub sort_key: Option<String>,
    pub access: Access,
    /// Write units (known before), or the read's factor per 4 KB (charged after).
    pub units: f64,
    pub new_item: bool,
    /// A read with a projection: charged on the whole item (as last seen).
    pub projected: bool,
    /// Its action's position in a transaction.
    pub action: Option<usize>,
}

impl Touch {
    pub fn item(&self) -> Option<ItemId> {
        let sort = self.sort_key.clone()?;
        Some((self.table.clone(), self.partition_key.clone(), sort))
    }
}

/// How the request's items are held while it is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `PutItem`, `UpdateItem`, `DeleteItem`.
    Write,
    TransactWrite,
    TransactGet,
    /// Reads and batches: conflict with nothing.
    Other,
}

/// A request as the model sees it.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub kind: Kind,
    pub touches: Vec<Touch>,
    /// Actions of a transaction (the length of its cancellation reasons).
    pub actions: usize,
    pub token: Option<String>,
    /// Item sizes after the request, applied once it is admitted.
    pub sizes: Vec<(ItemId, Option<usize>)>,
}

/// Item sizes in bytes, from the writes and reads seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sizes(HashMap<ItemId, usize>);

impl Sizes {
    pub fn get(&self, id: &ItemId) -> Option<usize> {
        self.0.get(id).copied()
    }

    pub fn set(&mut self, id: ItemId, size: Option<usize>) {
        match size {
            Some(size) => self.0.insert(id, size),
            None => self.0.remove(&id),
        };
    }
}

/// Reads `request` of `operation` against the tables the model limits.
pub(crate) fn parse(operation: &str, request: &Value, tables: &HashMap<String, TableKeys>, sizes: &Sizes) -> Request {
    let mut parser = Parser {
        tables,
        sizes,
        after: Vec::new(),
    };
    let table = request["TableName"].as_str().unwrap_or_default();
    let read_factor = if request["ConsistentRead"].as_bool() == Some(true) {
        1.0
    } else {
        0.5
    };
    let mut actions = 0;
    let (kind, touches) = match operation {
        "PutItem" => (
            Kind::Write,
            parser.write(table, &request["Item"], Some(&request["Item"]), 1.0, true),
        ),
        "UpdateItem" => (
            Kind::Write,
            parser.write(
                table,
                &request["Key"],
                Some(&request["ExpressionAttributeValues"]),
                1.0,
                false,
            ),
        ),
        "DeleteItem" => (Kind::Write, parser.write(table, &request["Key"], None, 1.0, false)),
        "GetItem" => (
            Kind::Other,
            parser.read(table, &request["Key"], read_factor, is_projected(request)),
        ),
        "Query" => (Kind::Other, parser.query(table, request, read_factor)),
        "TransactWriteItems" => {
            let items = request["TransactItems"].as_array().cloned().unwrap_or_default();
            actions = items.len();
            let mut touches = Vec::new();
            for (at, action) in items.iter().enumerate() {
                let (verb, body) = action.as_object().and_then(|o| o.iter().next()).unzip();
                let body = body.cloned().unwrap_or(Value::Null);
                let table = body["TableName"].as_str().unwrap_or_default().to_owned();
                let mut touched = match verb.map(String::as_str) {
                    Some("Put") => parser.write(&table, &body["Item"], Some(&body["Item"]), 2.0, true),
                    Some("Update") => parser.write(
                        &table,
                        &body["Key"],
                        Some(&body["ExpressionAttributeValues"]),
                        2.0,
                        false,
                    ),
                    Some("Delete") => parser.write(&table, &body["Key"], None, 2.0, false),
                    Some("ConditionCheck") => parser.read(&table, &body["Key"], 2.0, true),
                    _ => Vec::new(),
                };
                touched.iter_mut().for_each(|t| t.action = Some(at));
                touches.extend(touched);
            }
            (Kind::TransactWrite, touches)
        }
        "TransactGetItems" => {
            let items = request["TransactItems"].as_array().cloned().unwrap_or_default();
            actions = items.len();
            let mut touches = Vec::new();
            for (at, action) in items.iter().enumerate() {
                let get = &action["Get"];
                let mut touched = parser.read(
                    get["TableName"].as_str().unwrap_or_default(),
                    &get["Key"],
                    2.0,
                    is_projected(get),
                );
                touched.iter_mut().for_each(|t| t.action = Some(at));
                touches.extend(touched);
            }
            (Kind::TransactGet, touches)
        }
        "BatchWriteItem" => {
            let mut touches = Vec::new();
            for (table, writes) in request["RequestItems"].as_object().into_iter().flatten() {
                for write in writes.as_array().into_iter().flatten() {
                    touches.extend(if write["PutRequest"].is_object() {
                        let item = &write["PutRequest"]["Item"];
                        parser.write(table, item, Some(item), 1.0, true)
                    } else {
                        parser.write(table, &write["DeleteRequest"]["Key"], None, 1.0, false)
                    });
                }
            }
            (Kind::Other, touches)
        }
        "BatchGetItem" => {
            let mut touches = Vec::new();
            for (table, get) in request["RequestItems"].as_object().into_iter().flatten() {
                let factor = if get["ConsistentRead"].as_bool() == Some(true) {
                    1.0
                } else {
                    0.5
                };
                for key in get["Keys"].as_array().into_iter().flatten() {
                    touches.extend(parser.read(table, key, factor, is_projected(get)));
                }
            }
            (Kind::Other, touches)
        }
        _ => (Kind::Other, Vec::new()),
    };
    Request {
        kind,
        touches,
        actions,
        token: request["ClientRequestToken"].as_str().map(str::to_owned),
        sizes: parser.after,
    }
}

struct Parser<'a> {
    tables: &'a HashMap<String, TableKeys>,
    sizes: &'a Sizes,
    after: Vec<(ItemId, Option<usize>)>,
}

impl Parser<'_> {
    /// The key of `item` in `table` (a request's `Key` or `Item`), if the
    /// model limits the table.
    fn key_of(&self, table: &str, item: &Value) -> Option<(String, String)> {
        let keys = self.tables.get(table)?;
        let item = item.as_object()?;
        Some((
            key_string(item.get(&keys.partition_key))?,
            key_string(item.get(&keys.sort_key)).unwrap_or_default(),
        ))
    }

    /// A write of the item at `key`: its units are the larger of its size
    /// before (as last seen) and after (`written`: the whole new item of a
    /// put, or the values an update sets, added to the item before).
    fn write(&mut self, table: &str, key: &Value, written: Option<&Value>, factor: f64, put: bool) -> Vec<Touch> {
        let Some((pk, sk)) = self.key_of(table, key) else {
            return Vec::new();
        };
        let id = (table.to_owned(), pk.clone(), sk.clone());
        let before = self
            .after
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map_or_else(|| self.sizes.get(&id), |(_, s)| *s);
        let key_size = key.as_object().map_or(0, item_size);
        let after = match (written.and_then(Value::as_object), put) {
            (Some(item), true) => Some(item_size(item)),
            (Some(values), false) => Some(before.unwrap_or(key_size).max(key_size + item_size(values))),
            (None, _) => None,
        };
        let size = before.unwrap_or(0).max(after.unwrap_or(key_size));
        self.after.push((id, after));
        vec![Touch {
            table: table.to_owned(),
            partition_key: pk,
            sort_key: Some(sk),
            access: Access::Write,
            units: factor * size.div_ceil(WRITE_UNIT_BYTES).max(1) as f64,
            new_item: put && before.is_none(),
            projected: false,
            action: None,
        }]
    }

    fn read(&self, table: &str, key: &Value, factor: f64, projected: bool) -> Vec<Touch> {
        let Some((pk, sk)) = self.key_of(table, key) else {
            return Vec::new();
        };
        vec![Touch {
            table: table.to_owned(),
            partition_key: pk,
            sort_key: Some(sk),
            access: Access::Read,
            units: factor,
            new_item: false,
            projected,
            action: None,
        }]
    }

    /// A `Query` on the partition-key value its key condition names.
    fn query(&self, table: &str, request: &Value, factor: f64) -> Vec<Touch> {
        let Some(keys) = self.tables.get(table) else {
            return Vec::new();
        };
        let condition = request["KeyConditionExpression"].as_str().unwrap_or_default();
        let names = &request["ExpressionAttributeNames"];
        let values = &request["ExpressionAttributeValues"];
        let partition_key = condition
            .split(" AND ")
            .chain(condition.split(" and "))
            .find_map(|clause| {
                let (name, placeholder) = clause.split_once('=')?;
                let name = name.trim().trim_start_matches('(');
                let name = names[name].as_str().unwrap_or(name);
                (name == keys.partition_key)
                    .then(|| key_string(values.get(placeholder.trim().trim_end_matches(')'))))?
            });
        let Some(partition_key) = partition_key else {
            return Vec::new();
        };
        vec![Touch {
            table: table.to_owned(),
            partition_key,
            sort_key: None,
            access: Access::Read,
            units: factor,
            new_item: false,
            projected: is_projected(request),
            action: None,
        }]
    }
}

/// Whether a read request (or a `BatchGetItem` table's part) returns only
/// some attributes.
fn is_projected(request: &Value) -> bool {
    request["ProjectionExpression"].is_string() || request["AttributesToGet"].is_array()
}

/// Read units for `bytes` read at `factor` per 4 KB (at least one unit's worth).
pub(crate) fn read_units(bytes: usize, factor: f64) -> f64 {
    factor * bytes.div_ceil(READ_UNIT_BYTES).max(1) as f64
}

/// A key attribute's value as a string (`S` or `N`).
pub(crate) fn key_string(value: Option<&Value>) -> Option<String> {
    let value = value?;
    value["S"].as_str().or_else(|| value["N"].as_str()).map(str::to_owned)
}

/// The items an answer of `operation` returned, with their table when the
/// answer names it.
pub(crate) fn returned_items<'a>(operation: &str, answer: &'a Value) -> Vec<(Option<String>, &'a Map<String, Value>)> {
    match operation {
        "GetItem" => answer["Item"].as_object().map(|i| (None, i)).into_iter().collect(),
        "Query" => answer["Items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .map(|i| (None, i))
            .collect(),
        "TransactGetItems" => answer["Responses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["Item"].as_object())
            .map(|i| (None, i))
            .collect(),
        "BatchGetItem" => answer["Responses"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(table, items)| {
                items
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_object)
                    .map(move |i| (Some(table.clone()), i))
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An item's size as DynamoDB counts it ("Item sizes and formats"): each
/// attribute's name plus its value; a string its UTF-8 bytes, a number
/// about one byte per two significant digits plus one, a binary its bytes,
/// a Boolean or null one byte, a list or map 3 bytes plus one per element
/// plus its elements (a map's names included).
pub fn item_size(item: &Map<String, Value>) -> usize {
    item.iter().map(|(name, value)| name.len() + value_size(value)).sum()
}

fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    let number = |n: &Value| {
        let digits = n.as_str().unwrap_or("").chars().filter(char::is_ascii_digit).count();
        digits.div_ceil(2) + 1
    };
    let binary = |b: &Value| b.as_str().map_or(0, |s| s.len() * 3 / 4);
    let strings = |v: &Value, size: &dyn Fn(&Value) -> usize| v.as_array().map_or(0, |a| a.iter().map(size).sum());
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => number(inner),
        "B" => binary(inner),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner, &|s| s.as_str().map_or(0, str::len)),
        "NS" => strings(inner, &number),
        "BS" => strings(inner, &binary),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |a| a.iter().map(|v| value_size(v) + 1).sum())
        }
        "M" => {
            3 + inner
                .as_object()
                .map_or(0, |m| m.iter().map(|(k, v)| k.len() + value_size(v) + 1).sum())
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tables() -> HashMap<String, TableKeys> {
        HashMap::from([("t".to_owned(), TableKeys::new("t", "pk", "sk"))])
    }

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        let item = json!({
            "id": { "S": "abc" },            // 2 + 3
            "n": { "N": "12345" },           // 1 + 3 + 1
            "ok": { "BOOL": true },          // 2 + 1
            "l": { "L": [{ "S": "ab" }] },   // 1 + 3 + (2 + 1)
        });
        assert_eq!(item_size(item.as_object().unwrap()), 5 + 5 + 3 + 7);
    }

    #[test]
    fn a_transaction_numbers_its_actions_and_sees_its_own_earlier_writes() {
        let key = |sk: &str| json!({ "pk": { "S": "a" }, "sk": { "S": sk } });
        let put = |sk: &str| {
            json!({ "Put": { "TableName": "t", "Item": {
            "pk": { "S": "a" }, "sk": { "S": sk }, "p": { "S": "x".repeat(1500) } } } })
        };
        let request = json!({ "ClientRequestToken": "tok", "TransactItems": [
            put("x"),
            { "ConditionCheck": { "TableName": "t", "Key": key("y") } },
            { "Update": { "TableName": "other", "Key": key("z") } },
        ] });
        let parsed = parse("TransactWriteItems", &request, &tables(), &Sizes::default());
        assert_eq!(parsed.kind, Kind::TransactWrite);
        assert_eq!((parsed.actions, parsed.token.as_deref()), (3, Some("tok")));
        let actions: Vec<_> = parsed.touches.iter().map(|t| (t.action, t.access, t.units)).collect();
        assert_eq!(
            actions,
            [(Some(0), Access::Write, 4.0), (Some(1), Access::Read, 2.0)],
            "1.5 KB transactional: 4 WU; a table the model does not limit: no touch"
        );
        assert_eq!(parsed.sizes.len(), 1, "the put's size, applied once admitted");
    }
}
