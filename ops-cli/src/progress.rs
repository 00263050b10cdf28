//! Progress and log lines on stderr, never stdout: a spinner (indicatif)
//! when stderr is a terminal, plain lines otherwise, nothing at all in
//! quiet mode (tests). Results are printed by `main` from the report.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress goes.
pub struct Ui {
    spinner: Option<ProgressBar>,
    quiet: bool,
}

impl Ui {
    /// A spinner on stderr if it is a terminal, plain log lines otherwise.
    pub fn stderr() -> Self {
        let spinner = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(spinner_style());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self { spinner, quiet: false }
    }

    /// Prints nothing.
    pub fn quiet() -> Self {
        Self {
            spinner: None,
            quiet: true,
        }
    }

    /// What is happening now: the spinner's message, or a log line.
    pub fn step(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.spinner {
            Some(bar) => bar.set_message(message),
            None => self.log(message),
        }
    }

    /// A line that stays (a stack event, a note), above the spinner.
    pub fn log(&self, line: impl AsRef<str>) {
        if self.quiet {
            return;
        }
        match &self.spinner {
            Some(bar) => bar.println(line.as_ref()),
            None => eprintln!("{}", line.as_ref()),
        }
    }

    /// A progress bar of `len` steps: the spinner turned into a bar until
    /// the returned [`Bar`] is dropped; hidden when quiet or not a terminal.
    pub fn bar(&self, len: u64, message: &str) -> Bar {
        match &self.spinner {
            Some(spinner) => {
                spinner.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                spinner.set_length(len);
                spinner.set_position(0);
                spinner.set_message(message.to_owned());
                Bar {
                    bar: spinner.clone(),
                    borrowed: true,
                }
            }
            None => Bar {
                bar: ProgressBar::hidden(),
                borrowed: false,
            },
        }
    }

    /// Removes the spinner, so the report prints on a clean line.
    pub fn finish(&self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }

    /// Whether the operator can be asked a question.
    pub fn can_prompt(&self) -> bool {
        !self.quiet && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    /// Asks on stderr and reads one line from stdin.
    pub fn prompt(&self, question: &str) -> std::io::Result<String> {
        if let Some(bar) = &self.spinner {
            bar.suspend(|| eprint!("{question}"));
        } else {
            eprint!("{question}");
        }
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        Ok(answer.trim().to_owned())
    }
}

fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// A progress bar lent by [`Ui::bar`]; the spinner comes back when it drops.
pub struct Bar {
    bar: ProgressBar,
    borrowed: bool,
}

impl std::ops::Deref for Bar {
    type Target = ProgressBar;

    fn deref(&self) -> &ProgressBar {
        &self.bar
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if self.borrowed {
            self.bar.set_style(spinner_style());
            self.bar.unset_length();
        }
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        self.finish();
    }
}
