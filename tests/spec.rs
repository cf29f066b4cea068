//! The pool file end to end: loading, validation, error messages, the template hash, the JSON
//! Schema and the examples.

use std::path::{Path, PathBuf};

use poolctl::spec::{self, Document, SpecError, SpecErrors, load_documents, load_files, validate_pools};

/// A valid pool document named `name`, with `extra` appended under `spec:` (indented 2).
fn pool(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: {name}\nspec:\n  replicas: 3\n  template:\n    image: busybox\n{extra}"
    )
}

/// Loads files and validates them together, the way a source does, returning every error as
/// a display line.
fn errors_of(files: &[(&str, &str)]) -> Vec<String> {
    match load_files(files.iter().copied()) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(SpecError::to_string).collect(),
    }
}

/// The single error of one file.
fn error_of(text: &str) -> String {
    let errors = errors_of(&[("pools/a.yaml", text)]);
    assert_eq!(errors.len(), 1, "expected one error, got {errors:#?}");
    errors.into_iter().next().unwrap()
}

fn load_one(text: &str) -> Document {
    let mut docs = load_documents("a.yaml", text).expect("loads");
    assert_eq!(docs.len(), 1);
    docs.remove(0)
}

#[test]
fn a_valid_pool_loads_with_defaults() {
    let doc = load_one(&pool("workers", ""));
    assert_eq!(doc.file, "a.yaml");
    assert_eq!(doc.pool.metadata.name, "workers");
    assert_eq!(doc.pool.spec.replicas, 3);
    assert_eq!(doc.pool.spec.rollout.max_surge, poolctl::spec::IntOrPercent::Count(1));
    assert_eq!(doc.pool.spec.rollout.max_unavailable, poolctl::spec::IntOrPercent::Count(0));
    assert_eq!(doc.pool.spec.rollout.stop_grace_period.to_string(), "30s");
    assert!(validate_pools(&[doc]).is_ok());
}

#[test]
fn other_api_versions_and_empty_documents_are_skipped() {
    let text = format!(
        "---\n# only a comment\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n---\n{}\n---\nhelm: values\nreplicaCount: 2\n---\n- a list\n",
        pool("workers", "")
    );
    let docs = load_documents("mixed.yaml", &text).expect("loads");
    let names: Vec<_> = docs.iter().map(|d| d.pool.metadata.name.as_str()).collect();
    assert_eq!(names, ["workers"]);
}

#[test]
fn a_pool_without_api_version_is_an_error_not_skipped() {
    let text = "kind: Pool\nmetadata:\n  name: workers\n";
    assert_eq!(
        error_of(text),
        "pools/a.yaml:1:1: apiVersion: is missing: a Pool needs `apiVersion: poolctl.dev/v1alpha1`"
    );
}

#[test]
fn an_unknown_kind_or_version_of_poolctl_is_an_error() {
    let text = pool("workers", "").replace("kind: Pool", "kind: Pond");
    assert_eq!(
        error_of(&text),
        "pools/a.yaml:2:7: kind: unknown kind \"Pond\" in poolctl.dev/v1alpha1: expected Pool"
    );
    let text = pool("workers", "").replace("v1alpha1", "v2");
    assert_eq!(
        error_of(&text),
        "pools/a.yaml:1:13: apiVersion: unsupported version \"poolctl.dev/v2\": this poolctl reads poolctl.dev/v1alpha1"
    );
}

#[test]
fn a_syntax_error_names_line_and_column() {
    let text = pool("workers", "  rollout: {maxSurge: 1\n");
    let error = error_of(&text);
    // The place is the bracket left open, where the reader has to look.
    assert_eq!(error, "pools/a.yaml:9:12: unclosed bracket '{'");
}

#[test]
fn an_unknown_field_names_line_column_and_field() {
    let text = pool("workers", "    imagePullPolicy: Always\n");
    let error = error_of(&text);
    assert!(
        error.starts_with(
            "pools/a.yaml:9:5: spec.template.imagePullPolicy: unknown field `imagePullPolicy`, expected one of `image`"
        ),
        "{error}"
    );
}

