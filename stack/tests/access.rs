//! The roles grant what the code calls, nothing more: the static
//! operation-to-action check of `stack::access`.
//!
//! 1. The Rust sources of every crate a function or `counterctl` links
//!    (`aws/src`, `counter/src`, `handlers/*/src`, `ops-cli/src`) are
//!    scanned for SDK operation calls: a zero-argument method call
//!    `.name()` whose name is an operation of one of the `aws-sdk-*` crates
//!    in `Cargo.lock` (read from the crate's `src/operation/` directory in
//!    cargo's registry). Each one must be covered by an entry of
//!    `access::CALLS` for its operation whose components include one that
//!    links the call's file (its crate, and the cargo feature of its
//!    module); each component of each entry must link some call of the
//!    entry's operation.
//! 2. Each entry names a known operation with exactly the IAM actions
//!    that authorize it, and is the only one for its operation and callers.
//! 3. Each function's role grants, under each `FailedBatchRecords` mode,
//!    exactly its calls' and platform uses' needs, on the template's own
//!    resources, with their conditions (`dynamodb:LeadingKeys`, which the
//!    emulator does not evaluate).
//!
//! Limits: the scan is textual. It sees a call written `.operation()` (the
//! SDK's fluent builders are only ever written so) and skips
//! `#[cfg(test)]` items and `//` comments; a call through a macro is not
//! seen. The table is keyed by operation and component, not by call site:
//! a new call of an operation that an entry of a component linking its
//! crate already covers passes unseen, whichever resource it touches, and
//! an entry stays in use while any call of its operation remains in a
//! crate its components link. Which components reach a call, and which
//! resource it touches, are declared in the table and reviewed there. The
//! local runner (`localstack/runner`) is not scanned: it plays on the
//! emulator what Lambda does on AWS, which `access::PLATFORM_USES` covers;
//! an entry without components is its own, and covers calls of the AWS
//! crate only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stack::access::{self, CALLS, Call, Component, KIT_STATE_DENIED, Need, OPERATIONS};
use stack::failed_batches::{KEEP_PAYLOAD, KEEP_POINTER};
use stack::resources::iam::{Effect, Role};
use stack::{ResourceKind, logical};

/// The crates' source directories the scan reads, from the workspace root.
const SCANNED: &[&str] = &["aws/src", "counter/src", "handlers", "ops-cli/src"];

/// Zero-argument calls that share a name with an SDK operation and are not
/// one: `(file, method, what it is)`. None today.
const NOT_SDK_CALLS: &[(&str, &str, &str)] = &[];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Which components link a source file: a handler crate its function, the
/// CLI the operator (and the limits planner, `counterctl` too), the `sqs`/`s3` modules of the AWS crate the
/// reprocessor and the operator (cargo features `sqs`, `s3` and `ops`), its
/// `esm` module the operator (`ops`); everything else of the AWS and core
/// crates every component.
fn linked_by(file: &str) -> &'static [Component] {
    use Component::*;
    match file {
        f if f.starts_with("ops-cli/") => &[Operator, LimitsPlanner],
        f if f.starts_with("handlers/stream-counter/") => &[StreamCounter],
        f if f.starts_with("handlers/dlq-reprocessor/") => &[DlqReprocessor],
        f if f.starts_with("handlers/api/") => &[Api],
        f if f.starts_with("handlers/drift-check/") => &[DriftCheck],
        "aws/src/sqs.rs" => &[DlqReprocessor, Operator, LimitsPlanner],
        "aws/src/s3.rs" => &[DlqReprocessor, DriftCheck, Operator, LimitsPlanner],
        "aws/src/esm.rs" => &[Operator, LimitsPlanner],
        _ => &[StreamCounter, DlqReprocessor, Api, DriftCheck, Operator, LimitsPlanner],
    }
}

/// Whether the local runner links a source file: it links the AWS crate
/// (feature `ops`), and no handler's or `counterctl`'s code.
fn runner_links(file: &str) -> bool {
    file.starts_with("aws/src/")
}

/// Whether a call of `entry`'s operation in `file` can be made by one of
/// its components (by the local runner, for an entry without components).
fn entry_links(entry: &Call, file: &str) -> bool {
    if entry.by.is_empty() {
        runner_links(file)
    } else {
        entry.by.iter().any(|c| linked_by(file).contains(c))
    }
}

