//! The naming rules that the Kubernetes API server and the Docker daemon apply, checked offline
//! so that a name they would refuse fails `validate` instead of a rollout half-way.
//!
//! - Node label keys, label values and taints follow Kubernetes' apimachinery validation
//!   (`IsQualifiedName`, `IsValidLabelValue`, the three taint effects).
//! - Image references follow Docker's reference grammar (distribution/reference, as
//!   `ParseNormalizedNamed` reads a familiar name such as `kindest/node:v1.31.0`).
//! - Container labels follow Docker's own lenient rules: any key that is not empty and has no
//!   whitespace (the CLI's `ValidateLabel`); poolctl also refuses `=` in a key, which no
//!   `--label key=value` or label filter could express.
//!
//! Each check returns why a name is refused, in words, or `None`. All of them are linear in
//! the length of the name and never backtrack.

/// The longest name part of a qualified name (a label key without its prefix), and the
/// longest label value.
pub(crate) const MAX_NAME_LEN: usize = 63;
/// The longest prefix of a qualified name: a DNS-1123 subdomain.
pub(crate) const MAX_PREFIX_LEN: usize = 253;
/// The longest repository path of an image reference.
const MAX_REPOSITORY_LEN: usize = 255;
/// The longest image tag.
const MAX_TAG_LEN: usize = 128;

/// Why `key` is not a Kubernetes label key (or taint key): `[prefix/]name`, where the optional
/// prefix is a DNS-1123 subdomain of at most 253 characters and the name is at most 63
/// characters of `[A-Za-z0-9]`, with `-`, `_` and `.` allowed inside.
pub(crate) fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = key.split_once('/').map_or((None, key), |(prefix, name)| (Some(prefix), name));
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Some(format!("{key:?} has more than one '/': a key is [prefix/]name"));
        }
        if prefix.is_empty() {
            return Some(format!("{key:?} has an empty prefix before '/'"));
        }
        if prefix.len() > MAX_PREFIX_LEN {
            return Some(format!(
                "the prefix of {key:?} is {} characters long; at most {MAX_PREFIX_LEN} are allowed",
                prefix.len()
            ));
        }
        if !is_dns1123_subdomain(prefix) {
            return Some(format!(
                "the prefix {prefix:?} of {key:?} is not a DNS-1123 subdomain: lowercase letters, digits, \
                 '-' and '.', each part starting and ending with a letter or digit"
            ));
        }
    }
    if name.is_empty() {
        return Some(if prefix.is_some() {
            format!("{key:?} has an empty name after '/'")
        } else {
            "a key must not be empty".to_owned()
        });
    }
    name_part_problem(name).map(|problem| format!("the name part of {key:?} {problem}"))
}

/// Why `value` is not a Kubernetes label value (or taint value): empty, or at most 63
/// characters of `[A-Za-z0-9]` with `-`, `_` and `.` allowed inside.
pub(crate) fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return None;
    }
    name_part_problem(value).map(|problem| format!("the value {value:?} {problem}"))
}

