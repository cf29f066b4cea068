//! Sources: which files, with which contents, a directory, a file or a Git commit yields.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use poolctl::model::Origin;
use poolctl::source::{Location, Revision, SourceError, SourceSpec, load, look, read_files};

use crate::support::scenario::Scenario;

/// The relative paths and texts of what a source yields.
fn files_of(spec: &SourceSpec) -> (Origin, Vec<(String, String)>) {
    let (origin, files) = read_files(spec).unwrap();
    (origin, files.into_iter().map(|f| (f.path_relative, f.text)).collect())
}

fn names(files: &[(String, String)]) -> Vec<&str> {
    files.iter().map(|(name, _)| name.as_str()).collect()
}

/// The error and every cause below it, as `{:#}` would print them at the CLI edge.
fn chain(err: &SourceError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

fn canonical(path: &Path) -> String {
    fs::canonicalize(path).unwrap().to_string_lossy().into_owned()
}

/// A scenario whose source is a Git repository, `main` checked out, nothing committed.
fn repo() -> Scenario {
    let mut s = Scenario::new();
    s.init_git();
    s
}

/// A Git source for the scenario's repository, cached in the scenario's cache.
fn git_source(s: &Scenario, reference: Option<&str>, path: Option<&str>) -> SourceSpec {
    git_source_at(s, s.dir().to_str().unwrap(), reference, path)
}

/// A Git source for `source`, cached in the scenario's cache.
fn git_source_at(s: &Scenario, source: &str, reference: Option<&str>, path: Option<&str>) -> SourceSpec {
    SourceSpec::new(source, reference, path).unwrap().with_cache_dir(s.cache())
}

// --- directories and files ---

#[test]
fn directory_yields_yaml_and_yml_files_sorted_recursively_skipping_hidden_ones() {
    let s = Scenario::new();
    s.write("b.yaml", "b");
    s.write("a.yml", "a");
    s.write("sub/c.yaml", "c");
    s.write("sub/deeper/d.yml", "d");
    s.write("a/z.yaml", "z");
    s.write("notes.txt", "not a pool");
    s.write("README.md", "not a pool");
    s.write("pool.yaml.bak", "not a pool");
    s.write(".git/config.yaml", "hidden dir");
    s.write(".hidden/x.yaml", "hidden dir");
    s.write("sub/.#lock.yaml", "hidden file");

    let spec = SourceSpec::new(s.dir().to_str().unwrap(), None, None).unwrap();
    let (origin, files) = files_of(&spec);

    assert_eq!(origin, Origin::Path { path: canonical(s.dir()) });
    assert_eq!(names(&files), ["a.yml", "a/z.yaml", "b.yaml", "sub/c.yaml", "sub/deeper/d.yml"]);
    let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["a", "z", "b", "c", "d"]);
}

#[test]
fn single_file_is_known_by_its_name_whatever_its_extension() {
    let s = Scenario::new();
    s.write("deploy/workers.pool", "kind: Pool");
    let file = s.dir().join("deploy/workers.pool");

    let spec = SourceSpec::new(file.to_str().unwrap(), None, None).unwrap();
    let (origin, files) = files_of(&spec);

    assert_eq!(origin, Origin::Path { path: canonical(&file) });
    assert_eq!(files, [("workers.pool".to_owned(), "kind: Pool".to_owned())]);
}

#[test]
fn path_selects_a_folder_or_file_of_a_directory_source() {
    let s = Scenario::new();
    s.write("top.yaml", "top");
    s.write("pools/a.yaml", "a");
    s.write("pools/nested/b.yaml", "b");
    let root = s.dir().to_str().unwrap();

    let (origin, files) = files_of(&SourceSpec::new(root, None, Some("./pools/")).unwrap());
    assert_eq!(origin, Origin::Path { path: canonical(&s.dir().join("pools")) });
    assert_eq!(names(&files), ["pools/a.yaml", "pools/nested/b.yaml"]);

    let (_, files) = files_of(&SourceSpec::new(root, None, Some("pools/nested/b.yaml")).unwrap());
    assert_eq!(files, [("pools/nested/b.yaml".to_owned(), "b".to_owned())]);
}

