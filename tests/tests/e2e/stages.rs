//! Stages and tags: two stacks of the kit (`hc-dev`, `hc-prod`) deploy side
//! by side on one emulator with no physical name in common, each works on
//! its own tables, each lists its own alarms and topic (`AlarmEmail` adds a
//! subscription to it; a stage given `AlarmTopicArn` creates no topic and
//! notifies the one given); `--tag` tags the
//! stack (CloudFormation propagates stack tags to the resources), `plan`
//! shows the tags, and a later deploy without `--tag` keeps them.

use std::collections::{BTreeMap, BTreeSet};

use e2e::Emulator;
use e2e::counterctl::Counterctl;
use hybrid_counter::{Counter, CounterConfig};
use hybrid_counter_aws::DynamoStore;
use ops_cli::Report;
use ops_cli::commands::deploy::Outcome;
use serde_dynamo::Item;
use stack::outputs;

use crate::{NOW, id, scope};

async fn stack_tags(cfn: &aws_sdk_cloudformation::Client, stack: &str) -> BTreeMap<String, String> {
    let described = cfn
        .describe_stacks()
        .stack_name(stack)
        .send()
        .await
        .expect("describe stack");
    described.stacks()[0]
        .tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_owned(),
                t.value().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The stage's request path, as its api function (its role).
async fn counter(emulator: &Emulator, outputs: &BTreeMap<String, String>) -> Counter<DynamoStore> {
    let config = CounterConfig {
        resources_table: outputs[outputs::RESOURCES_TABLE].clone(),
        counters_table: outputs[outputs::COUNTERS_TABLE].clone(),
        default_limit: Some(100),
        eventual_shards: 1,
        best_effort_shards: 1,
        admission: Default::default(),
        scope_keys: Default::default(),
    };
    let api = e2e::iam::function_sdk_config(&emulator.sdk_config().await, &outputs[outputs::API_FUNCTION]).await;
    Counter::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&api), &config), 100)
}