#[test]
fn a_wrong_type_names_line_column_and_field() {
    let text = pool("workers", "").replace("replicas: 3", "replicas: \"three\"");
    assert_eq!(
        error_of(&text),
        "pools/a.yaml:6:13: spec.replicas: invalid type: string \"three\", expected i64"
    );
}

#[test]
fn a_bad_duration_names_line_column_and_field() {
    let text = pool("workers", "  rollout:\n    drainTimeout: 5 minutes\n");
    assert_eq!(
        error_of(&text),
        "pools/a.yaml:10:19: spec.rollout.drainTimeout: invalid duration \"5 minutes\": expected e.g. 30s, 5m or 1h30m (units ms, s, m, h)"
    );
}

#[test]
fn a_missing_field_names_its_parent() {
    let text = pool("workers", "").replace("    image: busybox\n", "    copyFrom: {}\n");
    assert_eq!(error_of(&text), "pools/a.yaml:8:15: spec.template.copyFrom: missing field `container`");
    // The image may be left out only for copyFrom to give it.
    let text = pool("workers", "").replace("    image: busybox\n", "    network: kind\n");
    assert_eq!(
        error_of(&text),
        "pools/a.yaml:8:5: spec.template.image: must name an image (unless copyFrom names a container to copy)"
    );
}

#[test]
fn lines_count_from_the_top_of_the_file_in_later_documents() {
    // Lines 1-8 the first pool, 9 `---`, 10-17 a Deployment, 18 `---`, 19- the third pool.
    let first = pool("one", "");
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  template:\n    spec: {}\n";
    let third = pool("three", "    bogus: 1\n").replace("replicas: 3", "replicas: -1");
    let text = format!("{first}---\n{deployment}---\n{third}");
    assert_eq!(first.lines().count(), 8);
    let errors = errors_of(&[("multi.yaml", &text)]);
    // An unknown field does not hide the semantic errors of the same document.
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("multi.yaml:27:5: spec.template.bogus: unknown field"), "{errors:#?}");
    assert_eq!(errors[1], "multi.yaml:24:13: spec.replicas: must be 0 or more, got -1");

    // Semantic errors are located in later documents too.
    let third = pool("three", "").replace("replicas: 3", "replicas: -1");
    let text = format!("{first}---\n{deployment}---\n{third}");
    assert_eq!(
        errors_of(&[("multi.yaml", &text)]),
        ["multi.yaml:24:13: spec.replicas: must be 0 or more, got -1"]
    );
}

#[test]
fn a_bad_document_does_not_hide_the_ones_after_it() {
    let text = format!(
        "{}---\n{}---\n{}",
        pool("one", "    bogus: 1\n"),
        pool("two", "").replace("busybox", "\"\""),
        pool("three", "").replace("kind: Pool", "kind: Pond"),
    );
    let errors = errors_of(&[("a.yaml", &text)]);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(errors[0].starts_with("a.yaml:9:5: spec.template.bogus: unknown field"));
    assert!(errors[1].starts_with("a.yaml:21:7: kind: unknown kind \"Pond\""), "{errors:#?}");
    // Semantic checks come after parsing, and still cover the good document of a bad file.
    assert_eq!(
        errors[2],
        "a.yaml:18:12: spec.template.image: must name an image (unless copyFrom names a container to copy)"
    );
}

#[test]
fn documents_before_a_syntax_error_are_still_checked() {
    let text = format!("{}---\nkey: [unclosed\n", pool("one", "    bogus: 1\n"));
    let errors = errors_of(&[("a.yaml", &text)]);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].contains("spec.template.bogus"));
    assert_eq!(errors[1], "a.yaml:11:6: unclosed bracket '['");
}