#[test]
fn directory_source_errors_name_the_path() {
    let s = Scenario::new();
    let missing = s.dir().join("nope");
    let err = read_files(&SourceSpec::new(missing.to_str().unwrap(), None, None).unwrap()).unwrap_err();
    assert_eq!(err.to_string(), format!("source not found: {}", missing.display()));

    let root = s.dir().to_str().unwrap();
    let err = read_files(&SourceSpec::new(root, None, Some("pools")).unwrap()).unwrap_err();
    assert_eq!(err.to_string(), format!("source not found: {}", s.dir().join("pools").display()));

    s.write("pool.yaml", "x");
    let file = s.dir().join("pool.yaml");
    let err = read_files(&SourceSpec::new(file.to_str().unwrap(), None, Some("sub")).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid source: --path needs a directory or Git source, and {} is a file", file.display())
    );

    fs::write(s.dir().join("latin1.yaml"), b"name: caf\xe9").unwrap();
    let err = read_files(&SourceSpec::new(root, None, None).unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not UTF-8 text: line 1, byte 10 (byte 9 of the file) is 0xe9; save it as UTF-8",
            s.dir().join("latin1.yaml").display()
        )
    );
}

#[test]
fn load_keeps_the_origin_of_the_files_it_read() {
    let s = Scenario::new();
    s.write("empty.yaml", "");
    let spec = SourceSpec::new(s.dir().to_str().unwrap(), None, None).unwrap();
    let desired = load(&spec.clone().allowing_empty(true)).unwrap();
    assert_eq!(desired.origin, Origin::Path { path: canonical(s.dir()) });
    // Without --allow-empty, a source with no pool is an error, not an empty desired state.
    assert!(matches!(load(&spec), Err(SourceError::NoPools { files: 1, .. })));
}

/// The source's revision now, as watch sees it.
fn revision(spec: &SourceSpec) -> Revision {
    look(spec, None).unwrap().expect("a first look always reads").0
}

#[test]
fn directory_revision_changes_with_the_files_and_only_then() {
    let s = Scenario::new();
    s.write("a.yaml", "one");
    let spec = SourceSpec::new(s.dir().to_str().unwrap(), None, None).unwrap();

    let first = revision(&spec);
    assert!(matches!(first, Revision::Content(_)));
    s.write("notes.txt", "not a pool file");
    assert_eq!(revision(&spec), first);
    assert!(look(&spec, Some(&first)).unwrap().is_none(), "unchanged: nothing read again");

    s.write("a.yaml", "two");
    let second = revision(&spec);
    assert_ne!(second, first);

    fs::rename(s.dir().join("a.yaml"), s.dir().join("b.yaml")).unwrap();
    assert_ne!(revision(&spec), second);
}

// --- classification ---

#[test]
fn urls_are_git_sources_and_plain_paths_are_not() {
    let git = |source: &str| match SourceSpec::new(source, None, None).unwrap().location {
        Location::Git { url, reference, path, .. } => {
            assert_eq!((reference, path.as_str()), (None, ""));
            Some(url)
        }
        Location::Path { .. } => None,
    };
    for url in ["file:///srv/pools.git", "https://github.com/acme/pools.git", "http://git.local/pools"] {
        assert_eq!(git(url).as_deref(), Some(url), "{url}");
    }
    // A URL's user info is shown nowhere, an SSH user's included (git drops it too).
    for (url, shown) in [
        ("ssh://git@github.com/acme/pools.git", "ssh://github.com/acme/pools.git"),
        ("git@github.com:acme/pools.git", "github.com:acme/pools.git"),
        ("deploy@10.0.0.1:repos/pools", "10.0.0.1:repos/pools"),
    ] {
        assert_eq!(git(url).as_deref(), Some(shown), "{url}");
    }
    for path in ["pools", "./pools", "/etc/pools", "pools/a.yaml", "./a@b:c", "C:pools", "@host:x"] {
        assert_eq!(git(path), None, "{path}");
    }
    // A password or a token as the user name never reaches the plan, an Event or the container
    // labels, but is still what is fetched.
    for (url, shown) in [
        ("https://bot:s3cret@git.example.com/pools.git", "https://git.example.com/pools.git"),
        ("https://ghp_TOKEN@github.com/acme/fleet.git", "https://github.com/acme/fleet.git"),
    ] {
        assert_eq!(git(url).as_deref(), Some(shown), "{url}");
        let spec = SourceSpec::new(url, None, None).unwrap();
        let Location::Git { fetch_url, .. } = spec.location else { panic!("a Git source") };
        assert_eq!(fetch_url, url);
    }
}