/// The calls found that no entry of `entries` covers: none of its
/// operation, or none whose components link the call's file.
fn uncovered<'a>(found: &'a [Found], entries: &[Call]) -> Vec<&'a Found> {
    found
        .iter()
        .filter(|f| {
            !NOT_SDK_CALLS
                .iter()
                .any(|(file, method, _)| f.file == *file && f.method == *method)
        })
        .filter(|f| {
            !entries
                .iter()
                .any(|e| e.operation == f.method && entry_links(e, &f.file))
        })
        .collect()
}

/// Each entry and component (`None`: the local runner's entry) for which
/// no call of the entry's operation is in a file that component links.
fn unreached<'a>(found: &[Found], entries: &'a [Call]) -> Vec<(&'a Call, Option<Component>)> {
    let calls_in =
        |operation: &str, links: &dyn Fn(&str) -> bool| found.iter().any(|f| f.method == operation && links(&f.file));
    let mut out = Vec::new();
    for entry in entries {
        if entry.by.is_empty() && !calls_in(entry.operation, &runner_links) {
            out.push((entry, None));
        }
        for &component in entry.by {
            if !calls_in(entry.operation, &|file| linked_by(file).contains(&component)) {
                out.push((entry, Some(component)));
            }
        }
    }
    out
}

/// Operation method name -> the `aws-sdk-*` crates that have it, for every
/// SDK crate of `Cargo.lock`, read from cargo's registry sources.
fn sdk_operations() -> BTreeMap<String, BTreeSet<String>> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock")).expect("Cargo.lock");
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registries: Vec<PathBuf> = std::fs::read_dir(home.join("registry/src"))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", home.join("registry/src").display()))
        .map(|e| e.unwrap().path())
        .collect();
    let mut operations: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut lines = lock.lines();
    let mut crates = 0;
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("name = \"aws-sdk-").and_then(|n| n.strip_suffix('"')) else {
            continue;
        };
        let version = lines
            .next()
            .and_then(|v| v.strip_prefix("version = \"")?.strip_suffix('"'))
            .expect("a version after the name");
        let name = format!("aws-sdk-{name}");
        let dir = registries
            .iter()
            .map(|r| r.join(format!("{name}-{version}/src/operation")))
            .find(|d| d.is_dir())
            .unwrap_or_else(|| {
                panic!(
                    "{name} {version}: no src/operation in cargo's registry ({registries:?}); build the workspace first"
                )
            });
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.path().is_dir() {
                let method = entry.file_name().to_string_lossy().into_owned();
                operations.entry(method).or_default().insert(name.clone());
            }
        }
        crates += 1;
    }
    assert!(crates >= 5, "only {crates} aws-sdk crates found in Cargo.lock");
    operations
}

/// One SDK-named call found in the sources.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Found {
    file: String,
    function: String,
    method: String,
    line: usize,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The source without `#[cfg(test)]` items and `//` comments, line by line
/// (blanked, so line numbers stay).
fn production_lines(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skipping = false;
    let mut depth = 0i64;
    let mut opened = false;
    for line in source.lines() {
        let code = match line.find("//") {
            Some(i) if !line[..i].ends_with(':') => &line[..i],
            _ => line,
        };
        let mut code = code;
        if !skipping && let Some(rest) = code.trim_start().strip_prefix("#[cfg(test)]") {
            skipping = true;
            depth = 0;
            opened = false;
            code = rest;
        }
        if skipping {
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            let pending = code.trim().is_empty() || code.trim_start().starts_with("#[");
            if (opened && depth <= 0) || (!opened && !pending && code.trim_end().ends_with(';')) {
                skipping = false;
            }
            out.push(String::new());
            continue;
        }
        out.push(code.to_owned());
    }
    out
}

fn scan_file(root: &Path, path: &Path, operations: &BTreeMap<String, BTreeSet<String>>, found: &mut Vec<Found>) {
    let source = std::fs::read_to_string(path).unwrap();
    let file = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
    let mut function = String::from("<module>");
    for (n, line) in production_lines(&source).iter().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            // `fn name`
            if chars[i..].starts_with(&['f', 'n', ' ']) && (i == 0 || !is_ident(chars[i - 1])) {
                let name: String = chars[i + 3..].iter().take_while(|c| is_ident(**c)).collect();
                if !name.is_empty() {
                    function = name;
                }
            }
            // `.name()`
            if chars[i] == '.' && (i == 0 || chars[i - 1] != '.') {
                let name: String = chars[i + 1..].iter().take_while(|c| is_ident(**c)).collect();
                let after = i + 1 + name.chars().count();
                if !name.is_empty() && chars[after..].starts_with(&['(', ')']) && operations.contains_key(&name) {
                    found.push(Found {
                        file: file.clone(),
                        function: function.clone(),
                        method: name,
                        line: n + 1,
                    });
                }
            }
            i += 1;
        }
    }
}