/// The rule shared by the name part of a key and a label value.
fn name_part_problem(text: &str) -> Option<String> {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if text.len() > MAX_NAME_LEN {
        Some(format!("is {} characters long; at most {MAX_NAME_LEN} are allowed", text.len()))
    } else if let Some(bad) = text.chars().find(|&c| !inner(c)) {
        Some(format!(
            "contains {bad:?}: only letters, digits, '-', '_' and '.' are allowed (Kubernetes' rule)"
        ))
    } else if !text.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !text.ends_with(|c: char| c.is_ascii_alphanumeric())
    {
        Some("must start and end with a letter or digit (Kubernetes' rule)".to_owned())
    } else {
        None
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`.
fn is_dns1123_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        !label.is_empty()
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    })
}

/// Why `key` cannot be a Docker container label key.
pub(crate) fn container_label_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        Some("a label key must not be empty".to_owned())
    } else if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!("the label key {key:?} contains whitespace or a control character"))
    } else if key.contains('=') {
        Some(format!("the label key {key:?} contains '=': Docker reads `key=value` up to the first '='"))
    } else {
        None
    }
}

/// Why `image` is not an image reference that Docker would accept:
/// `[host[:port]/]path[:tag][@algorithm:hex]`, the path of lowercase components.
pub(crate) fn image_problem(image: &str) -> Option<String> {
    image_error(image).map(|why| format!("invalid image reference {image:?}: {why}"))
}

fn image_error(image: &str) -> Option<String> {
    if image.is_empty() {
        return Some("it is empty".to_owned());
    }
    if image.len() == 64 && image.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Some("a 64-character hexadecimal image ID is not a name; write the name and tag".to_owned());
    }
    if let Some(c) = image.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("it contains {c:?}"));
    }
    let (named, digest) =
        image.split_once('@').map_or((image, None), |(named, digest)| (named, Some(digest)));
    if let Some(problem) = digest.and_then(digest_problem) {
        return Some(problem);
    }
    // The tag follows the last ':' that no '/' follows: `localhost:5000/app` has no tag.
    let last_slash = named.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match named[last_slash..].rfind(':') {
        Some(i) => (&named[..last_slash + i], Some(&named[last_slash + i + 1..])),
        None => (named, None),
    };
    if let Some(problem) = tag.and_then(tag_problem) {
        return Some(problem);
    }
    // As Docker splits a familiar name: the first component is a registry when it is
    // `localhost`, has a '.' or a ':', or has an upper-case letter; otherwise it is a path.
    let (domain, path) = match name.split_once('/') {
        Some((first, rest))
            if first == "localhost"
                || first.contains(['.', ':'])
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (Some(first), rest)
        }
        _ => (None, name),
    };
    if let Some(problem) = domain.and_then(domain_problem) {
        return Some(problem);
    }
    if path.is_empty() {
        return Some("the repository name is empty".to_owned());
    }
    if path.len() > MAX_REPOSITORY_LEN {
        return Some(format!(
            "the repository name is {} characters long; at most {MAX_REPOSITORY_LEN} are allowed",
            path.len()
        ));
    }
    if path.split('/').all(is_path_component) {
        return None;
    }
    if path.to_ascii_lowercase().split('/').all(is_path_component) {
        return Some(format!("the repository name {path:?} must be lowercase"));
    }
    let bad = path.split('/').find(|c| !is_path_component(c)).unwrap_or(path);
    Some(format!(
        "the repository path component {bad:?} is not lowercase letters and digits separated by \
         '.', '_', '__' or dashes"
    ))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    loop {
        let start = i;
        while i < bytes.len() && alnum(bytes[i]) {
            i += 1;
        }
        if i == start {
            return false; // every run of separators sits between alphanumerics
        }
        if i == bytes.len() {
            return true;
        }
        let sep_start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[sep_start..i];
        let dashes = separator.bytes().all(|b| b == b'-');
        if !(matches!(separator, "." | "_" | "__") || dashes) {
            return false;
        }
    }
}

/// `host[:port]`, the host a domain name of `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` parts or
/// an IPv6 address in brackets.
fn domain_problem(domain: &str) -> Option<String> {
    let (host, port) = if let Some(rest) = domain.strip_prefix('[') {
        match rest.split_once(']') {
            Some((address, after)) => {
                let ok = !address.is_empty() && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
                if !ok {
                    return Some(format!("the registry {domain:?} has an invalid IPv6 address"));
                }
                let port = (!after.is_empty()).then(|| after.strip_prefix(':').unwrap_or(after));
                (None, port)
            }
            None => return Some(format!("the registry {domain:?} has an unclosed '['")),
        }
    } else {
        domain.split_once(':').map_or((Some(domain), None), |(host, port)| (Some(host), Some(port)))
    };
    if let Some(host) = host {
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        };
        if !host.split('.').all(component_ok) {
            return Some(format!(
                "the registry host {host:?} is not a host name (letters, digits and '-', in parts \
                 separated by '.')"
            ));
        }
    }
    match port {
        Some(port) if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(format!("the registry {domain:?} has an invalid port {port:?}"))
        }
        _ => None,
    }
}

/// `[\w][\w.-]{0,127}`.
fn tag_problem(tag: &str) -> Option<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if tag.is_empty() {
        Some("the tag after ':' is empty".to_owned())
    } else if tag.len() > MAX_TAG_LEN {
        Some(format!("the tag is {} characters long; at most {MAX_TAG_LEN} are allowed", tag.len()))
    } else if !tag.starts_with(word) || !tag.chars().all(|c| word(c) || c == '.' || c == '-') {
        Some(format!(
            "the tag {tag:?} must be letters, digits, '_', '.' and '-', starting with a letter, digit \
             or '_'"
        ))
    } else {
        None
    }
}

/// `algorithm:hex`, with the algorithms Docker knows and their lengths.
fn digest_problem(digest: &str) -> Option<String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Some(format!("the digest {digest:?} is not of the form algorithm:hex (sha256:...)"));
    };
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Some(format!("the digest algorithm {algorithm:?} is not one of sha256, sha384, sha512")),
    };
    let lower_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex.len() == length && lower_hex {
        None
    } else {
        Some(format!("a {algorithm} digest is {length} lowercase hexadecimal characters"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_follow_kubernetes() {
        let long_prefix = format!("{}.io/a", "a".repeat(251));
        for good in [
            "a",
            "node-role.kubernetes.io/worker",
            "example.com/A_b.c-D",
            "k8s.io/x",
            &"a".repeat(63),
            &format!("{}/x", "a".repeat(253)),
        ] {
            assert_eq!(qualified_name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "bad key",
            "a/b/c",
            "/a",
            "a/",
            "-a",
            "a-",
            "Example.com/a",
            "a..b/c",
            "a_b/c",
            &"a".repeat(64),
            &long_prefix,
            "wörker",
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn label_values_follow_kubernetes() {
        for good in ["", "a", "1.10", "A-b_c.D", &"a".repeat(63)] {
            assert_eq!(label_value_problem(good), None, "{good}");
        }
        for bad in ["a b", "-a", "a.", "a/b", &"a".repeat(64), "é"] {
            assert!(label_value_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn container_labels_are_lenient() {
        for good in ["team", "com.example.Team_1", "a/b:c", "ünïcode"] {
            assert_eq!(container_label_problem(good), None, "{good}");
        }
        for bad in ["", "a b", "a=b", "a\u{1b}b", "a\tb"] {
            assert!(container_label_problem(bad).is_some(), "{bad:?} accepted");
        }
    }

    #[test]
    fn image_references_follow_dockers_grammar() {
        let sha = "a".repeat(64);
        for good in [
            "busybox",
            "poolctl-busybox:latest",
            "kindest/node:v1.31.0",
            "docker.io/library/ubuntu:24.04",
            "localhost/app",
            "localhost:5000/team/app:1.0_rc-1",
            "registry.example.com:443/a__b/c--d/e.f:TAG",
            "[::1]:5000/app",
            "Registry.Example.com/app",
            "localhost:5000",
            &format!("busybox@sha256:{sha}"),
            &format!("busybox:1@sha256:{sha}"),
            &format!("a:{}", "t".repeat(128)),
        ] {
            assert_eq!(image_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("UPPER:case", "must be lowercase"),
            ("a b", "contains ' '"),
            ("app:", "tag after ':' is empty"),
            ("app:-x", "the tag \"-x\""),
            (&format!("a:{}", "t".repeat(129)), "at most 128"),
            ("a..b", "path component \"a..b\""),
            ("a___b", "path component"),
            ("-a", "path component"),
            ("a/", "path component \"\""),
            ("host.com/", "repository name is empty"),
            ("my_host.com/app", "registry host"),
            ("localhost:port/app", "invalid port"),
            ("[zz]:5000/app", "IPv6"),
            ("app@sha256:abc", "64 lowercase"),
            ("app@md5:0123456789abcdef0123456789abcdef", "algorithm \"md5\""),
            ("app@nodigest", "algorithm:hex"),
            (&sha, "hexadecimal image ID"),
            (&"a".repeat(256), "at most 255"),
        ] {
            let problem = image_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(problem.contains(why), "{bad:?}: {problem}");
        }
    }
}