/// Every semantic rule, each with the error line it must produce. The extra text goes under
/// `spec:` of a pool named `workers`; lines 1-8 are the base document.
#[test]
fn every_semantic_rule_reports_file_line_and_field() {
    let cases: [(&str, &str, &str); 17] = [
        (
            "empty image",
            "",
            "a.yaml:8:12: spec.template.image: must name an image (unless copyFrom names a container to copy)",
        ),
        ("negative replicas", "", "a.yaml:6:13: spec.replicas: must be 0 or more, got -2"),
        (
            "negative maxSurge",
            "  rollout:\n    maxSurge: -1\n    maxUnavailable: 1\n",
            "a.yaml:10:15: spec.rollout.maxSurge: must be 0 or more, got -1",
        ),
        (
            "negative maxUnavailable",
            "  rollout:\n    maxUnavailable: -1\n",
            "a.yaml:10:21: spec.rollout.maxUnavailable: must be 0 or more, got -1",
        ),
        (
            "surge and unavailable both 0",
            "  rollout:\n    maxSurge: 0\n",
            "a.yaml:10:15: spec.rollout.maxSurge: maxSurge and maxUnavailable are both 0, so a rollout could never replace an instance: set maxSurge (create first) or maxUnavailable (retire first) to 1 or more",
        ),
        (
            "empty bootstrap argv",
            "  bootstrap:\n    - exec: []\n",
            "a.yaml:10:13: spec.bootstrap[0].exec: must name a command to run",
        ),
        (
            "bootstrap timeout 0",
            "  bootstrap:\n    - exec: [\"true\"]\n    - exec: [\"true\"]\n      timeout: 0s\n",
            "a.yaml:12:16: spec.bootstrap[1].timeout: must be longer than 0s",
        ),
        (
            "reserved label",
            "    labels:\n      team: a\n      poolctl.dev/pool: x\n",
            "a.yaml:11:25: spec.template.labels.poolctl.dev/pool: the label prefix poolctl.dev/ is reserved for poolctl's own labels",
        ),
        (
            "empty env key",
            "    env:\n      \"\": x\n",
            "a.yaml:10:7: spec.template.env: an environment variable has an empty name",
        ),
        (
            "anonymous volume at a relative path",
            "    volumes: [\"/a:/b\", \"lib/modules\"]\n",
            "a.yaml:9:24: spec.template.volumes[1]: volume \"lib/modules\": the container path \"lib/modules\" must be absolute (expected /path (an anonymous volume), src:dst or src:dst:ro|rw)",
        ),
        (
            "volume with a bad mode",
            "    volumes:\n      - /a:/b:rx\n",
            "a.yaml:10:9: spec.template.volumes[0]: volume \"/a:/b:rx\" has an unknown option \"rx\": expected /path (an anonymous volume), src:dst or src:dst:ro|rw",
        ),
        (
            "relative tmpfs",
            "    tmpfs: [/run, tmp]\n",
            "a.yaml:9:19: spec.template.tmpfs[1]: tmpfs \"tmp\": the container path \"tmp\" must be absolute",
        ),
        (
            "bad taint effect",
            "  node:\n    taints:\n      - {key: a, effect: NoScheduel}\n",
            "a.yaml:11:26: spec.node.taints[0].effect: unknown taint effect \"NoScheduel\": expected one of NoSchedule, PreferNoSchedule, NoExecute",
        ),
        (
            "ready timeout 0",
            "  node:\n    readyTimeout: 0ms\n",
            "a.yaml:10:19: spec.node.readyTimeout: must be longer than 0s",
        ),
        (
            "name with capitals",
            "",
            "a.yaml:4:9: metadata.name: \"Workers\" is not a DNS-1123 label: use lowercase letters, digits and '-', starting and ending with a letter or digit",
        ),
        (
            "name ending in a dash",
            "",
            "a.yaml:4:9: metadata.name: \"workers-\" is not a DNS-1123 label: use lowercase letters, digits and '-', starting and ending with a letter or digit",
        ),
        (
            "name too long",
            "",
            "a.yaml:4:9: metadata.name: \"wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww\" is 47 characters long; at most 46 are allowed, so that instance names (<pool>-<hash>-<suffix>) fit in 63",
        ),
    ];
    for (what, extra, expected) in cases {
        let mut text = pool("workers", extra);
        match what {
            "empty image" => text = text.replace("image: busybox", "image: \"\""),
            "negative replicas" => text = text.replace("replicas: 3", "replicas: -2"),
            "name with capitals" => text = text.replace("name: workers", "name: Workers"),
            "name ending in a dash" => text = text.replace("name: workers", "name: workers-"),
            "name too long" => text = text.replace("name: workers", &format!("name: {}", "w".repeat(47))),
            _ => {}
        }
        assert_eq!(errors_of(&[("a.yaml", &text)]), [expected], "{what}");
    }
}

