//! The book's CLI reference carries the program's own `--help` texts, generated from the
//! parser so that they cannot drift: this test renders them and compares them with the part
//! of `docs/src/reference/cli.md` between its markers. `HOLDFAST_BLESS=1` rewrites it.

use std::path::PathBuf;

const START: &str = "<!-- generated: cli-help (cargo test -p holdfast-cli --test cli_help_reference; HOLDFAST_BLESS=1 rewrites it) -->";
const END: &str = "<!-- end: cli-help -->";

fn generated() -> String {
    let mut out = String::new();
    for (line, text) in holdfast_cli::help_texts() {
        out.push_str(&format!(
            "### `{line}`\n\n```text\n{}\n```\n\n",
            text.trim_end()
        ));
    }
    out
}

#[test]
fn the_cli_references_help_texts_are_the_programs_own() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/cli.md");
    let page = std::fs::read_to_string(&path).expect("the CLI reference page");
    let (before, rest) = page
        .split_once(START)
        .expect("the page has the generated section's start marker");
    let (_, after) = rest
        .split_once(END)
        .expect("the page has the generated section's end marker");
    let want = format!("{before}{START}\n\n{}{END}{after}", generated());
    if std::env::var_os("HOLDFAST_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write the page");
        return;
    }
    assert!(
        page == want,
        "docs/src/reference/cli.md's --help texts differ from the program's; run\n  HOLDFAST_BLESS=1 cargo test -p holdfast-cli --test cli_help_reference\n"
    );
}

#[test]
fn every_command_has_its_help_text() {
    let texts = holdfast_cli::help_texts();
    for name in [
        "hold",
        "release",
        "open",
        "status",
        "preflight",
        "drift",
        "fence",
        "check",
        "completion",
    ] {
        assert!(
            texts
                .iter()
                .any(|(line, text)| line == &format!("holdfast {name} --help")
                    && text.contains("Usage:")),
            "{name}"
        );
    }
}
