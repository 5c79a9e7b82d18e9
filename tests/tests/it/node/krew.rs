//! The release's CLI installed with krew, offline, as the krew manifest says: no cluster, only
//! kubectl (from the node's build) and krew (built from its Go module by
//! `tests/tools/krew/build.sh`).

use std::path::Path;
use std::process::Command;

/// `tests/release.sh --quick` writes the CLI archive and the krew manifest; `kubectl krew
/// install --manifest=… --archive=…` installs them with no network (an empty krew root, no
/// index, the upgrade check off), links krew's shim `bin/kubectl-holdfast` to the stored
/// binary of that version, and `kubectl holdfast --help` runs the CLI through the shim, found
/// by kubectl on the PATH as any plugin.
#[test]
#[ignore = "tier 3's build: kubectl comes from the node's build (run with --ignored)"]
fn krew_installs_the_release_archive_offline_and_kubectl_holdfast_runs_through_its_shim() {
    let version = env!("CARGO_PKG_VERSION");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let kubectl = holdfast_tests::node::ensure()
        .expect("node build")
        .bin("kubectl");
    let krew = holdfast_tests::binaries::run_build_script(&repo.join("tests/tools/krew/build.sh"))
        .expect("krew");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("release");
    let run = Command::new(repo.join("tests/release.sh"))
        .args(["--quick", version])
        .arg(&out)
        .output()
        .expect("tests/release.sh");
    assert!(
        run.status.success(),
        "tests/release.sh --quick:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let archive = out.join(format!(
        "kubectl-holdfast-v{version}-x86_64-unknown-linux-gnu.tar.gz"
    ));
    let root = dir.path().join("krew");
    let path = format!("{}:/usr/bin:/bin", root.join("bin").display());
    let env = |c: &mut Command| {
        c.env_clear()
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("KREW_ROOT", &root)
            .env("KREW_NO_UPGRADE_CHECK", "1");
    };
    let mut install = Command::new(&krew);
    install
        .arg("install")
        .arg(format!(
            "--manifest={}",
            out.join("holdfast.krew.yaml").display()
        ))
        .arg(format!("--archive={}", archive.display()));
    env(&mut install);
    let installed = install.output().expect("krew install");
    assert!(
        installed.status.success(),
        "krew install:\n{}{}",
        String::from_utf8_lossy(&installed.stderr),
        String::from_utf8_lossy(&installed.stdout)
    );

    let shim = root.join("bin/kubectl-holdfast");
    let target = std::fs::read_link(&shim).expect("krew's shim is a link");
    assert_eq!(
        target,
        root.join(format!("store/holdfast/v{version}/kubectl-holdfast")),
        "the shim points at the stored binary of this version"
    );
    let stored = std::fs::read(&target).expect("the stored binary");
    let license = std::fs::read(root.join(format!("store/holdfast/v{version}/LICENSE")))
        .expect("the LICENSE beside it");
    assert_eq!(
        license,
        std::fs::read(repo.join("LICENSE")).expect("LICENSE")
    );
    assert!(!stored.is_empty());

    let mut help = Command::new(&kubectl);
    help.args(["holdfast", "--help"]);
    env(&mut help);
    let help = help.output().expect("kubectl holdfast --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success(),
        "kubectl holdfast --help through the shim:\n{}{text}",
        String::from_utf8_lossy(&help.stderr)
    );
    for verb in ["hold", "release", "status", "preflight"] {
        assert!(text.contains(verb), "--help lists {verb}:\n{text}");
    }
    let mut list = Command::new(&kubectl);
    list.args(["plugin", "list", "--name-only"]);
    env(&mut list);
    let list = list.output().expect("kubectl plugin list");
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("kubectl-holdfast"),
        "kubectl plugin list names krew's shim: {}{}",
        String::from_utf8_lossy(&list.stdout),
        String::from_utf8_lossy(&list.stderr)
    );
}
