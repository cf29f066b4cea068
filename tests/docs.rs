//! The documentation keeps up with the repository: every relative link of README.md,
//! CHANGELOG.md and docs/*.md resolves, the docs index names every page, docs/pool-file.md has a
//! row for every field of the pool file's JSON Schema, and CI runs the README's test command.
//!
//! Links. A link is a Markdown inline link or image (`[text](target)`, `![alt](target)`) or a
//! reference definition (`[label]: target`) outside fenced code blocks and code spans. A target
//! with a scheme (`https:`, `mailto:`) is left alone. Any other target must name a file or
//! directory inside the repository, relative to the page; `file.md#anchor` (or `#anchor` for
//! the page itself) must match a heading of that Markdown file under GitHub's rule: the heading
//! text lowercased, every character dropped but letters, digits, spaces, `-` and `_`, spaces
//! turned into `-`, and `-1`, `-2`... appended to repeats. An anchor into a file that is not
//! Markdown cannot be checked, so it is an error too.
//!
//! Fields. Each property of the schema is named by its path from the top of a document, as
//! `kubectl explain` names fields: `$ref`s are followed, and the entries of a list (`items`) or
//! a map (`additionalProperties`) add no segment, nor do `anyOf` / `oneOf` / `allOf` branches
//! (so `spec.node.taints.key`, `spec.template.env.valueFrom.file`). Every such path must be
//! the text of a code span in the first cell of a table row of docs/pool-file.md, and every code
//! span there that starts with a top-level field must be such a path, so that a field the
//! schema drops does not linger either. Every property anywhere in the schema (under `$defs`
//! too) must be reachable from the top, or it has no path and the test says so.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages whose links are checked, relative to the repository root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| path.strip_prefix(root()).expect("under the root").to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(rel: &Path) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("cannot read {}: {e}", rel.display()))
}

/// The lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<(char, usize)> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match (fence, marker) {
            (None, Some(c)) if run >= 3 => fence = Some((c, run)),
            (Some((c, n)), Some(m)) if m == c && run >= n && trimmed[run..].trim().is_empty() => {
                fence = None;
            }
            (None, _) => lines.push((i + 1, line)),
            (Some(_), _) => {}
        }
    }
    lines
}

/// The code spans of a line, and the line with them taken out.
fn code_spans(line: &str) -> (Vec<String>, String) {
    let mut spans = Vec::new();
    let mut rest = String::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = line[i..].find('`').map_or(line.len(), |k| i + k);
            rest.push_str(&line[i..next]);
            i = next;
            continue;
        }
        let run = line[i..].bytes().take_while(|b| *b == b'`').count();
        let fence = &line[i..i + run];
        // The closing run has exactly as many backticks.
        let mut search = i + run;
        let close = loop {
            match line[search..].find(fence) {
                None => break None,
                Some(k) => {
                    let at = search + k;
                    let len = line[at..].bytes().take_while(|b| *b == b'`').count();
                    if len == run {
                        break Some(at);
                    }
                    search = at + len;
                }
            }
        };
        if let Some(at) = close {
            spans.push(line[i + run..at].trim().to_string());
            rest.push(' ');
            i = at + run;
        } else {
            rest.push_str(fence);
            i += run;
        }
    }
    (spans, rest)
}

/// The link targets of one line of prose (code spans already taken out).
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if let Some(after) = trimmed.strip_prefix('[')
        && let Some(end) = after.find("]:")
        && !after[..end].contains('[')
    {
        if let Some(target) = after[end + 2..].split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_string());
        }
        return targets;
    }
    let mut from = 0;
    while let Some(k) = line[from..].find("](") {
        let start = from + k + 2;
        let mut depth = 0usize;
        let mut end = line.len();
        for (j, c) in line[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = start + j;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inner = line[start..end].trim();
        let target = inner.split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_string());
        from = end.min(line.len());
    }
    targets
}

