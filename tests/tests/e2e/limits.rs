//! `counterctl limits export | plan | apply` on a stack with 1,000
//! overrides, as the operator role (IAM enforced): export adopts the live
//! table, a plan of an edit is exactly the edit, apply refuses a scope
//! changed since the plan and a limit below usage without the flag, and a
//! second plan has nothing left to do. And the scheduled drift check, as
//! its own role, comparing the overrides with the file kept in S3
//! (`LimitsFileUri`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use hybrid_counter::RequestStore;
use hybrid_counter::keys;
use hybrid_counter::limits::diff::{Change, Kind};
use hybrid_counter_aws::DynamoStore;
use ops_cli::commands::limits::apply::Outcome;
use ops_cli::{Report, exit};

use crate::scope;

const OVERRIDES: usize = 1_000;

fn team(i: usize) -> String {
    format!("team-{i:04}")
}

/// A directory of this test's own files.
fn workdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hck-limits-{}-{}", std::process::id(), fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

/// 1,000 `limit` items (team-0000: 10, team-0001: 11, ...), 25 a request.
async fn write_overrides(client: &aws_sdk_dynamodb::Client, table: &str) {
    let items: Vec<WriteRequest> = (0..OVERRIDES)
        .map(|i| {
            let item = HashMap::from([
                (keys::SCOPE.to_owned(), AttributeValue::S(team(i))),
                (keys::NAME.to_owned(), AttributeValue::S(keys::LIMIT_NAME.to_owned())),
                (keys::LIMIT.to_owned(), AttributeValue::N((i + 10).to_string())),
                (keys::VERSION.to_owned(), AttributeValue::N("1".into())),
                (keys::UPDATED_AT.to_owned(), AttributeValue::N("1".into())),
            ]);
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
                .build()
        })
        .collect();
    for chunk in items.chunks(25) {
        let out = client
            .batch_write_item()
            .request_items(table, chunk.to_vec())
            .send()
            .await
            .unwrap();
        assert!(out.unprocessed_items().is_none_or(|u| u.is_empty()), "{out:?}");
    }
}

fn plan_of(report: &Report) -> &ops_cli::commands::limits::plan::LimitsPlan {
    match report {
        Report::LimitsPlan(plan) => plan,
        other => panic!("not a limits plan: {other}"),
    }
}

