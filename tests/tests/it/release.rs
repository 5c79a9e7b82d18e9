//! The release script (`tests/release.sh`), run in its `--quick` mode (the CLI from the dev
//! profile, no image): every artifact it writes is checked — the chart renders in both modes
//! with the release's version and image tag, the install manifests hold the Namespace and no
//! test hook, every sha256 matches, the krew manifest has no placeholder left and names the
//! archive, the SBOM lists exactly Cargo.lock's crates (with their checksums) and every crate
//! the image's binaries depend on, and the changelog's Unreleased notes moved under the
//! version while the repo's file is left as it was. A `--quick` run is marked as no release
//! (QUICK-NOT-A-RELEASE, the notes, the SBOM, a krew manifest pointing at the file here) and
//! records the commit it was built from; a release proper refuses an uncommitted tree.

use holdfast_tests::helm;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const ARCHIVE_TARGET: &str = "x86_64-unknown-linux-gnu";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn release(args: &[&str]) -> Output {
    Command::new(repo().join("tests/release.sh"))
        .args(args)
        .output()
        .expect("running tests/release.sh")
}

fn sha256_hex(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    hex::encode(Sha256::digest(&bytes))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (name, version) -> checksum (empty for the workspace's own crates) of every Cargo.lock
/// package.
fn lock_packages() -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    let (mut name, mut version) = (None::<String>, None::<String>);
    let quoted = |l: &str| l.split('"').nth(1).unwrap_or_default().to_owned();
    for line in read(&repo().join("Cargo.lock")).lines() {
        if line == "[[package]]" {
            if let (Some(n), Some(v)) = (name.take(), version.take()) {
                out.entry((n, v)).or_insert_with(String::new);
            }
        } else if line.starts_with("name = ") {
            name = Some(quoted(line));
        } else if line.starts_with("version = ") && name.is_some() {
            version = Some(quoted(line));
        } else if line.starts_with("checksum = ")
            && let (Some(n), Some(v)) = (name.clone(), version.clone())
        {
            out.insert((n, v), quoted(line));
        }
    }
    if let (Some(n), Some(v)) = (name, version) {
        out.entry((n, v)).or_insert_with(String::new);
    }
    out
}

/// The crates the controller and the webhook name as normal dependencies (for Linux), as
/// `cargo metadata` resolves them: the SBOM must list every one.
fn direct_dependencies_of_the_binaries() -> BTreeSet<(String, String)> {
    let out = Command::new("cargo")
        .args(["metadata", "--locked", "--format-version", "1"])
        .args(["--filter-platform", ARCHIVE_TARGET])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages: BTreeMap<&str, &Value> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("id"), p))
        .collect();
    let mut direct = BTreeSet::new();
    for node in meta["resolve"]["nodes"].as_array().expect("nodes") {
        let name = packages[node["id"].as_str().expect("id")]["name"].as_str();
        if !matches!(name, Some("holdfast-controller" | "holdfast-webhook")) {
            continue;
        }
        for dep in node["deps"].as_array().expect("deps") {
            let normal = dep["dep_kinds"]
                .as_array()
                .expect("dep_kinds")
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                let p = packages[dep["pkg"].as_str().expect("pkg")];
                direct.insert((
                    p["name"].as_str().expect("name").to_owned(),
                    p["version"].as_str().expect("version").to_owned(),
                ));
            }
        }
    }
    assert!(direct.len() > 10, "{direct:?}");
    direct
}

/// `git rev-parse HEAD` of the checkout, and whether `commit` is it or one of its ancestors
/// (other work may commit while the release runs).
fn is_this_checkouts_commit(commit: &str) -> bool {
    commit.len() == 40
        && commit.bytes().all(|b| b.is_ascii_hexdigit())
        && Command::new("git")
            .args(["merge-base", "--is-ancestor", commit, "HEAD"])
            .current_dir(repo())
            .status()
            .is_ok_and(|s| s.success())
}