/// Whether a link target leaves the repository's files: a scheme (`https:`) or `//host`.
fn is_external(target: &str) -> bool {
    let head = target.split(['/', '#', '?']).next().unwrap_or("");
    head.contains(':') || target.starts_with("//")
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings, repeats numbered as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.bytes().take_while(|b| *b == b'#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim_end();
        let base = slug(title);
        let count = seen.entry(base.clone()).or_default();
        anchors.insert(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
        *count += 1;
    }
    anchors
}

/// The path `rel` resolves to from the directory `dir` (both relative to the root), or `None`
/// when it climbs out of the repository.
fn resolve(dir: &Path, rel: &str) -> Option<PathBuf> {
    let mut path = PathBuf::new();
    for component in dir.join(rel).components() {
        match component {
            Component::Normal(part) => path.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !path.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(path)
}

/// What is wrong with one link of `page`, if anything.
fn check_link(page: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("has no target".to_string());
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let dest = if file.is_empty() {
        page.to_path_buf()
    } else {
        let dir = page.parent().unwrap_or(Path::new(""));
        match resolve(dir, file) {
            Some(dest) => dest,
            None => return Some("leaves the repository".to_string()),
        }
    };
    if !root().join(&dest).exists() {
        return Some(format!("{} does not exist", dest.display()));
    }
    let anchor = anchor?;
    if dest.extension().is_none_or(|ext| ext != "md") {
        return Some(format!("an anchor into {}, which is not Markdown, cannot be checked", dest.display()));
    }
    if anchors(&read(&dest)).contains(anchor) {
        None
    } else {
        Some(format!("{} has no heading with the anchor #{anchor}", dest.display()))
    }
}

/// Every relative link of a page, with its line number.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    for (number, line) in prose_lines(text) {
        let (_, prose) = code_spans(line);
        for target in link_targets(&prose) {
            if !is_external(&target) {
                links.push((number, target));
            }
        }
    }
    links
}

#[test]
fn every_relative_link_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (number, target) in relative_links(&read(&page)) {
            checked += 1;
            if let Some(problem) = check_link(&page, &target) {
                problems.push(format!("{}:{number}: ({target}): {problem}", page.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{} broken links:\n{}", problems.len(), problems.join("\n"));
    // The pages link to each other and to examples/, schema/ and BENCHMARKS.md: a count this
    // low means the link reader, not the pages, is broken.
    assert!(checked >= 30, "only {checked} relative links found: is the link reader broken?");
}

#[test]
fn the_docs_index_names_every_page() {
    let index = Path::new("docs/README.md");
    let linked: BTreeSet<PathBuf> = relative_links(&read(index))
        .into_iter()
        .filter_map(|(_, target)| resolve(Path::new("docs"), target.split('#').next().unwrap_or("")))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|page| page.starts_with("docs") && page.as_path() != index && !linked.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(missing.is_empty(), "docs/README.md does not link to: {}", missing.join(", "));
}

/// Walks a schema node at `pointer` (`#/$defs/Template`) whose fields are named under `path`,
/// collecting every field's path and the pointer of every property it reached.
struct FieldWalk<'a> {
    schema: &'a Value,
    paths: BTreeSet<String>,
    reached: BTreeSet<String>,
    refs: Vec<String>,
}

impl FieldWalk<'_> {
    fn walk(&mut self, node: &Value, pointer: &str, path: &str) {
        if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
            // A type that contains itself would never end; no pool field does, but say so.
            assert!(
                !self.refs.iter().any(|r| r == reference),
                "the schema refers to {reference} inside itself"
            );
            let target = reference
                .strip_prefix('#')
                .and_then(|p| self.schema.pointer(p))
                .unwrap_or_else(|| panic!("{pointer}: $ref {reference} does not resolve"));
            self.refs.push(reference.to_string());
            self.walk(target, reference, path);
            self.refs.pop();
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let child = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                let at = format!("{pointer}/properties/{name}");
                self.paths.insert(child.clone());
                self.reached.insert(at.clone());
                self.walk(property, &at, &child);
            }
        }
        for (key, child) in transparent_children(node) {
            self.walk(child, &format!("{pointer}/{key}"), path);
        }
    }
}