fn changes(report: &Report) -> Vec<(String, Kind, Option<u64>, Option<u64>)> {
    plan_of(report)
        .changes
        .iter()
        .map(|p| &p.change)
        .map(|c: &Change| (c.scope.clone(), c.kind, c.old, c.new))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_as_code_export_plan_apply_refuse_what_changed_and_converge() {
    let (emulator, ctl, config) = crate::deployed().await;
    let sdk = emulator.sdk_config().await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let store = DynamoStore::new(client.clone(), &config);
    let dir = workdir();

    let started = Instant::now();
    write_overrides(&client, &config.counters_table).await;
    eprintln!(
        "limits e2e: {OVERRIDES} overrides written (BatchWriteItem) in {:?}",
        started.elapsed()
    );
    // Usage: team-0007 holds 5; late/a exists (no override) with 1.
    let now = hybrid_counter::now_millis();
    store
        .add_best_effort(&scope("team-0007"), keys::BEST_EFFORT_NAME, 5, now)
        .await
        .unwrap();
    store
        .add_best_effort(&scope("late/a"), keys::BEST_EFFORT_NAME, 1, now)
        .await
        .unwrap();

    // Export adopts the live table: a plan of it has nothing to do.
    let exported = path(&dir, "limits.yaml");
    let started = Instant::now();
    let report = ctl.run(&["limits", "export", "--out", &exported]).await.unwrap();
    eprintln!("limits e2e: export of {OVERRIDES} overrides in {:?}", started.elapsed());
    let Report::LimitsExport(export) = &report else {
        panic!("{report}")
    };
    assert_eq!(export.overrides, OVERRIDES);
    let started = Instant::now();
    let same = ctl.run(&["limits", "plan", &exported]).await.unwrap();
    eprintln!("limits e2e: plan of the export in {:?}", started.elapsed());
    assert_eq!(same.exit_code(), exit::SUCCESS, "{same}");
    assert!(changes(&same).is_empty(), "{same}");
    assert_eq!(plan_of(&same).overrides, OVERRIDES);

    // The edit: change one, remove one, add one, a prefix rule over an
    // existing scope, and one lowered below its usage.
    let text = std::fs::read_to_string(&exported).unwrap();
    let edited = text
        .replace(
            "- scope: team-0001\n  limit: 11\n",
            "- scope: team-0001\n  limit: 5000\n  owner: payments\n  reason: contract 42\n",
        )
        .replace("- scope: team-0002\n  limit: 12\n", "")
        .replace("- scope: team-0007\n  limit: 17\n", "- scope: team-0007\n  limit: 2\n")
        + "- scope: fresh\n  limit: 50\n- prefix: late/\n  limit: 30\n";
    assert_ne!(edited, text, "the export's layout changed:\n{text}");
    let edited_path = path(&dir, "edited.yaml");
    std::fs::write(&edited_path, &edited).unwrap();
    let plan_path = path(&dir, "plan.json");
    let planned = ctl
        .run(&["limits", "plan", &edited_path, "--out", &plan_path])
        .await
        .unwrap();
    assert_eq!(planned.exit_code(), exit::FAILED, "{planned}");
    assert_eq!(
        changes(&planned),
        vec![
            ("fresh".into(), Kind::Added, None, Some(50)),
            ("late/a".into(), Kind::Added, None, Some(30)),
            ("team-0001".into(), Kind::Changed, Some(11), Some(5000)),
            ("team-0002".into(), Kind::Removed, Some(12), None),
            ("team-0007".into(), Kind::Changed, Some(17), Some(2)),
        ],
        "{planned}"
    );
    let flagged: Vec<_> = plan_of(&planned)
        .below_usage()
        .map(|c| (c.change.scope.clone(), c.usage))
        .collect();
    assert_eq!(flagged, vec![("team-0007".to_owned(), 5)], "{planned}");
    assert!(planned.to_string().contains("[from prefix late/]"), "{planned}");

    // Below usage without the flag: nothing is written.
    let refused = ctl.run(&["limits", "apply", &edited_path]).await.unwrap();
    assert_eq!(refused.exit_code(), exit::FAILED, "{refused}");
    assert!(refused.to_string().contains("--allow-below-usage"), "{refused}");
    assert_eq!(
        store.read_counters(&scope("team-0001")).await.unwrap().limit_override,
        Some(11)
    );

    // A hand-edited plan: its below_usage is not trusted (usage is read
    // again), and one made with another default limit is refused.
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    for change in json["changes"].as_array_mut().unwrap() {
        change["below_usage"] = false.into();
    }
    let edited_plan = path(&dir, "edited-plan.json");
    std::fs::write(&edited_plan, json.to_string()).unwrap();
    let rechecked = ctl.run(&["limits", "apply", "--plan", &edited_plan]).await.unwrap();
    assert_eq!(rechecked.exit_code(), exit::FAILED, "{rechecked}");
    assert!(
        rechecked.to_string().contains("team-0007: 2 below usage 5"),
        "{rechecked}"
    );
    json["default_limit"]["deployed"] = 7.into();
    std::fs::write(&edited_plan, json.to_string()).unwrap();
    let other_default = ctl.run(&["limits", "apply", "--plan", &edited_plan]).await.unwrap_err();
    assert!(other_default.to_string().contains("default limit 7"), "{other_default}");
    assert_eq!(
        store.read_counters(&scope("team-0001")).await.unwrap().limit_override,
        Some(11),
        "nothing written"
    );

    // Someone sets team-0001 between the plan and the apply.
    ctl.run(&["limit", "set", "team-0001", "4242"]).await.unwrap();
    let started = Instant::now();
    let applied = ctl
        .run(&["limits", "apply", "--plan", &plan_path, "--allow-below-usage"])
        .await
        .unwrap();
    eprintln!("limits e2e: apply of the 5-change plan in {:?}", started.elapsed());
    assert_eq!(applied.exit_code(), exit::FAILED, "{applied}");
    let Report::LimitsApply(apply) = &applied else {
        panic!("{applied}")
    };
    let outcome = |s: &str| apply.results.iter().find(|r| r.scope == s).map(|r| r.outcome.clone());
    assert_eq!(
        outcome("team-0001"),
        Some(Outcome::Refused {
            now: Some(4242),
            key: None
        })
    );
    for s in ["fresh", "late/a", "team-0002", "team-0007"] {
        assert_eq!(outcome(s), Some(Outcome::Written), "{s}: {applied}");
    }
    assert!(
        applied
            .to_string()
            .contains("refused  team-0001: changed since the plan (now 4242): re-run plan"),
        "{applied}"
    );
    let limit = |s: &'static str| {
        let store = store.clone();
        async move { store.read_counters(&scope(s)).await.unwrap().limit_override }
    };
    assert_eq!(limit("team-0001").await, Some(4242), "the concurrent change is kept");
    assert_eq!(limit("team-0002").await, None);
    assert_eq!(limit("team-0007").await, Some(2));
    assert_eq!((limit("fresh").await, limit("late/a").await), (Some(50), Some(30)));

    // Plan again: only what was refused; apply it; then nothing is left.
    let again = ctl.run(&["limits", "plan", &edited_path]).await.unwrap();
    assert_eq!(
        changes(&again),
        vec![("team-0001".into(), Kind::Changed, Some(4242), Some(5000))],
        "{again}"
    );
    let second = ctl.run(&["limits", "apply", &edited_path]).await.unwrap();
    assert_eq!(second.exit_code(), exit::SUCCESS, "{second}");
    let done = ctl.run(&["limits", "plan", &edited_path]).await.unwrap();
    assert_eq!(done.exit_code(), exit::SUCCESS, "{done}");
    assert!(done.to_string().contains("No changes"), "{done}");

    // Every override changed at once: the 1,000-write apply.
    let mut raised = hybrid_counter::limits::file::LimitsFile::parse("edited", &edited).unwrap();
    for entry in &mut raised.overrides {
        entry.limit = (entry.limit.get() + 1).try_into().unwrap();
    }
    let raised_path = path(&dir, "raised.yaml");
    std::fs::write(&raised_path, raised.to_yaml().unwrap()).unwrap();
    let started = Instant::now();
    let big = ctl.run(&["limits", "plan", &raised_path]).await.unwrap();
    eprintln!(
        "limits e2e: plan of {} changes (usage read for each) in {:?}",
        plan_of(&big).changes.len(),
        started.elapsed()
    );
    assert_eq!(plan_of(&big).changes.len(), OVERRIDES + 1, "{big}");
    let started = Instant::now();
    let big_apply = ctl
        .run(&["limits", "apply", &raised_path, "--allow-below-usage"])
        .await
        .unwrap();
    eprintln!(
        "limits e2e: plan and apply of {} changes in {:?}",
        OVERRIDES + 1,
        started.elapsed()
    );
    assert_eq!(big_apply.exit_code(), exit::SUCCESS, "{big_apply}");
    assert_eq!(
        ctl.run(&["limits", "plan", &raised_path]).await.unwrap().exit_code(),
        exit::SUCCESS
    );

    // Drift: status --limits names what changed outside the file, and a
    // scope created under a prefix entry after the apply.
    let limits_item = |report: &Report| match report {
        Report::Status(status) => status
            .attention
            .iter()
            .find(|a| a.starts_with("limit overrides"))
            .cloned(),
        other => panic!("not a status: {other}"),
    };
    let in_sync = ctl.run(&["status", "--limits", &raised_path]).await.unwrap();
    assert_eq!(limits_item(&in_sync), None, "{in_sync}");
    ctl.run(&["limit", "set", "team-0005", "1"]).await.unwrap();
    store
        .add_best_effort(&scope("late/b"), keys::BEST_EFFORT_NAME, 1, now)
        .await
        .unwrap();
    let drifted = ctl.run(&["status", "--limits", &raised_path]).await.unwrap();
    assert_eq!(drifted.exit_code(), exit::FAILED, "{drifted}");
    let item = limits_item(&drifted).unwrap_or_else(|| panic!("{drifted}"));
    assert!(item.contains("changed outside the file: team-0005"), "{item}");
    assert!(item.contains("late/b"), "{item}");

    // The ABA of `version`: aba is planned at version 1, then cleared and
    // set back (version 1 again, same limit); the plan's write is refused.
    ctl.run(&["limit", "set", "aba", "10"]).await.unwrap();
    let aba_path = path(&dir, "aba.yaml");
    std::fs::write(
        &aba_path,
        std::fs::read_to_string(&raised_path).unwrap() + "- scope: aba\n  limit: 20\n",
    )
    .unwrap();
    let aba_plan = path(&dir, "aba.json");
    ctl.run(&["limits", "plan", &aba_path, "--out", &aba_plan])
        .await
        .unwrap();
    ctl.run(&["limit", "clear", "aba"]).await.unwrap();
    ctl.run(&["limit", "set", "aba", "10"]).await.unwrap();
    let aba = ctl
        .run(&["limits", "apply", "--plan", &aba_plan, "--allow-below-usage"])
        .await
        .unwrap();
    let Report::LimitsApply(aba_apply) = &aba else {
        panic!("{aba}")
    };
    let aba_outcome = aba_apply
        .results
        .iter()
        .find(|r| r.scope == "aba")
        .map(|r| r.outcome.clone());
    assert_eq!(
        aba_outcome,
        Some(Outcome::Refused {
            now: Some(10),
            key: None
        }),
        "{aba}"
    );
    assert_eq!(
        limit("aba").await,
        Some(10),
        "the clear and set since the plan are kept"
    );

    // A bad file: exit 2, its line and column, nothing sent.
    let bad = path(&dir, "bad.yaml");
    std::fs::write(&bad, "overrides:\n  - scope: team-0003\n    limit: -1\n").unwrap();
    let err = ctl.run(&["limits", "apply", &bad]).await.unwrap_err();
    assert_eq!(err.exit_code(), exit::USAGE, "{err}");
    assert!(err.to_string().contains("bad.yaml:3:12"), "{err}");
    assert_eq!(limit("team-0003").await, Some(14));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The drift check as its own role (IAM enforced) with `LimitsFileUri`
/// set: it reads that one object, reports the override changed outside the
/// file, and a file that turns invalid or goes missing is a reported error,
/// not a failed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_check_compares_the_overrides_with_the_limits_file_in_s3() {
    let (emulator, ctl, config) = crate::deployed().await;
    let sdk = emulator.sdk_config().await;
    let s3 = hybrid_counter_aws::s3::client(&sdk);
    let bucket = "hck-e2e-ops-config";
    let key = "hc/limits.yaml";
    s3.create_bucket().bucket(bucket).send().await.unwrap();
    let put = |body: &'static str| {
        s3.put_object()
            .bucket(bucket)
            .key(key)
            .body(aws_sdk_s3::primitives::ByteStream::from_static(body.as_bytes()))
            .send()
    };
    put("overrides:\n  - {scope: acme, limit: 5}\n  - {scope: globex, limit: 9}\n")
        .await
        .unwrap();
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    let now = hybrid_counter::now_millis();
    // `globex` as in the file; `acme` set outside it.
    store.set_limit(&scope("globex"), Some(9), now).await.unwrap();
    store.set_limit(&scope("acme"), Some(7), now).await.unwrap();

    let uri = format!("{}=s3://{bucket}/{key}", stack::params::LIMITS_FILE_URI);
    let outputs = ctl.deploy(&[uri.as_str()]).await.outputs;
    let function = outputs[stack::outputs::DRIFT_CHECK_FUNCTION].clone();
    let functions = e2e::KitFunctions::new(&config, &sdk);
    let run = || async {
        match functions
            .invoke(&function, serde_json::json!({"source": "aws.events"}))
            .await
        {
            esm_runner::Invocation::Response(response) => response,
            other => panic!("the drift check failed: {other:?}"),
        }
    };

    let response = run().await;
    let limits = &response["limits"];
    assert_eq!(limits["changed"], serde_json::json!(["acme"]), "{response}");
    assert_eq!(limits["removed"], serde_json::json!([]), "{response}");
    assert!(limits.get("error").is_none(), "{response}");
    assert!(response["run"]["scopes_checked"].is_u64(), "{response}");

    // An invalid file: its line and column, and the counters' check ran.
    put("overrides:\n  - {scope: acme, limit: -1}\n").await.unwrap();
    let response = run().await;
    let error = response["limits"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains(&format!("s3://{bucket}/{key}:2:")), "{response}");
    assert!(response["run"]["scopes_checked"].is_u64(), "{response}");
    assert_eq!(
        emulator.take_denials(),
        Vec::<String>::new(),
        "the role reads its object"
    );

    // Gone: reported (NoSuchKey, or AccessDenied where the role may not
    // list the bucket), the run still answers.
    s3.delete_object().bucket(bucket).key(key).send().await.unwrap();
    let response = run().await;
    let error = response["limits"]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("cannot read the limits file"), "{response}");
    // A denial here is the missing object as AWS answers it without
    // ListBucket, not a missing grant.
    emulator.take_denials();
}