#[test]
fn a_saved_plans_git_origin_is_read_again_from_the_url_it_shows() {
    // An scp-like URL shown without its user reads as a Git URL still, not as a path.
    let spec = SourceSpec::git("github.com:acme/pools.git", "main", "pools").unwrap();
    let Location::Git { url, fetch_url, reference, path } = spec.location else { panic!("a Git source") };
    assert_eq!(
        (url.as_str(), fetch_url.as_str()),
        ("github.com:acme/pools.git", "github.com:acme/pools.git")
    );
    assert_eq!((reference.as_deref(), path.as_str()), (Some("main"), "pools"));
    // One saved by an earlier poolctl, with a user name: shown without it, fetched with it.
    let spec = SourceSpec::git("https://ghp_T@h/r.git", "HEAD", "").unwrap();
    let Location::Git { url, fetch_url, .. } = spec.location else { panic!("a Git source") };
    assert_eq!((url.as_str(), fetch_url.as_str()), ("https://h/r.git", "https://ghp_T@h/r.git"));
}

#[test]
fn a_path_with_a_ref_is_a_git_source_with_its_canonical_path_as_url() {
    let repo = repo();
    let spaced = format!("{}/./", repo.dir().display());
    let spec = SourceSpec::new(&spaced, Some("main"), Some("pools/")).unwrap();
    assert_eq!(
        spec.location,
        Location::Git {
            url: canonical(repo.dir()),
            fetch_url: canonical(repo.dir()),
            reference: Some("main".into()),
            path: "pools".into()
        }
    );

    let missing = repo.dir().join("nope");
    let err = SourceSpec::new(missing.to_str().unwrap(), Some("main"), None).unwrap_err();
    assert_eq!(err.to_string(), format!("Git repository not found: {}", missing.display()));
}

#[test]
fn bad_arguments_are_refused() {
    let message = |source: &str, reference: Option<&str>, path: Option<&str>| {
        SourceSpec::new(source, reference, path).unwrap_err().to_string()
    };
    assert_eq!(message("", None, None), "invalid source: --source is empty");
    assert_eq!(message("pools", Some(""), None), "invalid source: --ref is empty");
    assert_eq!(
        message("pools", None, Some("/etc")),
        "invalid source: --path `/etc` must be relative to the source root"
    );
    assert_eq!(
        message("https://h/r.git", None, Some("a/../../b")),
        "invalid source: --path `a/../../b` must stay inside the source (no `..`)"
    );
}

// --- Git ---

#[test]
fn git_default_is_the_remote_head_read_from_the_commit_tree() {
    let repo = repo();
    repo.write("pools/b.yaml", "b");
    repo.write("pools/a.yml", "a");
    repo.write("top.yaml", "top");
    repo.write("README.md", "docs");
    repo.write(".github/ci.yaml", "hidden");
    let commit = repo.commit("first");

    let (origin, files) = files_of(&git_source_at(&repo, &repo.git().url(), None, None));
    assert_eq!(
        origin,
        Origin::Git { url: repo.git().url(), reference: "HEAD".into(), commit, path: String::new() }
    );
    assert_eq!(names(&files), ["pools/a.yml", "pools/b.yaml", "top.yaml"]);
    assert_eq!(files[0].1, "a");
}

#[test]
fn git_default_follows_the_branch_the_remote_head_names() {
    let repo = repo();
    repo.write("a.yaml", "on main");
    repo.commit("main");
    repo.git().switch_new_branch("trunk");
    repo.write("a.yaml", "on trunk");
    let trunk = repo.commit("trunk");

    let (origin, files) = files_of(&git_source_at(&repo, &repo.git().url(), None, None));
    assert_eq!(origin.commit(), Some(trunk.as_str()));
    assert_eq!(files[0].1, "on trunk");
}

#[test]
fn git_ref_may_be_a_branch_a_tag_or_a_commit() {
    let repo = repo();
    repo.write("a.yaml", "v1");
    let first = repo.commit("first");
    repo.git().tag("v1");
    repo.git().tag_annotated("v1-annotated", "release");

    repo.git().switch_new_branch("feature");
    repo.write("a.yaml", "feature");
    let feature = repo.commit("feature");
    repo.git().switch("main");
    repo.write("a.yaml", "v2");
    let second = repo.commit("second");

    let read = |reference: &str| {
        let (origin, files) = files_of(&git_source(&repo, Some(reference), None));
        match origin {
            Origin::Git { reference: asked, commit, .. } => {
                assert_eq!(asked, reference);
                (commit, files[0].1.clone())
            }
            Origin::Path { .. } => panic!("not a Git origin"),
        }
    };
    assert_eq!(read("main"), (second.clone(), "v2".into()));
    assert_eq!(read("HEAD"), (second.clone(), "v2".into()));
    assert_eq!(read("refs/heads/feature"), (feature.clone(), "feature".into()));
    assert_eq!(read("feature"), (feature, "feature".into()));
    assert_eq!(read("v1"), (first.clone(), "v1".into()));
    assert_eq!(read("v1-annotated"), (first.clone(), "v1".into()));
    assert_eq!(read("refs/tags/v1"), (first.clone(), "v1".into()));
    assert_eq!(read(&first), (first.clone(), "v1".into()));
    assert_eq!(read(&first[..10]), (first.clone(), "v1".into()));
    assert_eq!(read(&second[..7]), (second, "v2".into()));
}