#[test]
fn a_name_of_46_characters_is_fine() {
    let name = "a".repeat(poolctl::spec::MAX_POOL_NAME_LEN);
    assert_eq!(name.len(), 46);
    assert!(errors_of(&[("a.yaml", &pool(&name, ""))]).is_empty());
}

#[test]
fn the_same_pool_in_two_files_names_both() {
    let errors = errors_of(&[
        ("a.yaml", &pool("workers", "")),
        ("b.yaml", &format!("# a comment\n{}", pool("workers", ""))),
    ]);
    assert_eq!(errors, ["b.yaml:5:9: metadata.name: pool \"workers\" is declared twice: also at a.yaml:4:9"]);
}

#[test]
fn the_same_pool_twice_in_one_file_names_both() {
    let text = format!("{}---\n{}", pool("workers", ""), pool("workers", ""));
    assert_eq!(
        errors_of(&[("a.yaml", &text)]),
        ["a.yaml:13:9: metadata.name: pool \"workers\" is declared twice: also at a.yaml:4:9"]
    );
}

#[test]
fn all_errors_of_all_files_are_reported_together() {
    let bad_rollout =
        pool("one", "    tmpfs: [run]\n  rollout:\n    maxSurge: 0\n").replace("replicas: 3", "replicas: -1");
    let errors = errors_of(&[("a.yaml", &bad_rollout), ("b.yaml", "a: [\n"), ("c.yaml", &pool("one", ""))]);
    let expected = [
        "b.yaml:1:4: unclosed bracket '['",
        "a.yaml:6:13: spec.replicas: must be 0 or more",
        "a.yaml:11:15: spec.rollout.maxSurge: maxSurge and maxUnavailable are both 0",
        "a.yaml:9:13: spec.template.tmpfs[0]: tmpfs \"run\": the container path \"run\" must be absolute",
        "c.yaml:4:9: metadata.name: pool \"one\" is declared twice: also at a.yaml:4:9",
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, start) in errors.iter().zip(expected) {
        assert!(error.starts_with(start), "{error:?} should start with {start:?}");
    }
}

#[test]
fn spec_errors_display_one_per_line() {
    let text = pool("Bad", "").replace("busybox", "\"\"");
    let errors = load_documents("a.yaml", &text).and_then(|d| validate_pools(&d)).unwrap_err();
    assert_eq!(
        SpecErrors(errors).to_string(),
        "a.yaml:4:9: metadata.name: \"Bad\" is not a DNS-1123 label: use lowercase letters, digits and '-', starting and ending with a letter or digit\n\
         a.yaml:8:12: spec.template.image: must name an image (unless copyFrom names a container to copy)"
    );
}

mod template_hash {
    use super::*;

    fn hash_of(text: &str) -> String {
        let pool = load_one(text).pool;
        spec::template_hash(&pool.spec)
    }