/// A release's files, checked one by one; --quick's are marked as no release's and name the
/// commit they were built from.
#[test]
fn a_quick_release_writes_every_artifact_marked_not_a_release_with_its_commit() {
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().join("release");
    let changelog_before = read(&repo().join("CHANGELOG.md"));
    let run = release(&["--quick", VERSION, dir.to_str().expect("utf-8 path")]);
    assert!(
        run.status.success(),
        "tests/release.sh --quick failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let archive = format!("kubectl-holdfast-v{VERSION}-{ARCHIVE_TARGET}.tar.gz");
    let chart = dir.join(format!("holdfast-{VERSION}.tgz"));
    let sbom = format!("holdfast-{VERSION}.cdx.json");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("OUTDIR")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = [
        format!("holdfast-{VERSION}.tgz"),
        "install.yaml".into(),
        "install-kueue.yaml".into(),
        archive.clone(),
        format!("{archive}.sha256"),
        "holdfast.krew.yaml".into(),
        sbom.clone(),
        "CHANGELOG.md".into(),
        "RELEASE-NOTES.md".into(),
        "SHA256SUMS".into(),
        "QUICK-NOT-A-RELEASE".into(),
    ]
    .into();
    assert_eq!(files, expected, "--quick builds no image");

    // The packaged chart renders in both modes, with the release's version as image tag.
    let helm = helm::ensure().expect("helm");
    for mode in ["plain", "kueue"] {
        let rendered = helm
            .run(&[
                "template".into(),
                "holdfast".into(),
                chart.display().to_string(),
                "--namespace".into(),
                "holdfast-system".into(),
                "--set".into(),
                format!("mode={mode}"),
            ])
            .unwrap_or_else(|e| panic!("helm template of the packaged chart ({mode}): {e:#}"));
        let docs = helm::documents(&rendered).expect("documents");
        let images: BTreeSet<&str> = helm::of_kind(&docs, "Deployment")
            .iter()
            .flat_map(|d| d["spec"]["template"]["spec"]["containers"].as_array())
            .flatten()
            .filter_map(|c| c["image"].as_str())
            .collect();
        assert_eq!(
            images,
            BTreeSet::from([format!("ghcr.io/holdfast-dev/holdfast:{VERSION}").as_str()]),
            "{mode}"
        );
    }
    let shown = helm
        .run(&["show".into(), "chart".into(), chart.display().to_string()])
        .expect("helm show chart");
    assert!(
        shown.contains(&format!("\nversion: {VERSION}\n")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("appVersion: {VERSION}\n")),
        "{shown}"
    );

    // The install manifests: the Namespace first, the chart's objects, no test hook.
    for (file, mode) in [("install.yaml", "plain"), ("install-kueue.yaml", "kueue")] {
        let docs = helm::documents(&read(&dir.join(file))).expect(file);
        assert_eq!(helm::id(&docs[0]), "Namespace/holdfast-system", "{file}");
        assert_eq!(helm::of_kind(&docs, "Deployment").len(), 2, "{file}");
        assert!(
            docs.iter()
                .all(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null()),
            "{file} holds a hook"
        );
        let controller = helm::of_kind(&docs, "Deployment")
            .into_iter()
            .find(|d| d["metadata"]["name"] == "holdfast-controller")
            .expect("the controller");
        let env = &controller["spec"]["template"]["spec"]["containers"][0]["env"];
        let set = env
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == "HOLDFAST_MODE")
            .expect("HOLDFAST_MODE");
        assert_eq!(set["value"], mode, "{file}");
    }

    // Every sha256 matches: the archive's own file, and SHA256SUMS for every other file.
    let line = read(&dir.join(format!("{archive}.sha256")));
    let archive_sha = sha256_hex(&dir.join(&archive));
    assert_eq!(line, format!("{archive_sha}  {archive}\n"));
    let sums = read(&dir.join("SHA256SUMS"));
    let listed: BTreeSet<&str> = sums
        .lines()
        .map(|l| {
            let (sum, name) = l.split_once("  ").expect("SUM  NAME");
            assert_eq!(sum, sha256_hex(&dir.join(name)), "{name}");
            name
        })
        .collect();
    let mut others = expected.clone();
    others.remove("SHA256SUMS");
    assert_eq!(
        listed,
        others.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );

    // The archive: the plugin binary, LICENSE and README at its root.
    let listing = Command::new("tar")
        .arg("-tzvf")
        .arg(dir.join(&archive))
        .output()
        .expect("tar");
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let names: BTreeSet<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["LICENSE", "README.md", "kubectl-holdfast"])
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x") && l.ends_with(" kubectl-holdfast")),
        "{listing}"
    );

    // The krew manifest: nothing of the template's left, the archive's URI and sha256.
    let template = read(&repo().join("cli/krew/holdfast.yaml.in"));
    assert!(template.contains("@SHA256_LINUX_AMD64@"), "the template");
    let krew = read(&dir.join("holdfast.krew.yaml"));
    for placeholder in ["@", "PLACEHOLDER"] {
        assert!(!krew.contains(placeholder), "{placeholder} left:\n{krew}");
    }
    let manifest = helm::documents(&krew).expect("the krew manifest is YAML");
    let spec = &manifest[0]["spec"];
    assert_eq!(spec["version"], format!("v{VERSION}"));
    let platforms = spec["platforms"].as_array().expect("platforms");
    assert_eq!(platforms.len(), 1, "only linux/amd64 is built");
    assert_eq!(platforms[0]["sha256"], archive_sha.as_str());
    // --quick's archive is no release's: the manifest points at it in OUTDIR, not at the
    // release's URL.
    assert_eq!(
        platforms[0]["uri"],
        format!("file://{}/{archive}", dir.display()),
        "the krew manifest of --quick"
    );
    let marker = read(&dir.join("QUICK-NOT-A-RELEASE"));
    assert!(marker.contains("NOT A RELEASE"), "{marker}");

    // The SBOM: Cargo.lock's crates only, with its checksums, and every crate the binaries
    // depend on directly, and the workspace's libraries they link.
    let bom: Value = serde_json::from_str(&read(&dir.join(&sbom))).expect("the SBOM is JSON");
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(
        bom["metadata"]["component"]["bom-ref"],
        format!("ghcr.io/holdfast-dev/holdfast:{VERSION}")
    );
    let properties: BTreeMap<&str, &str> = bom["metadata"]["properties"]
        .as_array()
        .expect("the SBOM's metadata properties")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name"),
                p["value"].as_str().expect("value"),
            )
        })
        .collect();
    let commit = properties["holdfast:git-commit"];
    assert!(is_this_checkouts_commit(commit), "{properties:?}");
    assert!(
        matches!(properties["holdfast:git-tree-dirty"], "true" | "false"),
        "{properties:?}"
    );
    assert!(
        properties["holdfast:quick"].starts_with("not a release"),
        "{properties:?}"
    );
    let lock = lock_packages();
    let mut listed = BTreeSet::new();
    for c in bom["components"].as_array().expect("components") {
        let key = (
            c["name"].as_str().expect("name").to_owned(),
            c["version"].as_str().expect("version").to_owned(),
        );
        let checksum = lock
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} is not in Cargo.lock"));
        let hash = c["hashes"][0]["content"].as_str().unwrap_or_default();
        assert_eq!(hash, checksum, "{key:?}: the SBOM's hash is Cargo.lock's");
        assert_eq!(
            c["purl"],
            format!("pkg:cargo/{}@{}", key.0, key.1),
            "{key:?}"
        );
        listed.insert(key);
    }
    let missing: Vec<_> = direct_dependencies_of_the_binaries()
        .difference(&listed)
        .cloned()
        .collect();
    assert!(missing.is_empty(), "not in the SBOM: {missing:?}");
    for own in ["holdfast-controller", "holdfast-webhook", "holdfast-core"] {
        assert!(listed.iter().any(|(n, _)| n == own), "{own}");
    }
    for not_linked in ["holdfast-cli", "holdfast-tests"] {
        assert!(!listed.iter().any(|(n, _)| n == not_linked), "{not_linked}");
    }

    // The changelog: Unreleased moved under the version, in OUTDIR's copy only.
    let changelog = read(&dir.join("CHANGELOG.md"));
    let unreleased = changelog.find("## [Unreleased]").expect("Unreleased kept");
    let heading = changelog
        .find(&format!("## [{VERSION}] - "))
        .expect("the version's heading");
    assert!(unreleased < heading, "Unreleased stays first");
    let notes = read(&dir.join("RELEASE-NOTES.md"));
    assert!(
        notes.starts_with(&format!("# holdfast {VERSION} (")),
        "{notes}"
    );
    assert!(notes.contains("### Added"), "{notes}");
    assert!(
        notes.contains("NOT A RELEASE") && notes.contains(&format!("Built from commit {commit}")),
        "{notes}"
    );
    assert_eq!(
        read(&repo().join("CHANGELOG.md")),
        changelog_before,
        "the repo's CHANGELOG.md is left as it was"
    );
}