fn scan(operations: &BTreeMap<String, BTreeSet<String>>) -> Vec<Found> {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // Integration tests and fixtures are not linked by anything deployed.
                if !matches!(path.file_name().and_then(|n| n.to_str()), Some("tests" | "fixtures")) {
                    walk(&path, files);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let root = workspace_root().canonicalize().unwrap();
    let mut files = Vec::new();
    for dir in SCANNED {
        walk(&root.join(dir), &mut files);
    }
    files.sort();
    let mut found = Vec::new();
    for path in files {
        scan_file(&root, &path, operations, &mut found);
    }
    found
}

#[test]
fn every_sdk_call_of_the_kits_code_is_covered_by_an_entry_of_a_component_that_links_it() {
    let operations = sdk_operations();
    let found = scan(&operations);
    let undeclared: Vec<String> = uncovered(&found, CALLS)
        .into_iter()
        .map(|call| {
            format!(
                "  {}:{} in `{}` calls `.{}()` ({}), which no entry of a component linking {} covers",
                call.file,
                call.line,
                call.function,
                call.method,
                operations[&call.method].iter().cloned().collect::<Vec<_>>().join(", "),
                call.file
            )
        })
        .collect();
    assert!(
        undeclared.is_empty(),
        "SDK calls missing from stack::access::CALLS (add the operation with the components that call it \
         and the IAM actions it needs on which resource; then grant them in the stack):\n{}",
        undeclared.join("\n")
    );
    let stale: Vec<String> = unreached(&found, CALLS)
        .into_iter()
        .map(|(entry, component)| match component {
            Some(c) => format!("  `{}` by {c:?} ({})", entry.operation, entry.why),
            None => format!("  `{}` by the local runner ({})", entry.operation, entry.why),
        })
        .collect();
    assert!(
        stale.is_empty(),
        "entries of stack::access::CALLS whose operation no code of the component calls any more:\n{}",
        stale.join("\n")
    );
    for (file, method, _) in NOT_SDK_CALLS {
        assert!(
            found.iter().any(|f| f.file == *file && f.method == *method),
            "NOT_SDK_CALLS: no `.{method}()` in {file} any more"
        );
    }
    // The scan is not vacuous: it sees the calls the issue was about.
    for (dir, method) in [
        ("aws/src/", "batch_get_item"),
        ("aws/src/", "transact_write_items"),
        ("aws/src/", "send_message"),
        ("handlers/api/", "list_role_tags"),
    ] {
        assert!(
            found.iter().any(|f| f.file.starts_with(dir) && f.method == method),
            "no `.{method}()` found under {dir}"
        );
    }
}

fn found(file: &str, method: &str) -> Found {
    Found {
        file: file.to_owned(),
        function: "f".to_owned(),
        method: method.to_owned(),
        line: 1,
    }
}

/// What the rekeyed table still catches: a call of an operation that no
/// entry of a component linking the call's crate covers, however the
/// function or file is named, and an entry whose components call its
/// operation nowhere.
#[test]
fn a_call_no_entry_of_a_linking_component_covers_is_reported_and_so_is_an_entry_nothing_calls() {
    let calls = [
        // The operator scans (the audit): covered where the operator links it.
        found("aws/src/dynamo/anything.rs", "scan"),
        found("ops-cli/src/commands/renamed.rs", "describe_stacks"),
        // No entry lets the api scan, nor the stream counter send to a queue.
        found("handlers/api/src/routes.rs", "scan"),
        found("handlers/stream-counter/src/lib.rs", "send_message"),
        // The local runner's entry covers the AWS crate only.
        found("aws/src/esm.rs", "tag_resource"),
        found("handlers/api/src/lib.rs", "tag_resource"),
        // An operation no entry names.
        found("ops-cli/src/commands/deploy/mod.rs", "create_table"),
    ];
    let missed: Vec<(&str, &str)> = uncovered(&calls, CALLS)
        .into_iter()
        .map(|f| (f.file.as_str(), f.method.as_str()))
        .collect();
    assert_eq!(
        missed,
        [
            ("handlers/api/src/routes.rs", "scan"),
            ("handlers/stream-counter/src/lib.rs", "send_message"),
            ("handlers/api/src/lib.rs", "tag_resource"),
            ("ops-cli/src/commands/deploy/mod.rs", "create_table"),
        ]
    );
    let entry = [Call {
        operation: "scan",
        by: &[Component::StreamCounter, Component::Operator],
        grants: &[],
        why: "",
    }];
    let only_the_cli = [found("ops-cli/src/commands/audit/mod.rs", "scan")];
    let stale: Vec<Option<Component>> = unreached(&only_the_cli, &entry).into_iter().map(|(_, c)| c).collect();
    assert_eq!(stale, [Some(Component::StreamCounter)]);
}

#[test]
fn the_scan_skips_comments_and_test_items_and_finds_calls_by_enclosing_function() {
    let source = "\
fn real(client: &Client) {
    // client.scan() in a comment
    client.batch_get_item().send();
}
#[cfg(test)]
mod tests {
    fn fake(client: &Client) {
        client.put_item().send();
    }
}
fn after() { x.query(); y.query(1); z..query() }
";
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("access-scan");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.rs");
    std::fs::write(&path, source).unwrap();
    let operations: BTreeMap<String, BTreeSet<String>> = ["scan", "batch_get_item", "put_item", "query"]
        .into_iter()
        .map(|m| (m.to_owned(), BTreeSet::from(["aws-sdk-dynamodb".to_owned()])))
        .collect();
    let mut found = Vec::new();
    scan_file(&dir, &path, &operations, &mut found);
    let calls: Vec<(String, String, usize)> = found.into_iter().map(|f| (f.function, f.method, f.line)).collect();
    assert_eq!(
        calls,
        vec![
            ("real".to_owned(), "batch_get_item".to_owned(), 3),
            ("after".to_owned(), "query".to_owned(), 11),
        ]
    );
}

