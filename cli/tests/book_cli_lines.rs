//! Every `holdfast ...` and `kubectl holdfast ...` command the book (docs/src/**/*.md) and the
//! README show in a shell code block (```sh, bash, console, shell) parses with the CLI's own
//! parser, so a renamed or removed flag cannot linger in the documentation.
//!
//! A command is a line (its `\` continuations joined) that starts, after an optional `$ `
//! prompt and `NAME=value` environment assignments, with `holdfast` or `kubectl holdfast`; it
//! ends at an unquoted `|`, `&`, `;`, `>`, `<` or `#` comment. `--help` and `--version` count
//! as parsed.

use std::{
    fs,
    path::{Path, PathBuf},
};

use clap::error::ErrorKind;

/// The code blocks whose lines are commands.
const SHELL_TAGS: &[&str] = &["sh", "bash", "console", "shell"];

/// One command found in the documentation.
#[derive(Debug, PartialEq)]
struct CliLine {
    /// Where it starts: the file's line, from 1.
    line: usize,
    /// The line as written (continuations joined).
    text: String,
    /// The words passed to the parser, starting with the program's name.
    args: Vec<String>,
}

/// Shell words of one line, quote-aware, up to an unquoted `|`, `&`, `;`, `>`, `<` or a `#`
/// starting a word. Quotes are removed as the shell does; `$VAR` and `$(...)` stay as text.
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated '".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err("unterminated \"".into()),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated \"".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(ch) = chars.next() {
                    word.push(ch);
                }
            }
            '#' if !in_word => break,
            '|' | '&' | ';' | '>' | '<' => {
                // `2>&1`, `2>/dev/null`: the descriptor is the redirection's, not a word.
                if matches!(c, '>' | '<') && in_word && word.chars().all(|d| d.is_ascii_digit()) {
                    in_word = false;
                    word.clear();
                }
                break;
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `NAME=value`, an environment assignment before a command.
fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            let mut chars = name.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// The parser's words for one shell line, when it runs the CLI.
fn cli_args(line: &str) -> Option<Result<Vec<String>, String>> {
    let line = line.trim_start();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let words = match split_words(line) {
        Ok(w) => w,
        // Only a line that looks like a command is worth an error.
        Err(e) if line.contains("holdfast") => return Some(Err(e)),
        Err(_) => return None,
    };
    let command: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| is_assignment(w))
        .collect();
    match command.as_slice() {
        ["holdfast", rest @ ..] => Some(Ok(program("holdfast", rest))),
        ["kubectl", "holdfast", rest @ ..] => Some(Ok(program("kubectl-holdfast", rest))),
        _ => None,
    }
}

fn program(name: &str, rest: &[&str]) -> Vec<String> {
    std::iter::once(name)
        .chain(rest.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// The commands in one markdown text's shell code blocks; lines that do not split (an
/// unterminated quote) are returned as errors.
fn extract(markdown: &str) -> Vec<Result<CliLine, (usize, String, String)>> {
    let mut found = Vec::new();
    let mut fence: Option<(char, usize, bool)> = None; // (char, length, shell)
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in markdown.lines().enumerate() {
        let no = i + 1;
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        match fence {
            None => {
                if let (Some(m), true) = (marker, run >= 3 && indent <= 3) {
                    let info = trimmed[run..].trim();
                    let tag = info
                        .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
                        .next()
                        .unwrap_or("");
                    fence = Some((m, run, SHELL_TAGS.contains(&tag)));
                }
                continue;
            }
            Some((m, len, _))
                if marker == Some(m) && run >= len && trimmed[run..].trim().is_empty() =>
            {
                fence = None;
                pending = None;
                continue;
            }
            Some((_, _, false)) => continue,
            Some((_, _, true)) => {}
        }
        let (start, mut text) = pending.take().unwrap_or((no, String::new()));
        if let Some(head) = raw.trim_end().strip_suffix('\\') {
            text.push_str(head);
            text.push(' ');
            pending = Some((start, text));
            continue;
        }
        text.push_str(raw);
        match cli_args(&text) {
            Some(Ok(args)) => found.push(Ok(CliLine {
                line: start,
                text: text.trim().to_owned(),
                args,
            })),
            Some(Err(e)) => found.push(Err((start, text.trim().to_owned(), e))),
            None => {}
        }
    }
    found
}

/// README.md and every page under docs/src, relative to the workspace root.
fn documentation(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs/src"), &mut files);
    files.sort();
    files
}

#[test]
fn every_cli_line_in_the_book_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    let mut parsed = 0;
    for file in documentation(&root) {
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let markdown = match fs::read_to_string(&file) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{shown}: cannot read: {e}"));
                continue;
            }
        };
        for found in extract(&markdown) {
            match found {
                Ok(cli) => match holdfast_cli::try_parse_args(&cli.args) {
                    Ok(()) => parsed += 1,
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
                        ) =>
                    {
                        parsed += 1
                    }
                    Err(e) => problems.push(format!(
                        "{shown}:{}: {}\n{}",
                        cli.line,
                        cli.text,
                        e.render().to_string().trim_end()
                    )),
                },
                Err((line, text, e)) => problems.push(format!(
                    "{shown}:{line}: {text}\ncannot split it into words: {e}"
                )),
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} command(s) in the documentation do not parse with the CLI (fix the page, or the CLI):\n\n{}",
        problems.len(),
        problems.join("\n\n")
    );
    assert!(
        parsed > 0,
        "no `holdfast` or `kubectl holdfast` command found in README.md or docs/src: the extractor is broken or the book has none"
    );
    println!("{parsed} documented commands parse");
}

