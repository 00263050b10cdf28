//! The roles grant what the code calls, nothing more: the sources are
//! scanned for SDK calls, each covered by an entry of `stack::access::CALLS`
//! of its operation, file and a component linking it, each entry used where
//! it says, each role exactly its components' needs. What it checks and
//! what it does not see: SECURITY.md, "How row 6 is checked".

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use stack::access::{self, CALLS, Call, Component, KIT_STATE_DENIED, Need, Target, limits_file_arn, scope_callers};
use stack::failed_batches::{KEEP_PAYLOAD, KEEP_POINTER};
use stack::resources::iam::{Effect, Role};
use stack::{Expr, ResourceKind, logical};

#[path = "access/operations.rs"]
mod operations;
use operations::OPERATIONS;

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

/// Whether `file` is one of `entry`'s files or in one of its folders.
fn entry_at(entry: &Call, file: &str) -> bool {
    entry.at.iter().any(|at| file.starts_with(at))
}

/// The calls found that no entry of `entries` covers: none of its
/// operation, none whose `at` holds the call's file, or none of those
/// whose components link it.
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
                .any(|e| e.operation == f.method && entry_at(e, &f.file) && entry_links(e, &f.file))
        })
        .collect()
}

/// What of an entry no call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unused {
    /// One of its `at` holds no call of its operation that one of its
    /// components (or the local runner) links.
    At(&'static str),
    /// A component (`None`: the local runner, for an entry without
    /// components) links no call of its operation in its `at`.
    By(Option<Component>),
}