#[test]
fn git_path_selects_a_folder_or_a_file_of_the_commit() {
    let repo = repo();
    repo.write("deploy/pools/a.yaml", "a");
    repo.write("deploy/pools/more/b.yml", "b");
    repo.write("deploy/other.yaml", "other");
    let commit = repo.commit("first");

    let (origin, files) = files_of(&git_source(&repo, Some("main"), Some("deploy/pools")));
    assert_eq!(
        origin,
        Origin::Git {
            url: canonical(repo.dir()),
            reference: "main".into(),
            commit,
            path: "deploy/pools".into(),
        }
    );
    assert_eq!(names(&files), ["deploy/pools/a.yaml", "deploy/pools/more/b.yml"]);

    let (_, files) = files_of(&git_source(&repo, Some("main"), Some("deploy/other.yaml")));
    assert_eq!(files, [("deploy/other.yaml".to_owned(), "other".to_owned())]);
}

#[test]
fn uncommitted_edits_are_not_desired_state() {
    let repo = repo();
    repo.write("a.yaml", "committed");
    repo.commit("first");
    repo.write("a.yaml", "edited, not committed");
    repo.write("b.yaml", "untracked");

    let (_, files) = files_of(&git_source(&repo, Some("main"), None));
    assert_eq!(files, [("a.yaml".to_owned(), "committed".to_owned())]);
}

#[test]
fn a_new_commit_is_seen_by_the_next_read_through_the_same_cache() {
    let repo = repo();
    repo.write("a.yaml", "one");
    let first = repo.commit("first");
    let spec = git_source(&repo, Some("main"), None);
    assert_eq!(revision(&spec), Revision::Commit(first.clone()));
    assert_eq!(files_of(&spec).1[0].1, "one");

    repo.write("a.yaml", "two");
    fs::remove_file(repo.dir().join("a.yaml")).unwrap();
    repo.write("b.yaml", "two");
    let second = repo.commit("second");

    assert_eq!(revision(&spec), Revision::Commit(second.clone()));
    let (origin, files) = files_of(&spec);
    assert_eq!(origin.commit(), Some(second.as_str()));
    assert_eq!(files, [("b.yaml".to_owned(), "two".to_owned())]);

    // One clone per URL, reused: not a new one per read.
    let clones = fs::read_dir(repo.cache().join("git")).unwrap().count();
    assert_eq!(clones, 1);
}

#[test]
fn deleted_branches_and_moved_tags_are_followed() {
    let repo = repo();
    repo.write("a.yaml", "one");
    let first = repo.commit("first");
    repo.git().switch_new_branch("gone");
    repo.git().switch("main");
    repo.git().tag("stable");
    assert_eq!(revision(&git_source(&repo, Some("gone"), None)), Revision::Commit(first.clone()));
    assert_eq!(revision(&git_source(&repo, Some("stable"), None)), Revision::Commit(first));

    repo.git().delete_branch("gone");
    repo.write("a.yaml", "two");
    let second = repo.commit("second");
    repo.git().tag("stable");

    assert!(matches!(
        look(&git_source(&repo, Some("gone"), None), None),
        Err(SourceError::RefNotFound { .. })
    ));
    assert_eq!(revision(&git_source(&repo, Some("stable"), None)), Revision::Commit(second));
}