/// The CI plan job's role, with exactly `counterctl policy limits-plan`
/// (IAM enforced): plan and export work, apply is denied and writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ci_role_with_the_limits_plan_policy_plans_and_exports_and_cannot_apply() {
    let (emulator, ctl, config) = crate::deployed().await;
    let sdk = emulator.sdk_config().await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), &config);
    store
        .set_limit(&scope("acme"), Some(7), hybrid_counter::now_millis())
        .await
        .unwrap();
    let stack_scope = ctl.scope("hybrid-counter").await;
    let ci = e2e::iam::role_credentials(
        &sdk,
        &stack_scope.account,
        "hc-limits-plan",
        "/",
        &stack::policies::limits_plan_policy(&stack_scope),
        "limits-plan",
    )
    .await;
    let dir = workdir();
    let file = path(&dir, "limits.yaml");
    std::fs::write(&file, "overrides:\n  - {scope: acme, limit: 5}\n").unwrap();

    let planned = ctl.run_as(&ci, &["limits", "plan", &file]).await.unwrap();
    assert_eq!(planned.exit_code(), exit::FAILED, "{planned}");
    assert_eq!(
        changes(&planned),
        vec![("acme".to_owned(), Kind::Changed, Some(7), Some(5))]
    );
    let exported = ctl
        .run_as(&ci, &["limits", "export", "--out", &path(&dir, "export.yaml")])
        .await
        .unwrap();
    assert!(matches!(exported, Report::LimitsExport(_)), "{exported}");
    assert_eq!(
        emulator.take_denials(),
        Vec::<String>::new(),
        "plan and export need nothing more"
    );

    let applied = ctl.run_as(&ci, &["limits", "apply", &file]).await;
    assert!(
        applied.as_ref().map_or(true, |r| r.exit_code() != exit::SUCCESS),
        "{applied:?}"
    );
    assert!(!emulator.take_denials().is_empty(), "apply's write is denied");
    let table = store.scan_limits(&[]).await.unwrap();
    assert_eq!(table.overrides["acme"].limit, 7, "nothing written");
}