    const BASE: &str = "\
apiVersion: poolctl.dev/v1alpha1
kind: Pool
metadata:
  name: workers
spec:
  replicas: 3
  template:
    image: busybox
    env:
      A: one
      B: two
    labels:
      x: '1'
      y: '2'
  bootstrap:
    - exec: [\"true\"]
";

    #[test]
    fn is_stable_and_short() {
        let hash = hash_of(BASE);
        assert_eq!(hash.len(), spec::HASH_LEN);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(hash, hash_of(BASE));
    }

    #[test]
    fn ignores_map_order() {
        // BASE with the keys of env and labels, and the two maps themselves, written in
        // another order.
        let reordered = BASE.replace(
            "    env:\n      A: one\n      B: two\n    labels:\n      x: '1'\n      y: '2'\n",
            "    labels:\n      y: '2'\n      x: '1'\n    env:\n      B: two\n      A: one\n",
        );
        assert_ne!(reordered, BASE);
        assert_eq!(hash_of(&reordered), hash_of(BASE));
    }

    #[test]
    fn ignores_replicas_and_rollout() {
        let changed = BASE.replace("replicas: 3", "replicas: 7")
            + "  rollout:\n    maxSurge: 3\n    maxUnavailable: 1\n    drainTimeout: 1h\n    stopGracePeriod: 1s\n";
        assert_eq!(hash_of(&changed), hash_of(BASE));
    }

    #[test]
    fn changes_with_image_env_and_bootstrap() {
        let base = hash_of(BASE);
        for changed in [
            BASE.replace("image: busybox", "image: busybox:1.37"),
            BASE.replace("A: one", "A: uno"),
            BASE.replace("B: two", "B: two\n      C: three"),
            BASE.replace("exec: [\"true\"]", "exec: [\"true\", \"again\"]"),
            BASE.to_owned() + "      timeout: 5m\n",
            BASE.to_owned() + "    - exec: [\"false\"]\n",
        ] {
            assert_ne!(hash_of(&changed), base, "{changed}");
        }
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn schema_file_matches_the_types() {
    let expected = serde_json::to_string_pretty(&spec::json_schema()).unwrap() + "\n";
    let path = manifest_dir().join("schema/pool.schema.json");
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{} is out of date with the Rust types; regenerate it with\n\n    cargo run -- schema > schema/pool.schema.json\n",
        path.display()
    );
}

#[test]
fn schema_pins_api_version_and_kind() {
    let schema = spec::json_schema();
    assert_eq!(schema["properties"]["apiVersion"]["const"], spec::API_VERSION);
    assert_eq!(schema["properties"]["kind"]["const"], spec::KIND_POOL);
    let required = schema["required"].as_array().unwrap();
    for field in ["apiVersion", "kind", "metadata", "spec"] {
        assert!(required.iter().any(|r| r == field), "{field} not required");
    }
    assert_eq!(schema["additionalProperties"], false);
    let name = &schema["$defs"]["Metadata"]["properties"]["name"];
    assert_eq!(name["maxLength"], spec::MAX_POOL_NAME_LEN);
}

/// Every YAML file under `dir`, recursively, in sorted order.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    let mut files = Vec::new();
    for path in entries {
        if path.is_dir() {
            files.extend(yaml_files(&path));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    files
}

/// Loads and validates every example directory as one source; returns its pools' names.
fn example_pools(example: &str) -> Vec<String> {
    let root = manifest_dir().join("examples").join(example);
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    let files = yaml_files(&root);
    assert!(!files.is_empty(), "no YAML files in {}", root.display());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.strip_prefix(&root).unwrap().display().to_string();
        match load_documents(&file, &text) {
            Ok(found) => docs.extend(found),
            Err(found) => errors.extend(found),
        }
    }
    if let Err(found) = validate_pools(&docs) {
        errors.extend(found);
    }
    assert!(errors.is_empty(), "examples/{example}:\n{}", SpecErrors(errors));
    docs.into_iter().map(|d| d.pool.metadata.name).collect()
}

#[test]
fn every_example_is_valid_and_declares_a_pool() {
    let mut examples: Vec<_> = std::fs::read_dir(manifest_dir().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    examples.sort();
    assert_eq!(examples, ["gitops", "k3d-agents", "kind-workers", "quickstart"]);
    for example in &examples {
        assert!(!example_pools(example).is_empty(), "examples/{example} declares no pool");
    }
}

#[test]
fn the_quickstart_is_a_container_only_pool_of_three() {
    let root = manifest_dir().join("examples/quickstart/pool.yaml");
    let doc = load_one(&std::fs::read_to_string(root).unwrap());
    assert_eq!(doc.pool.spec.replicas, 3);
    assert_eq!(doc.pool.spec.template.image, "poolctl-busybox:latest");
    assert!(doc.pool.spec.node.is_none());
}

#[test]
fn the_gitops_example_skips_its_kubernetes_manifests() {
    assert_eq!(example_pools("gitops"), ["edge"]);
}

/// No input panics or takes long: arbitrary text, and mutations of the example files.
/// `POOLCTL_FUZZ_CASES` raises the number of cases (CI runs the default).
mod fuzz {
    use std::time::{Duration, Instant};

    use proptest::prelude::*;

    use super::*;

    fn cases() -> u32 {
        std::env::var("POOLCTL_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
    }

    fn examples() -> Vec<String> {
        let root = manifest_dir().join("examples");
        yaml_files(&root).iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
    }

    fn check(text: &str) {
        let started = Instant::now();
        let _ = errors_of(&[("f.yaml", text)]);
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn arbitrary_text_never_panics(text in "(?s).{0,400}") {
            check(&text);
        }

        #[test]
        fn mutated_examples_never_panic(
            which in any::<prop::sample::Index>(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..8, "[\\[\\]{}&*!:,\"'#|>\\- \n\t\u{1}a0-9%]{0,4}"), 1..6),
        ) {
            let all = examples();
            let mut text = all[which.index(all.len())].clone().into_bytes();
            for (at, cut, insert) in edits {
                let at = at.index(text.len() + 1);
                let end = (at + cut).min(text.len());
                text.splice(at..end, insert.bytes());
            }
            check(&String::from_utf8_lossy(&text));
        }
    }
}

#[test]
fn a_top_level_list_of_pools_is_told_to_use_separate_documents() {
    let item = pool("a", "").replace('\n', "\n  ");
    let error = error_of(&format!("- {item}\n- {}", pool("b", "").replace('\n', "\n  ")));
    assert_eq!(
        error,
        "pools/a.yaml:1:1: a top-level list is not a Pool document: write each Pool as a document of its \
         own, separated by `---` lines"
    );
}

#[test]
fn a_spec_given_as_a_list_is_told_it_must_be_a_mapping() {
    let text = "apiVersion: poolctl.dev/v1alpha1\nkind: Pool\nmetadata:\n  name: a\nspec:\n  - replicas: 1\n    template: {image: x}\n";
    assert_eq!(error_of(text), "pools/a.yaml:6:3: spec: expected a mapping, found a sequence");
}

#[test]
fn a_relative_bind_source_is_refused_by_validation() {
    let error = error_of(&pool("a", "    volumes: [\"./relative:/x\", \"data:/data\", \"/abs:/abs\"]\n"));
    assert!(
        error.starts_with("pools/a.yaml:9:15: spec.template.volumes[0]: volume \"./relative:/x\": "),
        "{error}"
    );
    assert!(error.contains("must be absolute"), "{error}");
}

#[test]
fn depends_on_names_a_pool_of_the_source_never_itself_and_no_cycle() {
    let on = |name: &str, deps: &str| pool(name, &format!("  dependsOn: [{deps}]\n"));
    assert!(errors_of(&[("a.yaml", &on("apps", "system")), ("b.yaml", &pool("system", ""))]).is_empty());
    assert_eq!(
        errors_of(&[("a.yaml", &on("apps", "sytem")), ("b.yaml", &pool("system", ""))]),
        ["a.yaml:9:15: spec.dependsOn[0]: no pool \"sytem\" in this source to depend on"]
    );
    assert_eq!(
        errors_of(&[("a.yaml", &on("apps", "apps"))]),
        ["a.yaml:9:15: spec.dependsOn[0]: pool \"apps\" cannot depend on itself"]
    );
    let errors =
        errors_of(&[("a.yaml", &on("a", "b")), ("b.yaml", &on("b", "c")), ("c.yaml", &on("c", "a"))]);
    assert_eq!(errors.len(), 3, "each pool of the cycle is told: {errors:#?}");
    assert_eq!(errors[0], "a.yaml:9:15: spec.dependsOn[0]: a cycle of dependsOn: a -> b -> c -> a");
}