#[tokio::test]
async fn two_stages_deploy_side_by_side_with_their_own_names_data_alarms_and_tags() {
    let emulator = Emulator::start();
    let cli = Counterctl::new(&emulator);
    let services = crate::deploy::Services::new(&emulator).await;
    let cfn = &services.cfn;

    // plan shows the tags it would put on the new stack.
    let plan = match cli
        .run(&cli.with_zips(&["--stack-name", "hc-dev", "plan", "--tag", "stage=dev"]))
        .await
    {
        Ok(Report::Plan(plan)) => plan,
        other => panic!("plan: {other:?}"),
    };
    assert_eq!(plan.tags, BTreeMap::from([("stage".to_owned(), "dev".to_owned())]));
    assert!(plan.to_string().contains("stage=dev  (new)"), "{plan}");

    let dev = cli
        .deploy_with(&[
            "--stack-name",
            "hc-dev",
            "deploy",
            "--tag",
            "stage=dev",
            "--tag",
            "team=counters",
        ])
        .await;
    let prod = cli
        .deploy_with(&[
            "--stack-name",
            "hc-prod",
            "deploy",
            "--tag",
            "stage=prod",
            "--param",
            "AlarmEmail=oncall@example.com",
        ])
        .await;
    assert_eq!(
        (dev.outcome, prod.outcome),
        (Outcome::Created, Outcome::Created),
        "{dev}\n{prod}"
    );

    // No physical name in common: tables, queues, functions, roles, log
    // groups, alarms, dashboard, topic, key.
    let dev_ids: Vec<String> = services.physical_ids("hc-dev").await.into_values().collect();
    let prod_ids: BTreeSet<String> = services.physical_ids("hc-prod").await.into_values().collect();
    let template = stack::template();
    assert_eq!(dev_ids.len(), crate::deploy::created_by_default(&template).len());
    let prod_resources = services.physical_ids("hc-prod").await;
    assert_eq!(
        prod_resources.len(),
        crate::deploy::created_by_default(&template).len() + 1,
        "AlarmEmail adds the subscription (and nothing else: the drift check stays off)"
    );
    assert!(prod_resources.contains_key(stack::logical::ALARM_EMAIL_SUBSCRIPTION));
    let shared: Vec<&String> = dev_ids.iter().filter(|id| prod_ids.contains(*id)).collect();
    assert!(shared.is_empty(), "physical ids in both stacks: {shared:?}");
    for key in [
        outputs::RESOURCES_TABLE,
        outputs::COUNTERS_TABLE,
        outputs::DLQ1_URL,
        outputs::API_FUNCTION,
        outputs::DLQ2_ALARM_NAME,
        outputs::ALARM_TOPIC_ARN,
        outputs::DASHBOARD_NAME,
    ] {
        assert_ne!(dev.outputs[key], prod.outputs[key], "{key}");
        assert!(dev.outputs[key].contains("hc-dev"), "{key}: {}", dev.outputs[key]);
    }

    // Each works on its own data.
    let (dev_counter, prod_counter) = (
        counter(&emulator, &dev.outputs).await,
        counter(&emulator, &prod.outputs).await,
    );
    let s = scope("acct");
    dev_counter.create(&s, &id("w1"), Item::default(), NOW).await.unwrap();
    dev_counter.create(&s, &id("w2"), Item::default(), NOW).await.unwrap();
    prod_counter
        .create(&s, &id("w1"), Item::default(), NOW)
        .await
        .expect("the same id in the other stage");
    assert_eq!(dev_counter.usage(&s).await.unwrap().best_effort, 2);
    assert_eq!(prod_counter.usage(&s).await.unwrap().best_effort, 1);

    // Each lists its own alarms, all notifying its own topic.
    for (stage, report) in [("hc-dev", &dev), ("hc-prod", &prod)] {
        let status = match cli.run(&["--stack-name", stage, "status"]).await {
            Ok(Report::Status(status)) => status,
            other => panic!("status {stage}: {other:?}"),
        };
        let topic = report.outputs[outputs::ALARM_TOPIC_ARN].clone();
        assert_eq!(status.alarm_topic.as_deref(), Some(topic.as_str()));
        assert!(!status.alarms.is_empty());
        for alarm in &status.alarms {
            assert!(alarm.name.starts_with(&format!("{stage}-")), "{}", alarm.name);
            assert_eq!(alarm.actions, [topic.as_str()], "{}", alarm.name);
        }
        // No local runner in this test; its deploy took the DLQ1 mapping over for one.
        assert!(e2e::counterctl::healthy_but_for_the_stopped_runner(&status), "{status}");
    }

    // Tags: on the stack, and kept by a later deploy without --tag.
    let expected = BTreeMap::from([
        ("stage".to_owned(), "dev".to_owned()),
        ("team".to_owned(), "counters".to_owned()),
    ]);
    assert_eq!(stack_tags(cfn, "hc-dev").await, expected);
    assert_eq!(dev.tags, expected);
    assert!(
        dev.to_string().contains("Stack tags: stage=dev, team=counters"),
        "{dev}"
    );
    // CloudFormation propagates stack tags to every resource that takes
    // tags; fakecloud 0.51 keeps them on the stack only (its functions,
    // queues, tables and alarms list no tags), so that is not checked here.
    let again = cli.deploy_with(&["--stack-name", "hc-dev", "deploy"]).await;
    assert_eq!(again.outcome, Outcome::Unchanged, "{again}");
    assert_eq!(stack_tags(cfn, "hc-dev").await, expected, "kept");
    // A new tag is added to the others, not instead of them.
    let retagged = cli
        .deploy_with(&["--stack-name", "hc-dev", "deploy", "--tag", "owner=ops"])
        .await;
    assert!(retagged.succeeded(), "{retagged}");
    let mut with_owner = expected.clone();
    with_owner.insert("owner".to_owned(), "ops".to_owned());
    assert_eq!(stack_tags(cfn, "hc-dev").await, with_owner);
    assert_eq!(
        stack_tags(cfn, "hc-prod").await,
        BTreeMap::from([("stage".to_owned(), "prod".to_owned())])
    );

    // A stage may send its alarms to an existing topic: then it creates
    // no topic, no key and no subscription of its own.
    let dev_topic = dev.outputs[outputs::ALARM_TOPIC_ARN].clone();
    let topic_param = format!("AlarmTopicArn={dev_topic}");
    let shared = cli
        .deploy_with(&[
            "--stack-name",
            "hc-qa",
            "deploy",
            "--param",
            &topic_param,
            "--param",
            "AlarmEmail=ignored@example.com",
        ])
        .await;
    assert_eq!(shared.outcome, Outcome::Created, "{shared}");
    assert_eq!(shared.outputs[outputs::ALARM_TOPIC_ARN], dev_topic);
    let qa_resources = services.physical_ids("hc-qa").await;
    for id in [
        stack::logical::ALARM_TOPIC,
        stack::logical::ALARM_TOPIC_KEY,
        stack::logical::ALARM_EMAIL_SUBSCRIPTION,
    ] {
        assert!(
            !qa_resources.contains_key(id),
            "{id} created although a topic was given"
        );
    }
    let status = match cli.run(&["--stack-name", "hc-qa", "status"]).await {
        Ok(Report::Status(status)) => status,
        other => panic!("status hc-qa: {other:?}"),
    };
    assert!(
        status.alarms.iter().all(|a| a.actions == [dev_topic.as_str()]),
        "{status}"
    );
}