/// At `ScopeKeyShards=4` an override is a copy on each key, as the
/// operator role writes and reads them: `limit set` writes all four, a
/// write cut short (one copy gone, one at another limit) shows in `limit
/// get` and as a change in `limits plan`, and `limits apply` repairs every
/// copy, after which the plan is empty.
#[tokio::test]
async fn over_four_keys_a_copy_missing_or_disagreeing_is_planned_and_repaired_by_apply() {
    let (emulator, ctl, config) = e2e::counterctl::deployed_over_keys(4, 1).await;
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&emulator.sdk_config().await), &config);
    let copies = |report: Report| match report {
        Report::Limit(limit) => (limit.copies.clone(), limit.copies_disagree),
        other => panic!("not a limit report: {other}"),
    };

    let set = ctl.run(&["limit", "set", "acme", "40"]).await.unwrap();
    assert_eq!(copies(set), (vec![Some(40); 4], false));
    // Each copy carries its key's share, from what the keys hold (nothing
    // here: the even split), read through the operator role's Query.
    for k in 0..4 {
        let key = scope(&format!("acme#{k}"));
        let read = store.read_counters(&key).await.unwrap();
        assert_eq!((read.limit_override, read.limit_share), (Some(40), Some(10)), "{key}");
    }

    // A `limit set` cut short: key 2 lost its copy, key 3 holds another limit.
    store.set_limit(&scope("acme#2"), None, 1).await.unwrap();
    store.set_limit(&scope("acme#3"), Some(15), 1).await.unwrap();
    let get = ctl.run(&["limit", "get", "acme"]).await.unwrap();
    assert!(get.to_string().contains("disagree"), "{get}");
    assert_eq!(copies(get), (vec![Some(40), Some(40), None, Some(15)], true));

    let dir = workdir();
    let file = path(&dir, "limits.yaml");
    std::fs::write(&file, "overrides:\n  - {scope: acme, limit: 40}\n").unwrap();
    let planned = ctl.run(&["limits", "plan", &file]).await.unwrap();
    assert_eq!(planned.exit_code(), exit::FAILED, "{planned}");
    assert_eq!(
        changes(&planned),
        [("acme".to_owned(), Kind::Changed, Some(40), Some(40))]
    );
    assert!(planned.to_string().contains("COPIES DISAGREE"), "{planned}");

    let applied = ctl.run(&["limits", "apply", &file]).await.unwrap();
    assert_eq!(applied.exit_code(), exit::SUCCESS, "{applied}");
    let Report::LimitsApply(apply) = &applied else {
        panic!("{applied}")
    };
    assert_eq!(apply.results.len(), 1, "{applied}");
    assert_eq!(apply.results[0].outcome, Outcome::Written, "{applied}");
    let get = ctl.run(&["limit", "get", "acme"]).await.unwrap();
    assert_eq!(copies(get), (vec![Some(40); 4], false));
    let mut shares = Vec::new();
    for k in 0..4 {
        shares.push(
            store
                .read_counters(&scope(&format!("acme#{k}")))
                .await
                .unwrap()
                .limit_share,
        );
    }
    assert_eq!(shares, [Some(10); 4], "every copy rewritten with its share");
    let again = ctl.run(&["limits", "plan", &file]).await.unwrap();
    assert_eq!(again.exit_code(), exit::SUCCESS, "{again}");
    assert!(changes(&again).is_empty(), "{again}");
}