/// The subschemas of a node that describe the same field (list items, map values, branches),
/// with their keys relative to the node.
fn transparent_children(node: &Value) -> Vec<(String, &Value)> {
    let mut children = Vec::new();
    for key in ["items", "additionalProperties"] {
        match node.get(key) {
            Some(child @ Value::Object(_)) => children.push((key.to_string(), child)),
            Some(Value::Array(items)) => {
                children.extend(items.iter().enumerate().map(|(i, child)| (format!("{key}/{i}"), child)));
            }
            _ => {}
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = node.get(key).and_then(Value::as_array) {
            children.extend(branches.iter().enumerate().map(|(i, child)| (format!("{key}/{i}"), child)));
        }
    }
    children
}

/// The pointer of every property anywhere in the schema, `$defs` included.
fn all_properties(node: &Value, pointer: &str, out: &mut BTreeSet<String>) {
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let at = format!("{pointer}/properties/{name}");
            out.insert(at.clone());
            all_properties(property, &at, out);
        }
    }
    if let Some(defs) = node.get("$defs").and_then(Value::as_object) {
        for (name, def) in defs {
            all_properties(def, &format!("{pointer}/$defs/{name}"), out);
        }
    }
    for (key, child) in transparent_children(node) {
        all_properties(child, &format!("{pointer}/{key}"), out);
    }
}

/// The code spans in the first cell of every table row of a Markdown text.
fn first_cell_spans(text: &str) -> BTreeSet<String> {
    let mut spans = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(row) = line.trim().strip_prefix('|') else { continue };
        // Cells end at a `|` that is not escaped (`\|` inside a cell is text).
        let mut end = row.len();
        let mut escaped = false;
        for (i, c) in row.char_indices() {
            match c {
                '\\' => escaped = !escaped,
                '|' if !escaped => {
                    end = i;
                    break;
                }
                _ => escaped = false,
            }
        }
        spans.extend(code_spans(&row[..end]).0);
    }
    spans
}

