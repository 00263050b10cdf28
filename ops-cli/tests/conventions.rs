//! The command-line conventions of `counterctl` as a process: shell
//! completions and the man page on stdout, `--quiet` leaving only results,
//! `NO_COLOR` and a non-terminal leaving no escape sequences, and wrong
//! arguments exiting 2 with a clear message.
//!
//! The commands that need a service talk to a stand-in on a loopback port
//! that answers the emulator's health probe and says, to anything else,
//! that the stack does not exist (CloudFormation's own error): enough for
//! `destroy` to print its progress and its report, with no emulator.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};

use clap::CommandFactory;

const ESC: char = '\u{1b}';

fn counterctl(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_counterctl"));
    command
        .args(args)
        // The developer's settings must not change the outcome.
        .env_remove("AWS_REGION")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("LOCALSTACK_AUTH_TOKEN")
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    for (key, value) in vars {
        command.env(key, value);
    }
    command.output().expect("run counterctl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback endpoint where the emulator is healthy and no stack exists;
/// answers until the test process ends.
fn no_stack_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let (status, content) = if request_line.contains("/_fakecloud/health") {
                ("200 OK", "ok".to_owned())
            } else {
                (
                    "400 Bad Request",
                    "<ErrorResponse><Error><Type>Sender</Type><Code>ValidationError</Code>\
                     <Message>Stack with id hybrid-counter does not exist</Message></Error>\
                     <RequestId>r</RequestId></ErrorResponse>"
                        .to_owned(),
                )
            };
            let mut stream = reader.into_inner();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{content}",
                content.len()
            );
        }
    });
    endpoint
}

#[test]
fn bash_completions_name_every_subcommand_and_go_to_stdout() {
    for args in [
        &["completions", "bash"][..],
        &["--output", "json", "completions", "bash"],
    ] {
        let output = counterctl(args, &[]);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
        let script = text(&output.stdout);
        assert!(script.contains("_counterctl()"), "{script}");
        let subcommands: Vec<String> = ops_cli::cli::Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        assert!(subcommands.len() >= 12, "{subcommands:?}");
        for subcommand in &subcommands {
            assert!(
                script.contains(&format!("counterctl,{subcommand})")),
                "{subcommand} is not completed"
            );
        }
        assert!(script.contains("--quiet"), "global flags are completed too");
    }
    let zsh = text(&counterctl(&["completions", "zsh"], &[]).stdout);
    assert!(zsh.starts_with("#compdef counterctl"), "{zsh}");
}

#[test]
fn the_man_page_is_roff_with_the_commands_and_exit_codes() {
    let output = counterctl(&["man"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let page = text(&output.stdout);
    assert!(page.contains(".TH counterctl 1"), "{page}");
    assert!(
        page.contains("counterctl\\-redrive") || page.contains("redrive"),
        "{page}"
    );
    assert!(page.contains("Exit codes:"), "{page}");
}

#[test]
fn wrong_arguments_of_the_new_commands_exit_2_with_a_clear_message() {
    let cases: [(&[&str], &str); 3] = [
        (&["completions", "tcsh"], "invalid value 'tcsh' for '<SHELL>'"),
        (&["completions"], "the following required arguments were not provided"),
        (&["man", "extra"], "unexpected argument 'extra'"),
    ];
    for (args, clue) in cases {
        let output = counterctl(args, &[]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(clue),
            "{args:?}: {stderr}"
        );
    }
    let stderr = text(&counterctl(&["completions", "tcsh"], &[]).stderr);
    assert!(
        stderr.contains("[possible values: bash, elvish, fish, powershell, zsh]"),
        "{stderr}"
    );
}

#[test]
fn quiet_leaves_only_the_result() {
    let endpoint = no_stack_endpoint();
    let loud = counterctl(&["--endpoint-url", &endpoint, "destroy"], &[]);
    assert_eq!(loud.status.code(), Some(0), "{}", text(&loud.stderr));
    assert!(
        text(&loud.stderr).contains("reading stack hybrid-counter"),
        "without --quiet the progress is on stderr: {}",
        text(&loud.stderr)
    );
    let quiet = counterctl(&["--endpoint-url", &endpoint, "destroy", "--quiet"], &[]);
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet.stderr));
    assert!(
        quiet.stderr.is_empty(),
        "no progress, no informational line: {}",
        text(&quiet.stderr)
    );
    assert_eq!(text(&quiet.stdout), text(&loud.stdout), "the same result");
    assert!(
        text(&quiet.stdout).contains("does not exist"),
        "{}",
        text(&quiet.stdout)
    );
    // Errors still say what went wrong, and exit codes stay.
    let missing = counterctl(&["--endpoint-url", &endpoint, "--quiet", "status"], &[]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        text(&missing.stderr).starts_with("error: stack hybrid-counter does not exist"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn no_color_turns_off_the_colour_clap_would_force() {
    let args = ["completions", "tcsh"];
    let forced = counterctl(&args, &[("CLICOLOR_FORCE", "1")]);
    assert!(
        text(&forced.stderr).contains(ESC),
        "the check can fail: forced colour has escapes: {:?}",
        text(&forced.stderr)
    );
    let plain = counterctl(&args, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(!text(&plain.stderr).contains(ESC), "{:?}", text(&plain.stderr));
}

/// `counterctl <args>` on a pseudo-terminal (util-linux `script`), with
/// `vars`: everything it wrote there.
fn on_a_terminal(args: &[&str], vars: &[(&str, &str)]) -> String {
    let mut line = String::from(env!("CARGO_BIN_EXE_counterctl"));
    for arg in args {
        line.push_str(&format!(" '{arg}'"));
    }
    let mut command = Command::new("script");
    command
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_REGION")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null());
    for (key, value) in vars {
        command.env(key, value);
    }
    let output = command
        .output()
        .expect("util-linux `script` runs counterctl on a pseudo-terminal");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stdout));
    text(&output.stdout)
}

#[test]
fn on_a_terminal_the_spinner_draws_escapes_and_no_color_or_quiet_leave_none() {
    let endpoint = no_stack_endpoint();
    let args = ["--endpoint-url", &endpoint, "destroy"];
    let drawn = on_a_terminal(&args, &[]);
    assert!(drawn.contains(ESC), "the check can fail: the spinner draws: {drawn:?}");
    let no_color = on_a_terminal(&args, &[("NO_COLOR", "1")]);
    assert!(!no_color.contains(ESC), "{no_color:?}");
    assert!(
        no_color.contains("reading stack hybrid-counter"),
        "plain progress lines: {no_color:?}"
    );
    let quiet = on_a_terminal(&["--endpoint-url", &endpoint, "--quiet", "destroy"], &[]);
    assert!(!quiet.contains(ESC), "{quiet:?}");
    assert!(!quiet.contains("reading stack"), "{quiet:?}");
    assert!(quiet.contains("does not exist"), "the result: {quiet:?}");
}
