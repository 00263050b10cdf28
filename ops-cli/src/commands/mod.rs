//! The commands, one module each, or one folder for those with several
//! concerns; each returns its own report type (`Serialize` and `Display`).
//! [`deploy`] is the stack lifecycle: `plan`, `deploy`, `destroy` and the
//! CloudFormation, change set, packaging and emulator machinery they share.
//! [`status`] and `local` (`local run`, with the `local` feature) read the
//! stack; [`audit`], [`scope`] (`usage`, `limit`, `seq`), [`load`] and [`redrive`]
//! work against its data, found through [`deployed`]. [`docs`]
//! (`completions`, `man`) describes counterctl itself and [`policy`] prints
//! the operator's IAM policy; they send nothing. [`replicas`] finds the
//! tables' global-table replicas, which `status` flags and `deploy` refuses.
//!
//! This file holds only what every command is given, the [`Context`], the
//! [`Location`] its report starts with, and [`write_outputs`], the stack's
//! outputs as `deploy` and `status` print them; it uses none of the commands.

pub mod audit;
pub mod deploy;
pub mod deployed;
pub mod docs;
pub mod drift_check;
pub mod limits;
pub mod load;
#[cfg(feature = "local")]
pub mod local;
pub mod policy;
pub mod redrive;
pub mod replicas;
pub mod scope;
pub mod status;
pub mod verify;

use serde::Serialize;

use crate::config::Config;
use crate::connect::Clients;
use crate::error::Error;
use crate::progress::Ui;

/// What every command works with.
pub struct Context<'a> {
    pub config: &'a Config,
    pub clients: &'a Clients,
    pub ui: &'a Ui,
}

impl Context<'_> {
    fn not_found(&self) -> Error {
        Error::StackNotFound {
            name: self.config.stack_name.clone(),
            target: self.config.target.to_string(),
            region: self.clients.region.clone(),
        }
    }
}

/// A stack's outputs as the reports print them: `Outputs:`, then one line
/// each, the keys padded to the longest.
pub fn write_outputs(
    f: &mut std::fmt::Formatter<'_>,
    outputs: &std::collections::BTreeMap<String, String>,
) -> std::fmt::Result {
    writeln!(f, "Outputs:")?;
    let width = outputs.keys().map(String::len).max().unwrap_or(0);
    for (key, value) in outputs {
        writeln!(f, "  {key:<width$}  {value}")?;
    }
    Ok(())
}

/// Where a command ran, for the reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Location {
    pub stack_name: String,
    pub target: String,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl Location {
    fn of(ctx: &Context<'_>) -> Self {
        Self {
            stack_name: ctx.config.stack_name.clone(),
            target: ctx.config.target.to_string(),
            region: ctx.clients.region.clone(),
            endpoint: ctx.clients.endpoint.clone(),
        }
    }
}