#[test]
fn pool_file_md_documents_every_schema_field() {
    let schema: Value =
        serde_json::from_str(&read(Path::new("schema/pool.schema.json"))).expect("the schema is JSON");
    let mut walk =
        FieldWalk { schema: &schema, paths: BTreeSet::new(), reached: BTreeSet::new(), refs: Vec::new() };
    walk.walk(&schema, "#", "");
    let mut everywhere = BTreeSet::new();
    all_properties(&schema, "#", &mut everywhere);
    let unreachable: Vec<&String> = everywhere.difference(&walk.reached).collect();
    assert!(
        unreachable.is_empty(),
        "schema properties not reachable from the top of a document, so with no field path: {unreachable:?}"
    );
    let tops: BTreeSet<&str> = walk.paths.iter().filter(|p| !p.contains('.')).map(String::as_str).collect();
    // A sanity check of the walk itself: the pool file's fields are well known.
    for known in ["apiVersion", "metadata.name", "spec.template.image", "spec.rollout.maxSurge"] {
        assert!(walk.paths.contains(known), "the schema walk missed {known}: {:?}", walk.paths);
    }

    let page = Path::new("docs/pool-file.md");
    let documented: BTreeSet<String> = first_cell_spans(&read(page))
        .into_iter()
        .filter(|span| span.split('.').next().is_some_and(|top| tops.contains(top)))
        .collect();
    let missing: Vec<&String> = walk.paths.difference(&documented).collect();
    let stale: Vec<&String> = documented.difference(&walk.paths).collect();
    let list = |paths: &[&String]| paths.iter().map(|p| format!("\n  {p}")).collect::<Vec<_>>().concat();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "fields of schema/pool.schema.json with no table row in {} (a first cell with the path as \
             code, e.g. | `spec.rollout.maxSurge` | ... |):{}",
            page.display(),
            list(&missing)
        ));
    }
    if !stale.is_empty() {
        problems.push(format!(
            "table rows of {} for fields the schema does not have:{}",
            page.display(),
            list(&stale)
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = read(Path::new("README.md"));
    let prose: BTreeSet<usize> = prose_lines(&readme).into_iter().map(|(n, _)| n).collect();
    let commands: Vec<&str> = readme
        .lines()
        .enumerate()
        .filter(|(i, line)| !prose.contains(&(i + 1)) && line.trim_start().starts_with("cargo test"))
        .map(|(_, line)| line.trim())
        .collect();
    assert_eq!(commands.len(), 1, "the README should give one test command in a code block: {commands:?}");
    let ci = read(Path::new(".ci/run"));
    assert!(
        ci.lines().any(|line| line.trim() == commands[0]),
        ".ci/run does not run the README's test command {:?}",
        commands[0]
    );
}

#[test]
fn the_link_reader_reads_what_github_renders() {
    assert_eq!(slug("JSON plan (`plan -o json`)"), "json-plan-plan--o-json");
    assert_eq!(slug("One run at a time"), "one-run-at-a-time");
    assert_eq!(slug("Recipes: kind and k3d"), "recipes-kind-and-k3d");
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n### b_c #\n"),
        ["a", "a-1", "b_c"].into_iter().map(String::from).collect()
    );
    let (spans, rest) = code_spans("see `[a](b.md)` and ``x ` y`` then [c](d.md#e)");
    assert_eq!(spans, ["[a](b.md)", "x ` y"]);
    assert_eq!(link_targets(&rest), ["d.md#e"]);
    assert_eq!(link_targets("[label]: ../x.md"), ["../x.md"]);
    assert_eq!(link_targets("![img](pic.png \"title\") [t](a_(b).md)"), ["pic.png", "a_(b).md"]);
    assert!(is_external("https://keepachangelog.com/en/1.1.0/"));
    assert!(!is_external("docs/commands.md#sources"));
    assert_eq!(resolve(Path::new("docs"), "../README.md"), Some(PathBuf::from("README.md")));
    assert_eq!(resolve(Path::new("docs"), "../../x"), None);
    assert_eq!(
        first_cell_spans("| `spec.a`, `spec.b` | `x` |\n| a \\| `b` | c |\n"),
        ["spec.a", "spec.b", "b"].into_iter().map(String::from).collect()
    );
}

/// The README is a page: what poolctl is, how to set it up, the quickstart and the recipes. The
/// reference lives in docs/.
#[test]
fn the_readme_is_at_most_a_page() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; move the reference to docs/");
}

/// The plan the README shows is the planner's own snapshot, as the README says: the two cannot
/// drift apart.
#[test]
fn the_readme_plan_is_the_planners_snapshot() {
    let readme = read(Path::new("README.md"));
    let snapshot = read(Path::new("src/plan/snapshots/poolctl__plan__tests__node_rollout_text.snap"));
    let body = snapshot.splitn(3, "---\n").nth(2).expect("an insta snapshot: header, then the text");
    let shown = readme.split("```\n").find(|block| block.starts_with("Source: pools/")).expect("the plan");
    assert_eq!(shown.trim_end(), body.trim_end(), "README.md's plan is not src/plan/snapshots' node rollout");
}

/// Every file or directory docs/architecture.md places a stage in (the `where` column of the
/// table under "Where the code lives") exists under `src/`, so that the page stays true to the
/// tree.
#[test]
fn the_architecture_page_names_modules_that_exist() {
    let text = read(Path::new("docs/architecture.md"));
    let table = text
        .lines()
        .skip_while(|l| *l != "## Where the code lives")
        .skip(1)
        .take_while(|l| !l.starts_with("## "));
    let mut named = 0;
    for line in table.filter(|l| l.starts_with("| ") && !l.starts_with("| ---")) {
        let Some(cell) = line.split(" | ").nth(1) else { continue };
        let (spans, _) = code_spans(cell);
        for span in spans {
            let path = root().join("src").join(span.trim_end_matches('/'));
            assert!(path.exists(), "docs/architecture.md names src/{span}, which does not exist");
            named += 1;
        }
    }
    assert!(named >= 15, "the table was not read: {named} paths");
}