/// A version the binaries do not report, a malformed one, or an OUTDIR holding anything is
/// refused before anything is built, with what to do.
#[test]
fn a_release_refuses_another_version_than_the_workspaces_and_a_non_empty_outdir() {
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().display().to_string();
    let refused = |args: &[&str], says: &str| {
        let run = release(args);
        let err = String::from_utf8_lossy(&run.stderr).into_owned();
        assert!(!run.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &["--quick", "9.9.9", &format!("{dir}/a")],
        "is not the workspace's version",
    );
    refused(
        &["--quick", &format!("v{VERSION}"), &format!("{dir}/b")],
        "is not a SemVer version",
    );
    std::fs::write(out.path().join("kept"), "a file of the user's").expect("write");
    refused(&["--quick", VERSION, &dir], "is not empty");
    assert_eq!(read(&out.path().join("kept")), "a file of the user's");
    refused(
        &[
            "--quick",
            VERSION,
            &format!("{dir}/c"),
            "registry.example:5000",
        ],
        "--quick builds no image",
    );
}

/// A release proper is built from a commit: a tracked change, or an untracked file under the
/// crates or the chart, is refused before anything is built, naming each; run in a clone of
/// the checkout (with this tree's script committed there), so the checkout is left alone.
#[test]
fn a_release_refuses_an_uncommitted_tree_and_names_what_is_not_committed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clone = tmp.path().join("clone");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&clone)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let out = Command::new("git")
        .args(["clone", "--quiet", "--no-checkout"])
        .arg(repo())
        .arg(&clone)
        .output()
        .expect("git clone");
    assert!(out.status.success(), "{out:?}");
    git(&["checkout", "--quiet", "HEAD"]);
    std::fs::copy(
        repo().join("tests/release.sh"),
        clone.join("tests/release.sh"),
    )
    .expect("the script");
    git(&[
        "commit",
        "--quiet",
        "--allow-empty",
        "-am",
        "this tree's script",
    ]);
    let run = |dir: &str| {
        let out = Command::new(clone.join("tests/release.sh"))
            .args([VERSION, tmp.path().join(dir).to_str().expect("utf-8")])
            .output()
            .expect("tests/release.sh");
        assert!(!out.status.success(), "an uncommitted tree was released");
        assert!(
            !tmp.path().join(dir).exists(),
            "OUTDIR written: {:?}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    std::fs::write(clone.join("charts/holdfast/templates/extra.yaml"), "")
        .expect("an untracked file");
    let err = run("a");
    assert!(
        err.contains("the tree is not committed")
            && err.contains("untracked: charts/holdfast/templates/extra.yaml"),
        "{err}"
    );

    std::fs::remove_file(clone.join("charts/holdfast/templates/extra.yaml")).expect("rm");
    let readme = clone.join("README.md");
    let text = read(&readme);
    std::fs::write(&readme, format!("{text}\nchanged\n")).expect("a tracked change");
    let err = run("b");
    assert!(err.contains("changed:  M README.md"), "{err}");
}
