//! `counterctl`, the operator CLI of the hybrid counter kit, as a library:
//! the binary (`main.rs`) only parses, calls [`execute`] and prints. The
//! end-to-end tests drive the same functions against the emulator.
//!
//! Layout, top to bottom: a module uses only those below it, never one
//! that uses it back (`tools/module-graph.py` checks it, `make lint`).
//! [`report`] gathers the commands' reports into a [`report::Report`];
//! [`commands`] holds the commands, a module each, or a folder for those
//! with several concerns: [`commands::deploy`] is the stack lifecycle
//! (plan, deploy, destroy, the CloudFormation engine, the change set diff,
//! packaging and the emulator's template patch), [`commands::redrive`] and
//! [`commands::audit`] have a file per concern; [`connect`] builds the SDK
//! clients and starts the local emulator; [`config`] is the validated
//! command line with each command's options (no I/O); [`progress`] draws on
//! stderr; [`cli`] is the raw command line; [`error`] and [`exit`] define
//! failures and exit codes, and use nothing above them.
//!
//! `local run`, the local event-source runner, is compiled only with the
//! `local` feature; the default build, the one for AWS, leaves it out.

pub mod cli;
pub mod commands;
pub mod config;
pub mod connect;
pub mod error;
pub mod exit;
pub mod progress;
pub mod report;

pub use config::Config;
pub use error::{Error, Result};
pub use report::Report;

use commands::Context;
use config::CommandConfig;
use progress::Ui;

/// Runs the configured command and returns its report. The handler zips
/// are found and hashed before anything is started or sent; `completions`
/// and `man` connect to nothing.
pub async fn execute(config: &Config, ui: &Ui) -> Result<Report> {
    match &config.command {
        CommandConfig::Completions(shell) => return Ok(Report::Generated(commands::docs::completions(*shell))),
        CommandConfig::Man => return Ok(Report::Generated(commands::docs::man()?)),
        CommandConfig::OperatorPolicy(options) => {
            return Ok(Report::Generated(commands::policy::operator(
                &config.stack_name,
                options,
            )?));
        }
        _ => {}
    }
    let artifacts = match &config.command {
        CommandConfig::Plan(inputs) | CommandConfig::Deploy { inputs, .. } => {
            commands::deploy::package::locate_artifacts(config, inputs)?
        }
        _ => Vec::new(),
    };
    // A bad limits file fails before anything is sent.
    let limits_input = match &config.command {
        CommandConfig::Limits(options) => Some(commands::limits::read_input(options)?),
        CommandConfig::Status { limits: Some(path) } => {
            Some(commands::limits::Input::File(commands::limits::read_file(path)?))
        }
        _ => None,
    };
    let clients = connect::connect(config, ui).await?;
    let ctx = Context {
        config,
        clients: &clients,
        ui,
    };
    // Each command's future is boxed: inlined, the largest of them would
    // make this future (and every caller's that joins several commands on
    // one thread) as large as all of them together, enough to overflow a
    // test thread's 2 MiB stack.
    let report = match &config.command {
        CommandConfig::Plan(inputs) => {
            Report::Plan(Box::pin(commands::deploy::plan::run(&ctx, inputs, artifacts)).await?)
        }
        CommandConfig::Deploy {
            inputs,
            timeout,
            allow_replicas,
        } => Report::Deploy(
            Box::pin(commands::deploy::run(
                &ctx,
                inputs,
                artifacts,
                *timeout,
                *allow_replicas,
            ))
            .await?,
        ),
        CommandConfig::Destroy(options) => {
            Report::Destroy(Box::pin(commands::deploy::destroy::run(&ctx, *options)).await?)
        }
        CommandConfig::Status { limits } => {
            let against = match (limits, &limits_input) {
                (Some(path), Some(commands::limits::Input::File(file))) => Some((path.as_path(), file)),
                _ => None,
            };
            Report::Status(Box::new(Box::pin(commands::status::run(&ctx, against)).await?))
        }
        CommandConfig::Audit(options) => Report::Audit(Box::pin(commands::audit::run(&ctx, options)).await?),
        CommandConfig::Usage(scope) => Report::Usage(Box::pin(commands::scope::usage(&ctx, scope)).await?),
        CommandConfig::Limit { scope, action } => {
            Report::Limit(Box::pin(commands::scope::limit(&ctx, scope, action)).await?)
        }
        CommandConfig::Seq { scope, action } => {
            Report::Seq(Box::pin(commands::scope::sequence(&ctx, scope, action)).await?)
        }
        CommandConfig::Limits(options) => {
            let input = limits_input.unwrap_or(commands::limits::Input::None);
            Box::pin(commands::limits::run(&ctx, options, input)).await?.into()
        }
        CommandConfig::Load(options) => Report::Load(Box::pin(commands::load::run(&ctx, options)).await?),
        CommandConfig::Redrive(options) => Report::Redrive(Box::pin(commands::redrive::run(&ctx, options)).await?),
        #[cfg(feature = "local")]
        CommandConfig::LocalRun(options) => Report::Local(Box::pin(commands::local::run(&ctx, options)).await?),
        // Config::from_cli refuses `local run` in a build without the runner.
        #[cfg(not(feature = "local"))]
        CommandConfig::LocalRun(_) => return Err(Error::NoLocalRunner),
        CommandConfig::Completions(_) | CommandConfig::Man | CommandConfig::OperatorPolicy(_) => {
            unreachable!("answered before connecting")
        }
        CommandConfig::Verify(options) => Report::Verify(Box::pin(commands::verify::run(&ctx, options)).await?),
    };
    Ok(report)
}
