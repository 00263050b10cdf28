//! Progress and log lines on stderr, never stdout: a spinner (indicatif)
//! when stderr is a terminal and `NO_COLOR` is not set (the spinner's
//! redraws are escape sequences), plain lines otherwise, nothing at all
//! with `--quiet` (and in tests). Results are printed by `main` from the
//! report.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How progress shows on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A spinner redrawn in place, turned into a bar for long passes.
    Spinner,
    /// One plain line per step, for logs and pipes.
    Lines,
    /// Nothing: `--quiet`.
    Silent,
}

impl Progress {
    /// `--quiet` silences everything; a spinner only on a terminal without
    /// `NO_COLOR`; plain lines otherwise.
    pub fn choose(quiet: bool, stderr_is_terminal: bool, no_color: bool) -> Self {
        if quiet {
            Self::Silent
        } else if stderr_is_terminal && !no_color {
            Self::Spinner
        } else {
            Self::Lines
        }
    }
}

/// Where progress goes.
pub struct Ui {
    spinner: Option<ProgressBar>,
    quiet: bool,
    /// Whether a question may be asked (on a terminal).
    prompts: bool,
}

impl Ui {
    /// Progress on stderr as `progress` says; questions may be asked when
    /// stdin and stderr are terminals.
    pub fn new(progress: Progress) -> Self {
        let spinner = (progress == Progress::Spinner).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(spinner_style());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            spinner,
            quiet: progress == Progress::Silent,
            prompts: true,
        }
    }

    /// Prints nothing and asks nothing.
    pub fn quiet() -> Self {
        Self {
            spinner: None,
            quiet: true,
            prompts: false,
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

    /// Whether the operator can be asked a question (also with `--quiet`:
    /// a question is not progress).
    pub fn can_prompt(&self) -> bool {
        self.prompts && std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinner_only_on_a_terminal_without_no_color_and_nothing_when_quiet() {
        assert_eq!(Progress::choose(false, true, false), Progress::Spinner);
        assert_eq!(Progress::choose(false, true, true), Progress::Lines);
        assert_eq!(Progress::choose(false, false, false), Progress::Lines);
        for (terminal, no_color) in [(true, false), (true, true), (false, false), (false, true)] {
            assert_eq!(Progress::choose(true, terminal, no_color), Progress::Silent);
        }
    }

    #[test]
    fn silent_progress_has_no_spinner_and_a_hidden_bar() {
        let ui = Ui::new(Progress::Silent);
        assert!(ui.spinner.is_none() && ui.quiet);
        assert!(ui.bar(10, "x").is_hidden());
        let lines = Ui::new(Progress::Lines);
        assert!(lines.spinner.is_none() && !lines.quiet);
    }
}