#[test]
fn each_entry_grants_exactly_its_operations_actions_and_is_the_only_one_of_its_operation_and_callers() {
    let operations = sdk_operations();
    for (i, site) in CALLS.iter().enumerate() {
        let operation = access::operation(site.operation)
            .unwrap_or_else(|| panic!("`{}` ({}) is not in access::OPERATIONS", site.operation, site.why));
        assert!(
            operations
                .get(operation.method)
                .is_some_and(|crates| crates.contains(operation.sdk)),
            "{} is not an operation of {}",
            operation.method,
            operation.sdk
        );
        let granted: BTreeSet<_> = site.grants.iter().flat_map(|g| g.actions.iter().copied()).collect();
        for action in operation.required {
            assert!(
                granted.contains(action),
                "`{}` ({}): {action:?} is required",
                site.operation,
                site.why
            );
        }
        for action in &granted {
            assert!(
                operation.required.contains(action) || operation.optional.contains(action),
                "`{}` ({}): {action:?} does not authorize it",
                site.operation,
                site.why
            );
        }
        if operation.method == "transact_write_items" {
            assert!(
                !granted.is_empty(),
                "{}: a transaction declares its item actions",
                site.why
            );
        }
        let callers: BTreeSet<Component> = site.by.iter().copied().collect();
        for other in &CALLS[i + 1..] {
            assert!(
                other.operation != site.operation || other.by.iter().copied().collect::<BTreeSet<_>>() != callers,
                "two entries of `{}` by {callers:?}: merge them ({}; {})",
                site.operation,
                site.why,
                other.why
            );
        }
    }
    // Every operation of the table is called somewhere.
    for operation in OPERATIONS {
        assert!(
            CALLS.iter().any(|s| s.operation == operation.method),
            "{} is called nowhere",
            operation.method
        );
    }
}

/// A grant as compared: action, resource and condition, rendered as JSON.
type Rendered = (String, String, String);

