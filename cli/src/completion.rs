//! `holdfast completion bash|zsh|fish`: the shell's completion script, generated from the
//! parser itself (so it names every command and flag the program has).

use clap::CommandFactory;

use crate::args::{Cli, Shell};

/// The completion script for `shell`, completing the program named `holdfast`.
pub fn script(shell: Shell) -> Vec<u8> {
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(generator, &mut Cli::command(), "holdfast", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_scripts_generate_for_bash_zsh_and_fish_naming_every_command() {
        let commands: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        assert!(commands.len() >= 9, "{commands:?}");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(script(shell)).expect("UTF-8");
            for name in &commands {
                assert!(text.contains(name.as_str()), "{shell:?} lacks {name}");
            }
            for flag in ["--wait-stopped", "--namespace", "--holdfast-namespace"] {
                assert!(text.contains(flag), "{shell:?} lacks {flag}");
            }
        }
    }
}
