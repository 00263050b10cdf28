//! Every command that reads the stack, run where no stack was ever deployed:
//! each fails with the not-found exit code and a message naming the stack,
//! and none of them creates anything on the way.

use e2e::Emulator;
use e2e::counterctl::Counterctl;
use ops_cli::exit;

const STACK: &str = "never-deployed";

#[tokio::test]
async fn commands_on_a_stack_that_does_not_exist_exit_3_and_name_it() {
    let emulator = Emulator::start();
    let cli = Counterctl::new(&emulator);
    let commands: [&[&str]; 7] = [
        &["status"],
        &["audit"],
        &["audit", "--scope", "tenant-a"],
        &["usage", "tenant-a"],
        &["limit", "get", "tenant-a"],
        &["limit", "set", "tenant-a", "5"],
        &["redrive", "--dry-run"],
    ];
    for command in commands {
        let mut args = vec!["--stack-name", STACK];
        args.extend_from_slice(command);
        let err = match cli.run(&args).await {
            Ok(report) => panic!("{command:?} on a missing stack succeeded: {report:?}"),
            Err(err) => err,
        };
        assert_eq!(err.exit_code(), exit::NOT_FOUND, "{command:?}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(STACK) && message.contains("does not exist"),
            "{command:?}: {message}"
        );
    }
    // Nothing was created while failing: no stack, no table.
    let config = emulator.sdk_config().await;
    let stacks = aws_sdk_cloudformation::Client::new(&config)
        .list_stacks()
        .send()
        .await
        .expect("list stacks");
    assert!(stacks.stack_summaries().is_empty(), "{stacks:?}");
    let tables = aws_sdk_dynamodb::Client::new(&config)
        .list_tables()
        .send()
        .await
        .expect("list tables");
    assert!(tables.table_names().is_empty(), "{tables:?}");
}