fn rendered_needs(component: Component, mode: &str) -> BTreeMap<Rendered, Vec<String>> {
    let mut out: BTreeMap<Rendered, Vec<String>> = BTreeMap::new();
    for (Need { action, on, when }, why) in access::needs(component) {
        if when.is_some_and(|w| w != mode) {
            continue;
        }
        let resource = on
            .in_template(component)
            .unwrap_or_else(|| panic!("{component:?} needs {on:?}, which the template does not hold"));
        let condition = on.condition().unwrap_or(Value::Null);
        out.entry((
            action.as_str().to_owned(),
            serde_json::to_string(&resource).unwrap(),
            condition.to_string(),
        ))
        .or_default()
        .push(why);
    }
    out
}

fn role(t: &stack::Template, id: &str) -> Role {
    match &t.resources[id].kind {
        ResourceKind::Role(role) => role.clone(),
        other => panic!("{id} is not a role: {other:?}"),
    }
}

/// What `role` allows when the template condition `mode` holds.
fn allowed_under(role: &Role, mode: &str) -> BTreeSet<Rendered> {
    role.policies
        .iter()
        .filter(|p| p.only_if.as_deref().is_none_or(|c| c == mode))
        .flat_map(|p| p.policy_document.statement.iter())
        .filter(|s| s.effect == Effect::Allow)
        .flat_map(|s| {
            let condition = s
                .condition
                .as_ref()
                .map_or(Value::Null, |c| serde_json::to_value(c).unwrap());
            s.action.iter().flat_map(move |a| {
                let condition = condition.to_string();
                s.resource.iter().map(move |r| {
                    (
                        a.as_str().to_owned(),
                        serde_json::to_string(r).unwrap(),
                        condition.clone(),
                    )
                })
            })
        })
        .collect()
}

#[test]
fn each_function_role_grants_exactly_what_its_code_and_its_mappings_use() {
    let t = stack::template();
    let mut problems = Vec::new();
    for component in Component::FUNCTIONS {
        let (role_id, _) = component.role_and_log_group().unwrap();
        let role = role(&t, role_id);
        // Each template condition a role's grants hang on, alone.
        for mode in [KEEP_POINTER, KEEP_PAYLOAD, logical::LIMITS_FILE_SET] {
            let needed = rendered_needs(component, mode);
            let allowed = allowed_under(&role, mode);
            for (grant, why) in &needed {
                if !allowed.contains(grant) {
                    problems.push(format!(
                        "  {role_id} ({mode}): missing {} on {} {}, needed by {}",
                        grant.0,
                        grant.1,
                        if grant.2 == "null" { "" } else { &grant.2 },
                        why.join("; ")
                    ));
                }
            }
            for grant in &allowed {
                if !needed.contains_key(grant) {
                    problems.push(format!(
                        "  {role_id} ({mode}): grants {} on {} {}, which no code or mapping of {} uses",
                        grant.0,
                        grant.1,
                        if grant.2 == "null" { "" } else { &grant.2 },
                        component.name()
                    ));
                }
            }
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "roles differ from stack/src/access.rs:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_kit_state_partition_is_denied_to_the_request_and_stream_roles() {
    let t = stack::template();
    let counters = serde_json::to_value(stack::Expr::get_att(logical::COUNTERS_TABLE, "Arn")).unwrap();
    let denied = |role: &Role| -> Option<Value> {
        role.permission_statements()
            .find(|s| s.effect == Effect::Deny)
            .map(|s| serde_json::to_value(s).unwrap())
    };
    for component in [Component::StreamCounter, Component::DlqReprocessor, Component::Api] {
        let (role_id, _) = component.role_and_log_group().unwrap();
        let deny = denied(&role(&t, role_id)).unwrap_or_else(|| panic!("{role_id} has no Deny"));
        assert_eq!(deny["Resource"], json!([counters]), "{role_id}");
        assert_eq!(
            deny["Condition"],
            json!({"ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": [hybrid_counter::keys::KIT_STATE_SCOPE]}}),
            "{role_id}"
        );
        // Every item action the role may take on the counters table is denied there.
        let denied_actions: BTreeSet<&str> = KIT_STATE_DENIED.iter().map(|a| a.as_str()).collect();
        let counters_json = counters.to_string();
        for (action, resource, _) in allowed_under(&role(&t, role_id), KEEP_PAYLOAD) {
            if resource == counters_json {
                assert!(
                    denied_actions.contains(action.as_str()),
                    "{role_id}: {action} not denied"
                );
            }
        }
    }
    // The drift check owns it: no Deny on its role.
    assert!(denied(&role(&t, logical::DRIFT_CHECK_ROLE)).is_none());
}