#[test]
fn splits_words_as_the_shell_does() {
    let w = |s: &str| split_words(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(
        w(r#"hold a/b --reason "node lost" --x 'it''s' a\ b"#),
        ["hold", "a/b", "--reason", "node lost", "--x", "its", "a b"]
    );
    assert_eq!(w(r#"say "a \"q\" \n""#), ["say", r#"a "q" \n"#]);
    assert_eq!(w("status -A   # every job | not a pipe"), ["status", "-A"]);
    assert_eq!(w("status -o json | jq .x"), ["status", "-o", "json"]);
    assert_eq!(w("open a/b && echo ok; x"), ["open", "a/b"]);
    assert_eq!(w("status 2>&1"), ["status"]);
    assert_eq!(w("status > out.json"), ["status"]);
    assert_eq!(w("status a#b '#'"), ["status", "a#b", "#"]);
    assert_eq!(w("echo '|' \"&&\""), ["echo", "|", "&&"]);
    assert!(split_words("hold 'open").is_err());
}

#[test]
fn extracts_commands_from_shell_blocks_only() {
    let md = "\
Text `holdfast status` inline is not a command.

```sh
kubectl holdfast hold team-a/mnist --instance 3 \\
  --reason \"node lost\"   # a comment
$ HOLDFAST_SERVER=https://x:8443 A_B=1 holdfast status -A | head
helm install holdfast charts/holdfast
holdfastctl status
```

```
holdfast untagged --is-skipped
```

```console
$ holdfast --version
```

~~~bash
holdfast status -n 'team a' > out
~~~
";
    let found: Vec<_> = extract(md)
        .into_iter()
        .map(|r| r.map(|c| (c.line, c.args)))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        found,
        vec![
            Ok((
                4,
                s(&[
                    "kubectl-holdfast",
                    "hold",
                    "team-a/mnist",
                    "--instance",
                    "3",
                    "--reason",
                    "node lost"
                ])
            )),
            Ok((6, s(&["holdfast", "status", "-A"]))),
            Ok((16, s(&["holdfast", "--version"]))),
            Ok((20, s(&["holdfast", "status", "-n", "team a"]))),
        ]
    );
    assert!(matches!(
        extract("```shell\nholdfast hold \"x\n```\n").as_slice(),
        [Err((2, _, _))]
    ));
}

#[test]
fn the_parser_refuses_what_the_cli_refuses() {
    assert!(holdfast_cli::try_parse_args(["holdfast", "status", "-A"]).is_ok());
    let e = holdfast_cli::try_parse_args(["holdfast", "hold", "a/b", "--no-such-flag"]);
    assert!(e.is_err_and(|e| e.kind() == ErrorKind::UnknownArgument));
}