#[test]
fn git_errors_name_the_ref_the_path_the_commit_or_the_url() {
    let repo = repo();
    repo.write("a.yaml", "a");
    let commit = repo.commit("first");
    let url = canonical(repo.dir());

    let err = read_files(&git_source(&repo, Some("nope"), None)).unwrap_err();
    assert_eq!(err.to_string(), format!("{url} has no branch, tag or commit `nope`"));
    let err = read_files(&git_source(&repo, Some("deadbeef"), None)).unwrap_err();
    assert_eq!(err.to_string(), format!("{url} has no branch, tag or commit `deadbeef`"));

    let err = read_files(&git_source(&repo, Some("main"), Some("pools"))).unwrap_err();
    assert_eq!(err.to_string(), format!("path `pools` not found in {url} at commit {commit}"));
    let err = read_files(&git_source(&repo, Some("main"), Some("a.yaml/b"))).unwrap_err();
    assert_eq!(err.to_string(), format!("path `a.yaml/b` not found in {url} at commit {commit}"));

    let missing: PathBuf = repo.dir().join("missing.git");
    let missing_url = format!("file://{}", missing.display());
    let err = read_files(&git_source_at(&repo, &missing_url, None, None)).unwrap_err();
    assert_eq!(
        chain(&err),
        format!(
            "cannot fetch {missing_url}: failed to resolve path '{}': No such file or directory",
            missing.display()
        )
    );
    assert!(matches!(
        look(&git_source_at(&repo, &missing_url, None, None), None),
        Err(SourceError::Fetch { .. })
    ));
}

#[test]
fn a_repository_without_commits_has_no_head_to_read() {
    let repo = repo();
    let err = read_files(&git_source_at(&repo, &repo.git().url(), None, None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no ref could be resolved in {}: the repository is empty (it has no branch); pass --ref once it \
             has a commit",
            repo.git().url()
        )
    );
}

// --- relative kubeconfigs ---

/// A pool of Nodes whose `node.kubeconfig` is `kubeconfig`, as written.
fn node_pool(kubeconfig: &str) -> String {
    format!(
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  replicas: 1\n  template:\n    image: x\n  node:\n    kubeconfig: {kubeconfig}\n"
    )
}

fn kubeconfig_of(desired: &poolctl::model::Desired) -> String {
    desired.pools[0].pool.spec.node.as_ref().unwrap().kubeconfig.clone().unwrap()
}

#[test]
fn a_relative_kubeconfig_is_read_beside_the_pool_file_of_a_directory() {
    let s = Scenario::new();
    s.write("pools/a.yaml", &node_pool("../clusters/dev.kubeconfig"));
    s.write("clusters/dev.kubeconfig", "apiVersion: v1\nkind: Config\n");
    let spec = SourceSpec::new(s.dir().to_str().unwrap(), None, None).unwrap();
    assert_eq!(Path::new(&kubeconfig_of(&load(&spec).unwrap())), s.dir().join("clusters/dev.kubeconfig"));

    // Missing: the error says where it looked, and why there.
    s.write("pools/a.yaml", &node_pool("./dev.kubeconfig"));
    let err = chain(&load(&spec).unwrap_err());
    let looked = s.dir().join("pools/dev.kubeconfig");
    assert!(err.contains("pools/a.yaml:10:17: spec.node.kubeconfig: "), "{err}");
    assert!(err.contains(&format!("{} does not exist", looked.display())), "{err}");
    assert!(err.contains("relative kubeconfig is read from the pool file's directory"), "{err}");
    // validate, offline, does not look.
    assert!(poolctl::source::load_offline(&spec).is_ok());
}

#[test]
fn a_relative_kubeconfig_of_a_git_source_is_read_from_the_same_commit() {
    let s = repo();
    s.write("pools/a.yaml", &node_pool("dev.kubeconfig"));
    s.write("pools/dev.kubeconfig", "apiVersion: v1\nkind: Config\n# committed\n");
    let commit = s.commit("a pool and its kubeconfig");
    // The working tree is not the commit: only the committed file counts.
    s.write("pools/dev.kubeconfig", "# edited, not committed\n");
    let desired = load(&git_source(&s, Some("main"), None)).unwrap();
    let path = kubeconfig_of(&desired);
    assert!(Path::new(&path).starts_with(s.cache()), "{path}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "apiVersion: v1\nkind: Config\n# committed\n");

    s.write("pools/a.yaml", &node_pool("../../outside"));
    s.commit("out of the repository");
    let err = chain(&load(&git_source(&s, Some("main"), None)).unwrap_err());
    assert!(err.contains("spec.node.kubeconfig: ../../outside points outside the repository"), "{err}");

    s.write("pools/a.yaml", &node_pool("missing.kubeconfig"));
    let missing = s.commit("a kubeconfig never committed");
    let err = chain(&load(&git_source(&s, Some("main"), None)).unwrap_err());
    let short = &missing[..7];
    assert!(err.contains(&format!("pools/missing.kubeconfig does not exist in commit {short}")), "{err}");
    assert_ne!(commit, missing);
}