/// The Rust files under `src/<dir>`, with their code.
fn sources_under(dir: &str) -> Vec<(PathBuf, String)> {
    let (mut files, mut found) = (vec![root().join("src").join(dir)], Vec::new());
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let code = fs::read_to_string(&path).unwrap();
            found.push((path, code));
        }
    }
    assert!(!found.is_empty(), "no sources under src/{dir}");
    found
}

/// Commands reach the backends through `backend/`'s facade: none names a concrete backend.
#[test]
fn no_command_names_a_concrete_backend() {
    for (path, code) in sources_under("commands") {
        for concrete in ["backend::docker", "backend::kube"] {
            assert!(!code.contains(concrete), "{} names {concrete}", path.display());
        }
    }
}

/// Reporting has one home, `src/report/`: the rollout (its executor, lock, observe) and the
/// backends say what they have to say as events or return values, and write no output nor
/// record a metric themselves; one writer is shared behind a lock, the progress sink's.
#[test]
fn output_and_metrics_have_one_home() {
    let writes = ["println!", "eprintln!", "print!(", "eprint!(", "io::stdout", "io::stderr", "metrics::"];
    for (path, code) in sources_under("rollout").into_iter().chain(sources_under("backend")) {
        for write in writes {
            assert!(!code.contains(write), "{} uses {write}", path.display());
        }
    }
    let shared: usize =
        sources_under("").iter().map(|(_, code)| code.matches("Mutex<Box<dyn Write").count()).sum();
    assert!(shared <= 2, "{shared} writers shared behind a lock in src/ (at most 2)");
}

/// `watch` is a library (`src/watch/`); its command is the thin edge over it.
#[test]
fn the_watch_command_is_thin() {
    let watch: Vec<_> = sources_under("commands")
        .into_iter()
        .filter(|(path, _)| {
            path.components().any(|c| c.as_os_str().to_str().is_some_and(|c| c.starts_with("watch")))
        })
        .collect();
    assert!(!watch.is_empty(), "no watch command under src/commands");
    let lines: usize = watch.iter().map(|(_, code)| code.lines().count()).sum();
    assert!(lines <= 150, "the watch command's files under src/commands hold {lines} lines (at most 150)");
}

/// The pool file's types stand alone: `model` imports `spec`, never the reverse.
#[test]
fn the_spec_imports_nothing_of_the_model() {
    for (path, code) in sources_under("spec") {
        assert!(
            !code.contains("crate::model") && !code.contains("super::model"),
            "{} imports the model",
            path.display()
        );
    }
}

/// The top-level modules of `src/` depend on each other one way: no chain of `crate::` paths
/// (outside comments and tests) leads from a module back to itself.
#[test]
fn the_modules_of_src_form_no_cycle() {
    let src = root().join("src");
    let mut modules: Vec<String> = fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_owned();
            (p.is_dir() || p.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|m| !["lib", "main", "testing"].contains(&m.as_str()))
        .collect();
    modules.sort();
    modules.dedup();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        if src.join(format!("{module}.rs")).exists() {
            let path = src.join(format!("{module}.rs"));
            files.push((path.clone(), fs::read_to_string(path).unwrap()));
        }
        if src.join(module).is_dir() {
            files.extend(sources_under(module));
        }
        let imports = uses.entry(module.clone()).or_default();
        for (path, code) in files {
            if path.file_name().is_some_and(|f| f == "tests.rs") {
                continue;
            }
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (at, _) in line.match_indices("crate::") {
                    let name: String = line[at + 7..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if name != *module && modules.contains(&name) {
                        imports.insert(name);
                    }
                }
            }
        }
    }
    // Depth-first from each module: reaching it again is a cycle, named with its path.
    for start in &modules {
        let mut stack: Vec<Vec<&String>> = vec![vec![start]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = *path.last().unwrap();
            for next in &uses[last] {
                assert!(
                    next != start,
                    "a module cycle: {} -> {next}",
                    path.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(" -> ")
                );
                if seen.insert(next) {
                    stack.push([path.clone(), vec![next]].concat());
                }
            }
        }
    }
    assert!(
        uses["rollout"].contains("backend") && uses["commands"].contains("rollout"),
        "the scan sees the uses: {uses:?}"
    );
}