/// Each entry's `at` and components that no call found uses.
fn unreached<'a>(found: &[Found], entries: &'a [Call]) -> Vec<(&'a Call, Unused)> {
    let calls_in = |entry: &Call, at: &dyn Fn(&str) -> bool, links: &dyn Fn(&str) -> bool| {
        found
            .iter()
            .any(|f| f.method == entry.operation && at(&f.file) && links(&f.file))
    };
    let mut out = Vec::new();
    for entry in entries {
        for &prefix in entry.at {
            if !calls_in(entry, &|file| file.starts_with(prefix), &|file| {
                entry_links(entry, file)
            }) {
                out.push((entry, Unused::At(prefix)));
            }
        }
        if entry.by.is_empty() && !calls_in(entry, &|file| entry_at(entry, file), &runner_links) {
            out.push((entry, Unused::By(None)));
        }
        for &component in entry.by {
            if !calls_in(entry, &|file| entry_at(entry, file), &|file| {
                linked_by(file).contains(&component)
            }) {
                out.push((entry, Unused::By(Some(component))));
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
fn every_sdk_call_of_the_kits_code_is_covered_by_an_entry_of_its_file_and_a_component_that_links_it() {
    let operations = sdk_operations();
    let found = scan(&operations);
    let undeclared: Vec<String> = uncovered(&found, CALLS)
        .into_iter()
        .map(|call| {
            format!(
                "  {}:{} in `{}` calls `.{}()` ({}), which no entry at {} of a component linking it covers",
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
        "SDK calls missing from stack::access::CALLS (add the file to the `at` of the entry of the operation, \
         components and resource it calls, or a new entry with the IAM actions it needs on which resource; \
         then grant them in the stack):\n{}",
        undeclared.join("\n")
    );
    let stale: Vec<String> = unreached(&found, CALLS)
        .into_iter()
        .map(|(entry, unused)| match unused {
            Unused::At(at) => format!("  `{}` at {at}: no call there ({})", entry.operation, entry.why),
            Unused::By(Some(c)) => format!("  `{}` by {c:?}: no call it links ({})", entry.operation, entry.why),
            Unused::By(None) => format!("  `{}` by the local runner: no call ({})", entry.operation, entry.why),
        })
        .collect();
    assert!(
        stale.is_empty(),
        "entries of stack::access::CALLS that no code calls any more where they say (remove the file, \
         the component or the entry, and its grants):\n{}",
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

/// The entries of `operation`.
fn entries_of(operation: &str) -> Vec<Call> {
    CALLS.iter().filter(|e| e.operation == operation).copied().collect()
}

/// A call is covered by an entry of its operation, its file and a
/// component that links the file, however its function is named; an entry
/// whose components call its operation nowhere in its files is reported.
#[test]
fn a_call_no_entry_of_its_file_and_a_linking_component_covers_is_reported_and_so_is_an_entry_nothing_calls() {
    let calls = [
        // The audit's scans, and the stack's outputs read by any command.
        found("aws/src/dynamo/admin.rs", "scan"),
        found("ops-cli/src/commands/deploy/renamed.rs", "describe_stacks"),
        // The api's code: no entry lets the api scan, nor the stream counter send to a queue.
        found("handlers/api/src/routes.rs", "scan"),
        found("handlers/stream-counter/src/lib.rs", "send_message"),
        // The local runner's entry covers its files of the AWS crate only.
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
        at: &["ops-cli/src/commands/audit/", "aws/src/dynamo/admin.rs"],
        grants: &[],
        why: "",
    }];
    let only_the_cli = [found("ops-cli/src/commands/audit/mod.rs", "scan")];
    let stale: Vec<Unused> = unreached(&only_the_cli, &entry).into_iter().map(|(_, u)| u).collect();
    assert_eq!(
        stale,
        [
            Unused::At("aws/src/dynamo/admin.rs"),
            Unused::By(Some(Component::StreamCounter))
        ]
    );
}

/// (A) A `GetItem` on the counters table on the stream's path: the stream
/// role has GetItem on the resources table only (AccessDenied on AWS).
/// The stream counter links `transact.rs`, and entries of `get_item` by it
/// exist, but none is at that file.
#[test]
fn a_get_item_in_a_file_no_get_item_entry_names_is_reported_though_its_component_has_one_elsewhere() {
    let stream_path = [found("aws/src/dynamo/transact.rs", "get_item")];
    assert_eq!(uncovered(&stream_path, CALLS), [&stream_path[0]]);
    // The control: the store's reads, where the entries say they are.
    let reads = [found("aws/src/dynamo/read.rs", "get_item")];
    assert!(uncovered(&reads, CALLS).is_empty());
}

/// (B) A `Scan` in the request path's file: the api role has no Scan,
/// though the api links the file and the operator's audit scans in the
/// same crate.
#[test]
fn a_scan_in_the_request_path_is_reported_though_other_files_of_its_crate_scan() {
    let request_path = [
        found("aws/src/dynamo/request.rs", "scan"),
        found("aws/src/dynamo/admin.rs", "scan"),
        found("aws/src/limits.rs", "scan"),
        found("aws/src/drift.rs", "scan"),
    ];
    assert_eq!(uncovered(&request_path, CALLS), [&request_path[0]]);
}

/// (C) The api's put (`RequestStore::put_resource`, in `dynamo/store.rs`)
/// removed: the api's `put_item` entry is stale, though the drift check's
/// state is still put in a file the api links.
#[test]
fn an_entry_whose_file_no_longer_calls_its_operation_is_stale_though_another_file_does() {
    let without_the_create = [
        found("aws/src/drift.rs", "put_item"),
        found("aws/src/layout.rs", "put_item"),
    ];
    let put_item = entries_of("put_item");
    let stale: Vec<(&[Component], Unused)> = unreached(&without_the_create, &put_item)
        .into_iter()
        .map(|(e, u)| (e.by, u))
        .collect();
    use Component::{Api, Operator};
    assert_eq!(
        stale,
        [
            (&[Api, Operator][..], Unused::At("aws/src/dynamo/store.rs")),
            (&[Api, Operator][..], Unused::By(Some(Api))),
            (&[Api, Operator][..], Unused::By(Some(Operator))),
        ]
    );
    let with_it = [
        found("aws/src/dynamo/store.rs", "put_item"),
        without_the_create[0].clone(),
        without_the_create[1].clone(),
    ];
    assert!(unreached(&with_it, &put_item).is_empty());
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
        let operation = operations::operation(site.operation).unwrap_or_else(|| {
            panic!(
                "`{}` ({}) is not in operations::OPERATIONS (stack/tests/access/operations.rs)",
                site.operation, site.why
            )
        });
        assert!(
            operations
                .get(operation.method)
                .is_some_and(|crates| crates.contains(operation.sdk)),
            "{} is not an operation of {}",
            operation.method,
            operation.sdk
        );
        assert!(
            !site.at.is_empty(),
            "`{}` ({}): no file in `at`",
            site.operation,
            site.why
        );
        for at in site.at {
            // A folder ends in `/`, so `aws/src/s3` cannot stand for `aws/src/s3.rs` and `aws/src/s3_x.rs`.
            let kind = workspace_root().join(at);
            assert!(
                (at.ends_with(".rs") && kind.is_file()) || (at.ends_with('/') && kind.is_dir()),
                "`{}` ({}): `{at}` is neither a source file nor a folder ending in /",
                site.operation,
                site.why
            );
        }
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

/// `target` as the template names it for `component`'s role; `None` for
/// the operator's targets, which are outside the template.
fn in_template(target: Target, component: Component) -> Option<Expr> {
    let arn = |id: &str| Expr::get_att(id, "Arn");
    match target {
        Target::ResourcesTable => Some(arn(logical::RESOURCES_TABLE)),
        Target::CountersTable | Target::KitState | Target::KitLayout => Some(arn(logical::COUNTERS_TABLE)),
        Target::ResourcesStream => Some(Expr::get_att(logical::RESOURCES_TABLE, "StreamArn")),
        Target::Dlq1 => Some(arn(logical::DLQ1)),
        Target::Dlq2 => Some(arn(logical::DLQ2)),
        Target::FailedBatchBucket => Some(arn(logical::FAILED_BATCH_BUCKET)),
        Target::FailedBatchObjects => Some(Expr::sub(format!("${{{}.Arn}}/*", logical::FAILED_BATCH_BUCKET))),
        Target::LimitsFile => Some(limits_file_arn()),
        Target::OwnLogGroup => component.role_and_log_group().map(|(_, group)| arn(group)),
        Target::IamRoles => Some(scope_callers("role")),
        Target::IamUsers => Some(scope_callers("user")),
        Target::Stack
        | Target::ArtifactsBucket
        | Target::ArtifactsObjects
        | Target::Functions
        | Target::EventSourceMappings
        | Target::Alarms
        | Target::Everything => None,
    }
}

/// The component's name, as the functions' physical names end
/// (`counterctl` for the operator).
fn component_name(component: Component) -> &'static str {
    match component {
        Component::StreamCounter => "stream-counter",
        Component::DlqReprocessor => "dlq-reprocessor",
        Component::Api => "api",
        Component::DriftCheck => "drift-check",
        Component::Operator => "counterctl",
        Component::LimitsPlanner => "counterctl limits plan",
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
        let resource = in_template(on, component)
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
                        component_name(component)
                    ));
                }
            }
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "roles differ from stack/src/access/:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_kit_state_partition_is_denied_to_the_request_and_stream_roles() {
    let t = stack::template();
    let counters = serde_json::to_value(stack::Expr::get_att(logical::COUNTERS_TABLE, "Arn")).unwrap();
    let denied = |role: &Role| -> Option<Value> {
        role.policies
            .iter()
            .flat_map(|p| p.policy_document.statement.iter())
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
